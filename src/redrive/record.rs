//! One dead-letter record and what redrive does with it: the event goes
//! back to the topic named in its `walrelay.original-topic` header, with its
//! key, value and headers as `run` sent them (walrelay's own `walrelay.*`
//! headers taken off); a record redrive does not send, or that fails
//! again, goes back to the end of the dead-letter topic whole, its
//! `walrelay.reason` the newest one.

use std::borrow::Cow;

use bytes::Bytes;

use crate::sink::{Header, OwnedRecord};

use crate::delivery::dead_letter::{is_own, EVENT_ID, ORIGINAL_TIMESTAMP, ORIGINAL_TOPIC, REASON};
/// The header `run` copies the event type into (`outbox/mapping.rs`).
const EVENT_TYPE: &str = "event_type";

/// A record read from the dead-letter topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    /// The event's own headers, in order.
    pub event_headers: Vec<Header>,
    /// walrelay's headers, in order.
    pub own_headers: Vec<Header>,
    /// The record's timestamp in the dead-letter topic, in ms.
    pub timestamp_ms: Option<i64>,
}

/// What redrive does with a dead-letter record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Send the event to its original topic.
    Send { topic: String },
    /// Not one of `--filter-event-type`: back to the end of the dead-letter
    /// topic as it is, so the group can move past it without losing it.
    Skip,
    /// It cannot be sent: back to the dead-letter topic with this reason.
    Fail(String),
}

impl DeadLetter {
    /// Splits a record's headers into the event's and walrelay's.
    pub fn new(
        partition: i32,
        offset: i64,
        key: Option<Bytes>,
        value: Option<Bytes>,
        headers: Vec<Header>,
        timestamp_ms: Option<i64>,
    ) -> Self {
        let (own_headers, event_headers) = headers.into_iter().partition(|(name, _)| is_own(name));
        DeadLetter {
            partition,
            offset,
            key,
            value,
            event_headers,
            own_headers,
            timestamp_ms,
        }
    }

    /// What to do with it; `event_types` empty means every type.
    pub fn plan(&self, event_types: &[String]) -> Plan {
        if !event_types.is_empty() {
            let selected = self
                .event_type()
                .is_some_and(|t| event_types.iter().any(|e| e.as_bytes() == t));
            if !selected {
                return Plan::Skip;
            }
        }
        match own(&self.own_headers, ORIGINAL_TOPIC) {
            Some(topic) if !topic.is_empty() => Plan::Send {
                topic: String::from_utf8_lossy(topic).into_owned(),
            },
            _ => Plan::Fail(format!(
                "redrive: the record has no {ORIGINAL_TOPIC} header, so the event never had a \
                 topic (a NULL route-by value, or a value --topic-regex does not match); fix \
                 the outbox row and publish it with walrelay replay --where \"id = '…'\""
            )),
        }
    }

    /// The event id: walrelay's header, else the event's `id`.
    pub fn event_id(&self) -> Option<&[u8]> {
        own(&self.own_headers, EVENT_ID).or_else(|| own(&self.event_headers, "id"))
    }

    pub fn event_type(&self) -> Option<&[u8]> {
        own(&self.event_headers, EVENT_TYPE)
    }

    /// Why it was dead-lettered last.
    pub fn reason(&self) -> Option<&[u8]> {
        own(&self.own_headers, REASON)
    }

    /// The event's timestamp: the first one the dead-letter topic gave it.
    pub fn event_timestamp_ms(&self) -> Option<i64> {
        own(&self.own_headers, ORIGINAL_TIMESTAMP)
            .and_then(|t| std::str::from_utf8(t).ok()?.parse().ok())
            .or(self.timestamp_ms)
    }

    /// The event as `run` would have sent it to `topic`. Its partition is
    /// the key's, as with `run` (a dead-letter record does not say whether
    /// a partition column chose another).
    pub fn redriven(&self, topic: &str) -> OwnedRecord {
        OwnedRecord {
            topic: topic.to_string(),
            key: self.key.clone(),
            value: self.value.clone(),
            headers: self.event_headers.clone(),
            partition: None,
        }
    }

    /// The whole record again for the end of `dead_letter_topic`: its
    /// headers as they were, `reason` (when it failed again) in place of
    /// the old one, and its first timestamp kept in a header.
    pub fn returned(&self, dead_letter_topic: &str, reason: Option<&str>) -> OwnedRecord {
        let mut headers = self.event_headers.clone();
        let mut own_headers = self.own_headers.clone();
        if let Some(reason) = reason {
            set(&mut own_headers, REASON, reason.to_string());
        }
        if let Some(ts) = self.event_timestamp_ms() {
            set(&mut own_headers, ORIGINAL_TIMESTAMP, ts.to_string());
        }
        headers.extend(own_headers);
        OwnedRecord {
            topic: dead_letter_topic.to_string(),
            key: self.key.clone(),
            value: self.value.clone(),
            headers,
            partition: None,
        }
    }

    /// A redriven record Kafka refused, as a dead-letter record again: the
    /// record as sent (key, value, the event's headers) with this one's
    /// walrelay headers.
    pub fn with_refused(&self, refused: OwnedRecord) -> DeadLetter {
        DeadLetter {
            key: refused.key,
            value: refused.value,
            event_headers: refused.headers,
            ..self.clone()
        }
    }
}

/// The value of the first header called `name`.
fn own<'a>(headers: &'a [Header], name: &str) -> Option<&'a [u8]> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, v)| v.as_deref())
}

/// Replaces the header `name`, or adds it at the end.
fn set(headers: &mut Vec<Header>, name: &'static str, value: String) {
    let value = Some(Bytes::from(value));
    match headers.iter_mut().find(|(n, _)| n == name) {
        Some(header) => header.1 = value,
        None => headers.push((Cow::Borrowed(name), value)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(name: &'static str, value: &str) -> Header {
        (Cow::Borrowed(name), Some(Bytes::from(value.to_string())))
    }

    /// A record as `delivery/poison.rs` writes it.
    fn dead_letter(event_type: &str) -> DeadLetter {
        DeadLetter::new(
            2,
            40,
            Some(Bytes::from_static(b"order-1")),
            Some(Bytes::from_static(b"{}")),
            vec![
                header("id", "e-1"),
                header("event_type", event_type),
                header("walrelay.reason", "too big"),
                header("walrelay.event-id", "e-1"),
                header("walrelay.commit-lsn", "0/16B3748"),
                header("walrelay.original-topic", "outbox.event.X"),
            ],
            Some(1_700_000_000_000),
        )
    }

    #[test]
    fn the_redriven_event_has_its_key_value_and_headers_without_walrelay_s_own() {
        let record = dead_letter("X");
        assert_eq!(
            record.plan(&[]),
            Plan::Send {
                topic: "outbox.event.X".into()
            }
        );
        let sent = record.redriven("outbox.event.X");
        assert_eq!(sent.topic, "outbox.event.X");
        assert_eq!(sent.key.as_deref(), Some(&b"order-1"[..]));
        assert_eq!(sent.value.as_deref(), Some(&b"{}"[..]));
        assert_eq!(
            sent.headers,
            vec![header("id", "e-1"), header("event_type", "X")]
        );
        assert_eq!(record.event_id(), Some(&b"e-1"[..]));
    }

    #[test]
    fn a_record_of_another_event_type_is_skipped_and_one_without_a_topic_fails() {
        let only = |types: &[&str]| types.iter().map(|t| t.to_string()).collect::<Vec<_>>();
        assert_eq!(dead_letter("Y").plan(&only(&["X"])), Plan::Skip);
        assert!(matches!(
            dead_letter("X").plan(&only(&["Y", "X"])),
            Plan::Send { .. }
        ));
        let mut no_topic = dead_letter("X");
        no_topic.own_headers.retain(|(n, _)| n != ORIGINAL_TOPIC);
        let Plan::Fail(why) = no_topic.plan(&[]) else {
            panic!("a record without a topic was sent");
        };
        assert!(why.contains("walrelay replay --where"), "{why}");
    }

    #[test]
    fn a_record_put_back_keeps_everything_with_the_new_reason_and_its_first_timestamp() {
        let record = dead_letter("X");
        let back = record.returned("walrelay.dead-letter", Some("rejected again"));
        assert_eq!(back.topic, "walrelay.dead-letter");
        assert_eq!(back.key, record.key);
        assert_eq!(back.header("id"), Some(&b"e-1"[..]));
        assert_eq!(back.header(REASON), Some(&b"rejected again"[..]));
        assert_eq!(back.header(ORIGINAL_TOPIC), Some(&b"outbox.event.X"[..]));
        assert_eq!(back.header(ORIGINAL_TIMESTAMP), Some(&b"1700000000000"[..]));
        assert_eq!(back.headers.iter().filter(|(n, _)| n == REASON).count(), 1);
        // Read again later, it keeps that first timestamp.
        let again = DeadLetter::new(0, 0, back.key, back.value, back.headers, Some(5));
        assert_eq!(again.event_timestamp_ms(), Some(1_700_000_000_000));
        // A skipped record goes back unchanged.
        let skipped = record.returned("walrelay.dead-letter", None);
        assert_eq!(skipped.header(REASON), Some(&b"too big"[..]));
    }
}
