//! Poison events: ones Kafka rejects for good, ones whose route-by value is
//! NULL, and rows that cannot be mapped. They are never dropped silently:
//! `--on-poison halt` stops the relay before the event, so the slot stays
//! where it can be read again; `--on-poison dead-letter` publishes the event
//! to the dead-letter topic with the reason in headers, and goes on.

use bytes::Bytes;
use tracing::warn;

use super::apply::{text, ApplyLoop};
use super::Settings;
use crate::checkpoint::TxnSeq;
use crate::config::OnPoison;
use crate::error::{Error, Result};
use crate::kafka::is_permanent_rejection;
use crate::kafka::producer::{unix_now_us, DeliveryFailure, Outgoing};
use crate::outbox::mapping::OutboxEvent;
use crate::postgres::lsn::Lsn;

/// A poison event and everything needed to report or dead-letter it.
#[derive(Debug)]
pub struct Poisoned {
    seq: TxnSeq,
    commit_lsn: Lsn,
    id: Option<Bytes>,
    key: Option<Bytes>,
    payload: Option<Bytes>,
    event_type: Option<Bytes>,
    original_topic: Option<String>,
    reason: String,
    /// Kafka refused the size: the dead-letter copy leaves the value out.
    pub value_too_large: bool,
    /// Bytes still counted in flight for the rejected delivery, if it was produced.
    inflight_bytes: Option<usize>,
}

impl Poisoned {
    pub fn new(
        seq: TxnSeq,
        commit_lsn: Lsn,
        event: &OutboxEvent,
        original_topic: Option<String>,
        reason: String,
    ) -> Self {
        Poisoned {
            seq,
            commit_lsn,
            id: event.id.clone(),
            key: event.key.clone(),
            payload: event.payload.clone(),
            event_type: event.event_type.clone(),
            original_topic,
            reason,
            value_too_large: false,
            inflight_bytes: None,
        }
    }

    /// A delivery Kafka rejected after it was produced.
    pub fn from_failure(seq: TxnSeq, inflight_bytes: usize, f: DeliveryFailure) -> Self {
        Poisoned {
            seq,
            commit_lsn: f.commit_lsn,
            value_too_large: crate::kafka::is_size_rejection(&f.error),
            reason: format!("Kafka rejected it: {}", f.error),
            id: f.event_id,
            key: f.key,
            payload: f.payload,
            event_type: f.event_type,
            original_topic: Some(f.topic),
            inflight_bytes: Some(inflight_bytes),
        }
    }

    pub fn halt_error(&self, settings: &Settings) -> Error {
        Error::permanent(format!(
            "cannot publish event {} (transaction at LSN {}): {}. walrelay stopped before it \
             and the slot stays before it; fix the cause and restart, or run with \
             --on-poison dead-letter to park such events in {}",
            text(self.id.as_ref()),
            self.commit_lsn,
            self.reason,
            settings.dead_letter_topic
        ))
    }
}

impl ApplyLoop<'_> {
    /// Applies the poison policy to an event that was never produced.
    pub(super) async fn reject(&mut self, poisoned: Poisoned) -> Result<()> {
        match self.settings.on_poison {
            OnPoison::Halt => Err(poisoned.halt_error(self.settings)),
            OnPoison::DeadLetter => self.dead_letter(poisoned).await,
        }
    }

    /// Publishes the event to the dead-letter topic in place of its own.
    /// The transaction stays pending until Kafka acknowledges the copy.
    pub(super) async fn dead_letter(&mut self, p: Poisoned) -> Result<()> {
        let topic = self.settings.dead_letter_topic.clone();
        warn!(
            event_id = %text(p.id.as_ref()),
            commit_lsn = %p.commit_lsn,
            original_topic = p.original_topic.as_deref().unwrap_or("(none)"),
            reason = %p.reason,
            dead_letter_topic = %topic,
            "poison event sent to the dead-letter topic"
        );
        self.metrics.record_dead_letter();
        self.topics.ensure(&topic).await?;
        let lsn = p.commit_lsn.to_string();
        let omitted = p
            .payload
            .as_ref()
            .map(|v| format!("{} bytes; the row is in the outbox table", v.len()));
        let mut headers: Vec<(&str, Option<&[u8]>)> = vec![
            ("walrelay.reason", Some(p.reason.as_bytes())),
            ("walrelay.event-id", p.id.as_deref()),
            ("walrelay.commit-lsn", Some(lsn.as_bytes())),
        ];
        if let Some(original) = &p.original_topic {
            headers.push(("walrelay.original-topic", Some(original.as_bytes())));
        }
        if let (true, Some(omitted)) = (p.value_too_large, &omitted) {
            headers.push(("walrelay.value-omitted", Some(omitted.as_bytes())));
        }
        let outgoing = Outgoing {
            topic: &topic,
            key: p.key.as_ref(),
            payload: if p.value_too_large {
                None
            } else {
                p.payload.as_ref()
            },
            event_id: p.id.as_ref(),
            event_type: p.event_type.as_ref(),
            extra_headers: &headers,
            partition: None,
            timestamp_ms: unix_now_us() / 1000,
            dead_letter: true,
            commit_lsn: p.commit_lsn,
            commit_time_us: unix_now_us(),
        };
        match self.produce(p.seq, &outgoing).await? {
            Ok(()) => {}
            Err(e) if is_permanent_rejection(&e) => {
                return Err(Error::permanent(format!(
                    "Kafka rejected the dead-letter record of event {} too: {e}; walrelay \
                     stopped and the slot stays before it",
                    text(p.id.as_ref())
                )))
            }
            Err(e) => {
                return Err(Error::transient(
                    "cannot hand a dead-letter record to the Kafka producer",
                )
                .with_source(e))
            }
        }
        // The rejected original no longer waits for Kafka: its copy does.
        if let Some(bytes) = p.inflight_bytes {
            self.acked(p.seq, bytes);
        }
        Ok(())
    }
}
