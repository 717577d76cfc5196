//! What `walrelay audit` prints: the window, each missing event, the
//! result, and the `walrelay replay` that publishes the missing events,
//! quoted so that it can be pasted into a shell as printed.

use std::collections::BTreeMap;

use serde_json::json;

use super::{Findings, TopicRows, Window};
use crate::config::Settings;
use crate::postgres::names::{quote_ident, quote_literal};

/// Missing ids the printed replay command lists one by one; past it, the
/// command selects the window's rows of the topics concerned instead.
pub(super) const LIST_IDS: usize = 1000;

/// An identifier for a printed command: bare when that reads the same.
pub(super) fn ident(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        name.to_string()
    } else {
        quote_ident(name)
    }
}

/// The `walrelay replay` that publishes the missing events: by id when
/// they are few, else the window's rows of the topics concerned.
pub(super) fn replay_command(settings: &Settings, window: &Window, found: &Findings) -> String {
    let predicate = if found.missing as usize <= found.listed.len() && !found.null_ids {
        let ids: Vec<String> = found.listed.iter().map(|id| quote_literal(id)).collect();
        format!("{} IN ({})", ident(&settings.mapping.id), ids.join(", "))
    } else {
        let routes: Vec<String> = found.routes.iter().map(|r| quote_literal(r)).collect();
        format!(
            "{} AND {} IN ({})",
            window.predicate(),
            ident(&settings.mapping.route_by),
            routes.join(", ")
        )
    };
    // No --order-by: replay picks the order that keeps each key's events in
    // the order they were written, or refuses and names the fix
    // (`lifecycle::order`); the window's time column may not keep it.
    format!("walrelay replay --where {}", shell_quote(&predicate))
}

/// Double quotes for a shell, with what they do not protect escaped.
fn shell_quote(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        if matches!(c, '"' | '\\' | '$' | '`') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// What the audit prints on stdout: text, or one JSON object a line.
pub(super) struct Output {
    pub(super) json: bool,
}

impl Output {
    pub(super) fn window(&self, window: &Window, topics: &BTreeMap<String, TopicRows>, rows: u64) {
        if self.json {
            let topics: Vec<_> = topics
                .iter()
                .map(|(t, s)| json!({"topic": t, "rows": s.rows}))
                .collect();
            crate::outln!(
                "{}",
                json!({"window": {"since": window.since, "until": window.until,
                    "time_column": window.column, "rows": rows, "topics": topics}})
            );
            return;
        }
        crate::outln!(
            "walrelay audit: {rows} outbox rows with {} from {} to {}",
            window.column,
            window.since,
            window.until
        );
        for (topic, share) in topics {
            crate::outln!("  {topic}: {} rows", share.rows);
        }
    }

    pub(super) fn missing(&self, id: &str, topic: &str, dead_letter: Option<&str>) {
        if self.json {
            crate::outln!(
                "{}",
                json!({"missing": {"id": id, "topic": topic, "dead_letter_topic": dead_letter}})
            );
        } else if let Some(parked) = dead_letter {
            crate::outln!("missing: event {id} in {topic} (poison: its copy is in {parked})");
        } else {
            crate::outln!("missing: event {id} in {topic}");
        }
    }

    /// A topic rows route to that the cluster does not have.
    pub(super) fn absent(&self, topic: &str, brokers: &str, rows: u64) {
        if self.json {
            crate::outln!(
                "{}",
                json!({"absent_topic": {"topic": topic, "brokers": brokers, "rows": rows}})
            );
        } else {
            crate::outln!(
                "missing topic: {topic} does not exist at {brokers}, so the events of its \
                 {rows} rows are missing with it (is --kafka-brokers the cluster walrelay \
                 run publishes to?)"
            );
        }
    }

    pub(super) fn result(&self, found: &Findings, replay: Option<&str>) {
        let ok = found.missing == 0 && found.unroutable == 0;
        if self.json {
            crate::outln!(
                "{}",
                json!({"result": {"ok": ok, "rows": found.rows, "missing": found.missing,
                    "dead_lettered": found.dead_lettered, "unroutable": found.unroutable,
                    "absent_topics": found.absent, "replay": replay}})
            );
            return;
        }
        if found.unroutable > 0 {
            crate::outln!(
                "{} rows route to no topic (a NULL route-by value, or one --topic-regex \
                 refuses): they are poison, see --on-poison",
                found.unroutable
            );
        }
        if found.rows == 0 {
            crate::outln!("audit passed: nothing in this window, no outbox row to check");
        } else if ok {
            crate::outln!(
                "audit passed: every one of the {} rows has its event in its topic",
                found.rows
            );
        }
        if found.dead_lettered > 0 {
            crate::outln!(
                "{} of the missing events are in the dead-letter topic: they were poison, \
                 not lost; fix their cause before publishing them again",
                found.dead_lettered
            );
        }
        if let Some(command) = replay {
            crate::outln!(
                "{} of {} events are missing. To publish them again, with this audit's \
                 connection, mapping and Kafka flags:\n  {command}",
                found.missing,
                found.rows
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window() -> Window {
        Window {
            since: "2026-12-01 10:00:00+00".into(),
            until: "2026-12-01 12:00:00+00".into(),
            column: "created_at".into(),
        }
    }

    fn settings() -> Settings {
        Settings::from_args(&crate::config::run_args(&[])).unwrap()
    }

    #[test]
    fn a_few_missing_events_are_replayed_by_id_and_many_by_window_and_topic() {
        let mut found = Findings {
            missing: 2,
            listed: vec!["a-1".into(), "it's".into()],
            routes: ["OrderPlaced".to_string()].into(),
            ..Findings::default()
        };
        assert_eq!(
            replay_command(&settings(), &window(), &found),
            r#"walrelay replay --where "id IN ('a-1', 'it''s')""#
        );
        found.missing = 5000;
        assert_eq!(
            replay_command(&settings(), &window(), &found),
            "walrelay replay --where \"created_at >= '2026-12-01 10:00:00+00' AND created_at < \
             '2026-12-01 12:00:00+00' AND event_type IN ('OrderPlaced')\""
        );
        found.missing = 2;
        found.null_ids = true;
        assert!(replay_command(&settings(), &window(), &found).contains("created_at >="));
    }

    #[test]
    fn a_printed_command_survives_the_shell() {
        assert_eq!(
            shell_quote(r#"a "b" $c `d` \e"#),
            r#""a \"b\" \$c \`d\` \\e""#
        );
        assert_eq!(ident("created_at"), "created_at");
        assert_eq!(ident("CreatedAt"), "\"CreatedAt\"");
    }
}
