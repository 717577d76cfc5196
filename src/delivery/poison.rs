//! Poison events: ones the sink refuses for good, ones whose route-by value
//! is NULL or routes to a topic walrelay may not use, and rows that cannot be
//! mapped. They are never dropped silently: `--on-poison halt` stops the
//! relay before the event, so the slot stays where it can be read again;
//! `--on-poison dead-letter` publishes the whole event (key, value, headers)
//! to the dead-letter topic with the reason in headers, and goes on. What
//! cannot be dead-lettered whole stops the relay.
//!
//! This module only decides; the apply loop does the producing.

use bytes::Bytes;

use super::dead_letter;
use super::progress::{Ticket, TxnRef};
use crate::config::OnPoison;
use crate::delivery::checkpoint::TxnSeq;
use crate::error::{Error, StopCause};
use crate::outbox::mapping::OutboxEvent;
use crate::postgres::lsn::Lsn;
use crate::sink::{Failure, OwnedRecord, Refusal, Rejection};

/// A poison event and everything needed to report or dead-letter it.
#[derive(Debug)]
pub struct Poisoned {
    pub seq: TxnSeq,
    pub commit_lsn: Lsn,
    pub event_id: Option<Bytes>,
    /// The record as it was (or would have been) sent; its topic is empty
    /// when the event never got one.
    pub record: OwnedRecord,
    pub reason: String,
    /// A partition the sink called unknown: poison only once fresh metadata
    /// confirms the topic has fewer partitions.
    pub unknown_partition: Option<i32>,
    /// Bytes still counted in flight for a record refused after it was sent.
    pub inflight_bytes: Option<usize>,
}

/// What to do with a poison event.
#[derive(Debug)]
pub enum Verdict {
    Halt(Error),
    /// Send this copy to the dead-letter topic in the event's place.
    DeadLetter(OwnedRecord),
}

impl Poisoned {
    /// An event that could not be mapped or routed; `topic` when it had one.
    pub fn new(txn: TxnRef, event: &OutboxEvent, topic: Option<&str>, reason: String) -> Self {
        Poisoned {
            seq: txn.seq,
            commit_lsn: txn.commit_lsn,
            event_id: event.id.clone(),
            record: event.record(topic.unwrap_or(""), 0).to_owned(),
            reason,
            unknown_partition: None,
            inflight_bytes: None,
        }
    }

    /// An event the sink refused when it was handed over.
    pub fn refused(txn: TxnRef, event: &OutboxEvent, topic: &str, refusal: &Refusal) -> Self {
        let mut poisoned = Self::new(txn, event, Some(topic), rejected_because(refusal));
        poisoned.unknown_partition = unknown_partition(refusal);
        poisoned
    }

    /// A record the sink refused after it was sent.
    pub fn undelivered(ticket: Ticket, failure: Failure) -> Self {
        Poisoned {
            seq: ticket.txn,
            commit_lsn: ticket.commit_lsn,
            event_id: ticket.event_id,
            reason: rejected_because(&failure.refusal),
            unknown_partition: unknown_partition(&failure.refusal),
            record: failure.record,
            inflight_bytes: Some(ticket.bytes),
        }
    }

    /// Settles an unknown partition against the topic's partition count
    /// from fresh metadata. The sink judged by cached metadata, which may
    /// predate partitions added since: then the event is not poison.
    pub fn settle_partition(mut self, count: Option<usize>) -> Result<Self, Error> {
        let Some(partition) = self.unknown_partition else {
            return Ok(self);
        };
        let topic = &self.record.topic;
        match count {
            Some(count) if (partition as usize) < count => Err(Error::transient(format!(
                "partition {partition} of topic {topic} exists but the producer did not know it \
                 yet; starting a new session"
            ))),
            count => {
                self.reason = format!(
                    "its partition column asks for partition {partition}, but topic {topic} has \
                     {} partitions",
                    count.unwrap_or(0)
                );
                self.unknown_partition = None;
                Ok(self)
            }
        }
    }

    /// The policy's decision for this event.
    pub fn verdict(&self, on_poison: OnPoison, dead_letter_topic: &str) -> Verdict {
        match on_poison {
            OnPoison::Halt => Verdict::Halt(
                Error::permanent(format!(
                    "cannot publish event {} ({}): {}. {}; fix the cause and restart, or run with \
                 --on-poison dead-letter to park such events in {dead_letter_topic}",
                    text(self.event_id.as_ref()),
                    origin(self.commit_lsn),
                    self.reason,
                    stopped(self.commit_lsn),
                ))
                .with_cause(StopCause::Poison),
            ),
            OnPoison::DeadLetter => Verdict::DeadLetter(self.dead_letter_copy(dead_letter_topic)),
        }
    }

    /// The whole event for the dead-letter topic: its key, value and
    /// headers, then why and where from. The partition is the topic's choice.
    fn dead_letter_copy(&self, dead_letter_topic: &str) -> OwnedRecord {
        let mut headers = self.record.headers.clone();
        headers.extend(dead_letter::own_headers(
            &self.reason,
            self.event_id.as_ref(),
            self.commit_lsn,
            &self.record.topic,
        ));
        OwnedRecord {
            topic: dead_letter_topic.to_string(),
            key: self.record.key.clone(),
            value: self.record.value.clone(),
            headers,
            partition: None,
        }
    }

    /// The error when even the dead-letter copy cannot be published.
    pub fn cannot_dead_letter(&self, why: &str) -> Error {
        cannot_dead_letter(
            self.event_id.as_ref(),
            self.commit_lsn,
            &format!("{why}; it was poison because {}", self.reason),
        )
    }
}

/// Stops walrelay for a dead-letter copy that cannot be published.
pub fn cannot_dead_letter(event_id: Option<&Bytes>, commit_lsn: Lsn, why: &str) -> Error {
    Error::permanent(format!(
        "cannot dead-letter event {} ({}): {why}. {}; for a size error raise \
         --dead-letter-max-message-bytes (and the dead-letter topic's max.message.bytes), \
         otherwise fix the cause, and restart",
        text(event_id),
        origin(commit_lsn),
        stopped(commit_lsn),
    ))
}

/// Where a poison event came from. A row read from the table (replay, a
/// snapshot) has no commit LSN: 0/0, Postgres's InvalidXLogRecPtr, which
/// no transaction commits at.
fn origin(commit_lsn: Lsn) -> String {
    if commit_lsn == Lsn::ZERO {
        "a row read from the outbox table".to_string()
    } else {
        format!("transaction at LSN {commit_lsn}")
    }
}

/// What stopping means for the slot.
fn stopped(commit_lsn: Lsn) -> &'static str {
    if commit_lsn == Lsn::ZERO {
        "walrelay stopped before it"
    } else {
        "walrelay stopped before it and the slot stays before it"
    }
}

/// The error for a refusal that is configuration, not the event: the
/// policy does not apply, walrelay stops.
pub fn configuration_error(
    event_id: Option<&Bytes>,
    topic: &str,
    refusal: &Refusal,
    principal: &str,
) -> Error {
    Error::permanent(format!(
        "Kafka refused event {} for topic {topic}: {refusal}. This is a permission or \
         configuration problem, not the event, so walrelay stopped (even with --on-poison \
         dead-letter) and the slot stays before it; grant walrelay's principal WRITE on the \
         topic ({}) or fix the -X properties, and restart",
        text(event_id),
        crate::kafka::grant_command(principal, "Write", &format!("--topic {topic}"))
    ))
}

/// An id or header for messages, or a placeholder when absent.
pub fn text(value: Option<&Bytes>) -> String {
    value
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .unwrap_or_else(|| "(NULL)".into())
}

fn rejected_because(refusal: &Refusal) -> String {
    format!("Kafka rejected it: {refusal}")
}

fn unknown_partition(refusal: &Refusal) -> Option<i32> {
    match refusal.rejection {
        Rejection::UnknownPartition(partition) => Some(partition),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poisoned(reason: &str) -> Poisoned {
        let event = OutboxEvent {
            id: Some(Bytes::from_static(b"e-1")),
            key: Some(Bytes::from_static(b"order-1")),
            payload: Some(Bytes::from_static(b"{}")),
            headers: vec![(
                std::borrow::Cow::Borrowed("id"),
                Some(Bytes::from_static(b"e-1")),
            )],
            ..OutboxEvent::default()
        };
        let txn = TxnRef {
            seq: 4,
            commit_lsn: Lsn(0x16B3748),
            commit_time_us: 0,
        };
        Poisoned::new(txn, &event, Some("outbox.event.X"), reason.into())
    }

    #[test]
    fn halting_names_the_event_its_transaction_the_reason_and_the_way_out() {
        let Verdict::Halt(error) =
            poisoned("its route-by column is NULL").verdict(OnPoison::Halt, "walrelay.dead-letter")
        else {
            panic!("expected a halt");
        };
        let text = error.to_string();
        for part in [
            "e-1",
            "0/16B3748",
            "route-by column is NULL",
            "--on-poison dead-letter",
        ] {
            assert!(text.contains(part), "{part:?} missing from {text}");
        }
        assert!(!error.is_transient());
    }

    #[test]
    fn the_dead_letter_copy_keeps_key_value_and_headers_and_adds_why_and_where_from() {
        let Verdict::DeadLetter(copy) =
            poisoned("too big").verdict(OnPoison::DeadLetter, "walrelay.dead-letter")
        else {
            panic!("expected a dead-letter copy");
        };
        assert_eq!(copy.topic, "walrelay.dead-letter");
        assert_eq!(copy.key.as_deref(), Some(&b"order-1"[..]));
        assert_eq!(copy.value.as_deref(), Some(&b"{}"[..]));
        assert_eq!(copy.header("id"), Some(&b"e-1"[..]));
        assert_eq!(copy.header("walrelay.reason"), Some(&b"too big"[..]));
        assert_eq!(copy.header("walrelay.event-id"), Some(&b"e-1"[..]));
        assert_eq!(copy.header("walrelay.commit-lsn"), Some(&b"0/16B3748"[..]));
        assert_eq!(
            copy.header("walrelay.original-topic"),
            Some(&b"outbox.event.X"[..])
        );
        assert_eq!(copy.partition, None);
    }

    #[test]
    fn an_unknown_partition_is_poison_only_when_fresh_metadata_agrees() {
        let error = poisoned_with_partition(5)
            .settle_partition(Some(8))
            .unwrap_err();
        assert!(error.is_transient(), "{error}");
        let settled = poisoned_with_partition(5)
            .settle_partition(Some(3))
            .unwrap();
        assert!(
            settled.reason.contains("partition 5") && settled.reason.contains("has 3 partitions"),
            "{}",
            settled.reason
        );
    }

    fn poisoned_with_partition(partition: i32) -> Poisoned {
        let mut p = poisoned("Kafka rejected it");
        p.unknown_partition = Some(partition);
        p
    }

    #[test]
    fn halting_on_a_poison_event_is_the_poison_stop_cause() {
        let Verdict::Halt(error) = poisoned("too big").verdict(OnPoison::Halt, "dl") else {
            panic!("expected a halt");
        };
        assert_eq!(error.stop_cause(), Some(StopCause::Poison));
    }
}
