//! What redrive prints on stdout: the plan, each record of a dry run and
//! each record that failed again, and a summary; as text for people or as
//! JSON lines (`--json`). Logs go to stderr as usual.

use std::collections::BTreeMap;

use serde_json::json;

use super::reader::Range;
use super::record::{DeadLetter, Plan};

pub struct Report {
    json: bool,
    pub dry_run: bool,
    pub read: u64,
    pub redriven: BTreeMap<String, u64>,
    pub skipped: u64,
    pub failed_again: u64,
}

impl Report {
    pub fn new(json: bool, dry_run: bool) -> Self {
        Report {
            json,
            dry_run,
            read: 0,
            redriven: BTreeMap::new(),
            skipped: 0,
            failed_again: 0,
        }
    }

    /// Before anything is sent: how much there is and from where.
    pub fn plan(&self, topic: &str, group: &str, ranges: Option<&BTreeMap<i32, Range>>) {
        let Some(ranges) = ranges else {
            self.line(
                json!({"plan": {"dead_letter_topic": topic, "group": group, "exists": false, "records": 0}}),
                format!("The dead-letter topic {topic} does not exist: nothing to redrive."),
            );
            return;
        };
        let total: i64 = ranges.values().map(|r| (r.end - r.start).max(0)).sum();
        let partitions: BTreeMap<String, serde_json::Value> = ranges
            .iter()
            .map(|(p, r)| (p.to_string(), json!({"from": r.start, "to": r.end})))
            .collect();
        let text_ranges: Vec<String> = ranges
            .iter()
            .filter(|(_, r)| r.start < r.end)
            .map(|(p, r)| format!("partition {p}: offsets {}..{}", r.start, r.end))
            .collect();
        self.line(
            json!({"plan": {"dead_letter_topic": topic, "group": group, "exists": true,
                            "records": total, "partitions": partitions, "dry_run": self.dry_run}}),
            format!(
                "{} {total} record{} of {topic} after the position of group {group}{}{}",
                if self.dry_run {
                    "Would redrive"
                } else {
                    "Redriving"
                },
                if total == 1 { "" } else { "s" },
                if text_ranges.is_empty() { "" } else { " (" },
                if text_ranges.is_empty() {
                    String::new()
                } else {
                    format!("{})", text_ranges.join(", "))
                },
            ),
        );
    }

    /// A record of a dry run: what would happen to it.
    pub fn would(&mut self, record: &DeadLetter, plan: &Plan) {
        self.read += 1;
        let (action, topic, reason) = match plan {
            Plan::Send { topic } => {
                *self.redriven.entry(topic.clone()).or_default() += 1;
                ("send", Some(topic.as_str()), None)
            }
            Plan::Skip => {
                self.skipped += 1;
                ("skip", None, Some("not one of --filter-event-type"))
            }
            Plan::Fail(why) => {
                self.failed_again += 1;
                ("fail", None, Some(why.as_str()))
            }
        };
        self.record(action, record, topic, reason);
    }

    /// A record that failed again and is back in the dead-letter topic.
    pub fn failed(&mut self, record: &DeadLetter, topic: Option<&str>, reason: &str) {
        self.failed_again += 1;
        self.record("failed", record, topic, Some(reason));
    }

    fn record(&self, action: &str, record: &DeadLetter, topic: Option<&str>, reason: Option<&str>) {
        let text = |v: Option<&[u8]>| v.map(|v| String::from_utf8_lossy(v).into_owned());
        let (id, event_type, key, before) = (
            text(record.event_id()),
            text(record.event_type()),
            text(record.key.as_deref()),
            text(record.reason()),
        );
        self.line(
            json!({"record": {"action": action, "partition": record.partition,
                              "offset": record.offset, "event_id": id,
                              "event_type": event_type, "key": key, "topic": topic,
                              "reason": reason, "dead_lettered_because": before}}),
            format!(
                "{action:<6} {}@{} event {} (type {}, key {}){}{}",
                record.partition,
                record.offset,
                id.as_deref().unwrap_or("(none)"),
                event_type.as_deref().unwrap_or("(none)"),
                key.as_deref().unwrap_or("(null)"),
                topic.map(|t| format!(" to {t}")).unwrap_or_default(),
                reason.map(|r| format!(": {r}")).unwrap_or_default(),
            ),
        );
    }

    /// The end: counts and where the group stands.
    pub fn summary(&self, topic: &str, group: &str, committed: &BTreeMap<i32, i64>) {
        let redriven: u64 = self.redriven.values().sum();
        let by_topic: Vec<String> = self
            .redriven
            .iter()
            .map(|(t, n)| format!("{t} {n}"))
            .collect();
        let position: Vec<String> = committed.iter().map(|(p, o)| format!("{p}:{o}")).collect();
        let verb = if self.dry_run { "would be " } else { "" };
        self.line(
            json!({"summary": {"dead_letter_topic": topic, "group": group,
                               "dry_run": self.dry_run, "read": self.read,
                               "redriven": redriven, "redriven_by_topic": self.redriven,
                               "skipped": self.skipped, "failed_again": self.failed_again,
                               "position": committed}}),
            format!(
                "{} read: {redriven} {verb}redriven{}, {} {verb}skipped (put back at the end \
                 of {topic}), {} {}failed again{}. Group {group} {}{}.",
                self.read,
                if by_topic.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", by_topic.join(", "))
                },
                self.skipped,
                self.failed_again,
                if self.dry_run { "would have " } else { "" },
                if self.dry_run {
                    String::new()
                } else {
                    format!(" (back in {topic} with the new walrelay.reason)")
                },
                if self.dry_run {
                    "is left where it was"
                } else {
                    "now stands at "
                },
                if self.dry_run {
                    String::new()
                } else {
                    position.join(", ")
                },
            ),
        );
    }

    fn line(&self, json: serde_json::Value, text: String) {
        if self.json {
            crate::outln!("{json}");
        } else {
            crate::outln!("{text}");
        }
    }
}
