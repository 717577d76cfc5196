//! `walrelay audit --since TIME|DURATION`: proves that every outbox row of
//! a time window has its event in the topic it routes to, or names the
//! ones that do not and the `walrelay replay` that publishes them.
//!
//! Memory stays bounded by working one topic at a time: the event ids of
//! that topic's rows in the window, as 128-bit hashes in a sorted array
//! (16 bytes and a flag a row), are marked off while the topic is read
//! from shortly before the rows' earliest time to its end; a second pass
//! over the same rows (one read-only snapshot) names those left unmarked.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::json;
use tokio_postgres::Client;
use tracing::{debug, info};

use super::meter::Meter;
use super::rows::{self, mapped_tables, OutboxTable, RowCursor};
use crate::config::{AuditArgs, AuditFlags, Settings, Source};
use crate::error::{Error, Result};
use crate::kafka::reader::TopicReader;
use crate::postgres::names::{quote_ident, quote_literal};
use crate::postgres::pgoutput::Datum;
use crate::postgres::setup;
use crate::postgres::sql_error;

/// Missing ids the printed replay command lists one by one; past it, the
/// command selects the window's rows of the topics concerned instead.
const LIST_IDS: usize = 1000;

/// The window, resolved once: both passes and the printed command use it.
struct Window {
    since: String,
    until: String,
    column: String,
}

impl Window {
    async fn resolve(client: &Client, flags: &AuditFlags) -> Result<Window> {
        let since = match humantime::parse_duration(flags.since.trim()) {
            Ok(back) => {
                client
                    .query_one(
                        "SELECT (now() - make_interval(secs => $1::float8))::text",
                        &[&back.as_secs_f64()],
                    )
                    .await
            }
            Err(_) => {
                client
                    .query_one("SELECT $1::text::timestamptz::text", &[&flags.since])
                    .await
            }
        }
        .map_err(|e| {
            sql_error(
                format!(
                    "--since {:?} is neither a duration (2h, 7days) nor a time Postgres reads \
                     (2026-12-01 10:00+00)",
                    flags.since
                ),
                e,
            )
        })?
        .get(0);
        let until = client
            .query_one(
                "SELECT COALESCE($1::text::timestamptz, now())::text",
                &[&flags.until],
            )
            .await
            .map_err(|e| sql_error(format!("--until {:?} is not a time", flags.until), e))?
            .get(0);
        Ok(Window {
            since,
            until,
            column: flags.time_column.clone(),
        })
    }

    /// The window as a SQL condition.
    fn predicate(&self) -> String {
        let column = ident(&self.column);
        format!(
            "{column} >= {} AND {column} < {}",
            quote_literal(&self.since),
            quote_literal(&self.until)
        )
    }
}

/// One topic's share of the window.
#[derive(Default)]
struct TopicRows {
    /// The route-by values that route here.
    routes: BTreeSet<String>,
    rows: u64,
    /// The earliest row's time, in Unix milliseconds.
    earliest_ms: i64,
}

/// What the audit found so far.
#[derive(Default)]
struct Findings {
    rows: u64,
    missing: u64,
    /// The first missing ids, for the replay command.
    listed: Vec<String>,
    /// Route-by values of topics with missing events.
    routes: BTreeSet<String>,
    /// Rows that route to no topic at all.
    unroutable: u64,
    /// A missing row has a NULL event id.
    null_ids: bool,
    /// Missing events whose copy is in the dead-letter topic.
    dead_lettered: u64,
}

/// The event ids (`walrelay.event-id`) of the dead-letter topic's records
/// from `from_ms` on: a missing event found there was poison, not lost.
/// The topic holds only poison events, so the set stays small.
fn dead_lettered(
    reader: &TopicReader,
    settings: &Settings,
    from_ms: i64,
) -> Result<std::collections::HashSet<u128>> {
    let mut ids = std::collections::HashSet::new();
    tokio::task::block_in_place(|| {
        reader.scan(settings.dead_letter_topic(), from_ms, |message| {
            use rdkafka::message::{Headers, Message};
            let id = message.headers().and_then(|headers| {
                headers
                    .iter()
                    .find(|h| h.key == "walrelay.event-id")
                    .and_then(|h| h.value)
            });
            if let Some(id) = id {
                ids.insert(hash(Some(id)));
            }
        })
    })?;
    Ok(ids)
}

pub async fn run(args: AuditArgs) -> Result<()> {
    let settings = Settings::from_args(&args.run)?;
    let flags = &args.audit;
    if settings.source == Source::Messages {
        return Err(Error::permanent(
            "walrelay audit checks the rows of the outbox table, and --source messages has none",
        ));
    }
    let client = setup::connect(&settings.pg).await?;
    rows::begin(&client, None).await?;
    let window = Window::resolve(&client, flags).await?;
    let tables: Vec<OutboxTable> = mapped_tables(&client, &settings)
        .await?
        .into_iter()
        .map(|(table, _)| table)
        .collect();
    for table in &tables {
        if !table.has_column(&window.column) {
            return Err(Error::permanent(format!(
                "table {} has no column {:?} to place rows in the window: name one with \
                 --time-column",
                table.table, window.column
            )));
        }
    }
    let mut found = Findings::default();
    let topics = census(&client, &settings, &tables, &window, &mut found).await?;
    let out = Output { json: flags.json };
    out.window(&window, &topics, found.rows);
    let reader = TopicReader::new(&settings.kafka_brokers, &args.run.kafka.properties())?;
    let earliest = topics.values().map(|t| t.earliest_ms).min().unwrap_or(0);
    let parked = dead_lettered(
        &reader,
        &settings,
        earliest - flags.margin.as_millis() as i64,
    )?;
    let mut meter = Meter::new("audit", "rows", found.rows);
    let mut checked = found.unroutable;
    for (topic, share) in &topics {
        let ids = id_cursor_select(&settings, &window, share);
        let mut hashes = Vec::with_capacity(share.rows as usize);
        for_each_id(&client, &tables, &settings.mapping.id, &ids, |id| {
            hashes.push(hash(id))
        })
        .await?;
        // An id in two rows (two tables) is one event: found once, found.
        hashes.sort_unstable();
        hashes.dedup();
        let mut seen = vec![false; hashes.len()];
        let from_ms = share.earliest_ms - flags.margin.as_millis() as i64;
        let mut shown = std::time::Instant::now();
        let read = tokio::task::block_in_place(|| {
            let mut read = 0u64;
            reader.scan(topic, from_ms, |message| {
                use rdkafka::message::{Headers, Message};
                read += 1;
                if read % 10_000 == 0 && shown.elapsed() >= std::time::Duration::from_secs(5) {
                    shown = std::time::Instant::now();
                    info!(topic, records = read, "audit: reading the topic back");
                }
                let Some(headers) = message.headers() else {
                    return;
                };
                if let Some(id) = headers.iter().find(|h| h.key == "id").and_then(|h| h.value) {
                    if let Ok(i) = hashes.binary_search(&hash(Some(id))) {
                        seen[i] = true;
                    }
                }
            })
        })?;
        debug!(topic, records = read, rows = share.rows, "topic read back");
        for_each_id(&client, &tables, &settings.mapping.id, &ids, |id| {
            let present = id.is_some() && hashes.binary_search(&hash(id)).is_ok_and(|i| seen[i]);
            if !present {
                let text = id.map_or_else(
                    || "(NULL)".into(),
                    |b| String::from_utf8_lossy(b).into_owned(),
                );
                let in_dead_letter = id.is_some_and(|id| parked.contains(&hash(Some(id))));
                out.missing(
                    &text,
                    topic,
                    in_dead_letter.then(|| settings.dead_letter_topic()),
                );
                found.dead_lettered += u64::from(in_dead_letter);
                // A NULL id cannot be selected by id: the command then
                // selects by window.
                found.null_ids |= id.is_none();
                if found.listed.len() < LIST_IDS {
                    found.listed.push(text);
                }
                found.missing += 1;
                found.routes.extend(share.routes.iter().cloned());
            }
        })
        .await?;
        checked += share.rows;
        meter.update(checked);
    }
    meter.finish(checked);
    let _ = client.batch_execute("COMMIT").await;
    let replay = (found.missing > 0).then(|| replay_command(&settings, &window, &found));
    out.result(&found, replay.as_deref());
    match (found.missing, found.unroutable) {
        (0, 0) => Ok(()),
        (missing, unroutable) => Err(Error::permanent(format!(
            "{missing} of {} outbox rows between {} and {} have no event in their topic{}",
            found.rows,
            window.since,
            window.until,
            if unroutable > 0 {
                format!(", and {unroutable} route to no topic (poison: see --on-poison)")
            } else {
                String::new()
            }
        ))),
    }
}

/// The window's rows per topic (and those no topic takes).
async fn census(
    client: &Client,
    settings: &Settings,
    tables: &[OutboxTable],
    window: &Window,
    found: &mut Findings,
) -> Result<BTreeMap<String, TopicRows>> {
    let mut topics: BTreeMap<String, TopicRows> = BTreeMap::new();
    for table in tables {
        let sql = format!(
            "SELECT {route}::text, count(*), \
                    floor(extract(epoch FROM min({time})::timestamptz) * 1000)::bigint \
             FROM {} WHERE {} GROUP BY 1",
            table.table.quoted(),
            window.predicate(),
            route = ident(&settings.mapping.route_by),
            time = ident(&window.column),
        );
        let rows = client
            .query(&sql, &[])
            .await
            .map_err(|e| sql_error(format!("cannot count the rows of {}", table.table), e))?;
        for row in rows {
            let (route, count, earliest): (Option<String>, i64, i64) =
                (row.get(0), row.get(1), row.get(2));
            found.rows += count as u64;
            let Some(Ok(topic)) = route.as_deref().map(|r| settings.router.topic(r)) else {
                found.unroutable += count as u64;
                continue;
            };
            let share = topics.entry(topic).or_insert_with(|| TopicRows {
                earliest_ms: earliest,
                ..TopicRows::default()
            });
            share.routes.extend(route);
            share.rows += count as u64;
            share.earliest_ms = share.earliest_ms.min(earliest);
        }
    }
    Ok(topics)
}

/// The condition that selects one topic's rows of the window.
fn id_cursor_select(settings: &Settings, window: &Window, share: &TopicRows) -> String {
    let routes: Vec<String> = share.routes.iter().map(|r| quote_literal(r)).collect();
    format!(
        "{} AND {}::text IN ({})",
        window.predicate(),
        ident(&settings.mapping.route_by),
        routes.join(", ")
    )
}

/// Calls `each` with the event id (column `id_column`) of every row
/// `predicate` selects, as the stream would carry it: the `id` header's bytes.
async fn for_each_id(
    client: &Client,
    tables: &[OutboxTable],
    id_column: &str,
    predicate: &str,
    mut each: impl FnMut(Option<&[u8]>),
) -> Result<()> {
    for table in tables {
        let select = format!(
            "SELECT {} FROM {} WHERE {predicate}",
            quote_ident(id_column),
            table.table.quoted()
        );
        let mut cursor = RowCursor::declare(client, table, &select, "the window's rows").await?;
        while let Some(batch) = cursor.next_batch().await? {
            for tuple in batch {
                match tuple.first() {
                    Some(Datum::Text(id)) => each(Some(id)),
                    _ => each(None),
                }
            }
        }
    }
    Ok(())
}

/// 128 bits of an event id: two SipHashes, so that a collision (which
/// would hide a missing event) is out of reach for any outbox.
fn hash(id: Option<&[u8]>) -> u128 {
    let half = |seed: u8| {
        let mut h = DefaultHasher::new();
        seed.hash(&mut h);
        id.hash(&mut h);
        h.finish() as u128
    };
    (half(0) << 64) | half(1)
}

/// An identifier for a printed command: bare when that reads the same.
fn ident(name: &str) -> String {
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
fn replay_command(settings: &Settings, window: &Window, found: &Findings) -> String {
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
    format!(
        "walrelay replay --where {} --order-by {}",
        shell_quote(&predicate),
        shell_quote(&ident(&window.column))
    )
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
struct Output {
    json: bool,
}

impl Output {
    fn window(&self, window: &Window, topics: &BTreeMap<String, TopicRows>, rows: u64) {
        if self.json {
            let topics: Vec<_> = topics
                .iter()
                .map(|(t, s)| json!({"topic": t, "rows": s.rows}))
                .collect();
            println!(
                "{}",
                json!({"window": {"since": window.since, "until": window.until,
                    "time_column": window.column, "rows": rows, "topics": topics}})
            );
            return;
        }
        println!(
            "walrelay audit: {rows} outbox rows with {} from {} to {}",
            window.column, window.since, window.until
        );
        for (topic, share) in topics {
            println!("  {topic}: {} rows", share.rows);
        }
    }

    fn missing(&self, id: &str, topic: &str, dead_letter: Option<&str>) {
        if self.json {
            println!(
                "{}",
                json!({"missing": {"id": id, "topic": topic, "dead_letter_topic": dead_letter}})
            );
        } else if let Some(parked) = dead_letter {
            println!("missing: event {id} in {topic} (poison: its copy is in {parked})");
        } else {
            println!("missing: event {id} in {topic}");
        }
    }

    fn result(&self, found: &Findings, replay: Option<&str>) {
        let ok = found.missing == 0 && found.unroutable == 0;
        if self.json {
            println!(
                "{}",
                json!({"result": {"ok": ok, "rows": found.rows, "missing": found.missing,
                    "dead_lettered": found.dead_lettered, "unroutable": found.unroutable,
                    "replay": replay}})
            );
            return;
        }
        if found.unroutable > 0 {
            println!(
                "{} rows route to no topic (a NULL route-by value, or one --topic-regex \
                 refuses): they are poison, see --on-poison",
                found.unroutable
            );
        }
        if ok {
            println!(
                "audit passed: every one of the {} rows has its event in its topic",
                found.rows
            );
        }
        if found.dead_lettered > 0 {
            println!(
                "{} of the missing events are in the dead-letter topic: they were poison, \
                 not lost; fix their cause before publishing them again",
                found.dead_lettered
            );
        }
        if let Some(command) = replay {
            println!(
                "{} of {} events are missing. To publish them again, with this audit's \
                 connection, mapping and Kafka flags:\n  {command}",
                found.missing, found.rows
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
            r#"walrelay replay --where "id IN ('a-1', 'it''s')" --order-by "created_at""#
        );
        found.missing = 5000;
        assert_eq!(
            replay_command(&settings(), &window(), &found),
            "walrelay replay --where \"created_at >= '2026-12-01 10:00:00+00' AND created_at < \
             '2026-12-01 12:00:00+00' AND event_type IN ('OrderPlaced')\" --order-by \"created_at\""
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

    #[test]
    fn ids_hash_apart_and_a_null_id_is_its_own() {
        assert_ne!(hash(Some(b"a")), hash(Some(b"b")));
        assert_ne!(hash(None), hash(Some(b"")));
        assert_eq!(hash(Some(b"a")), hash(Some(b"a")));
    }
}
