//! Poison events: ones Kafka rejects for good, ones whose route-by value is
//! NULL or routes to a topic walrelay may not use, and rows that cannot be
//! mapped. They are never dropped silently: `--on-poison halt` stops the
//! relay before the event, so the slot stays where it can be read again;
//! `--on-poison dead-letter` publishes the whole event (key, value, headers)
//! to the dead-letter topic with the reason in headers, and goes on. What
//! cannot be dead-lettered whole stops the relay.

use bytes::Bytes;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use tracing::warn;

use super::apply::{text, ApplyLoop};
use super::Settings;
use crate::checkpoint::TxnSeq;
use crate::config::OnPoison;
use crate::error::{Error, Result};
use crate::clock::unix_now_us;
use crate::kafka::producer::{DeliveryFailure, Outgoing};
use crate::kafka::{classify, Rejection};
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
    headers: Vec<(String, Option<Bytes>)>,
    original_topic: Option<String>,
    reason: String,
    /// The partition librdkafka called unknown: confirmed against fresh
    /// metadata before the event counts as poison.
    unknown_partition: Option<i32>,
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
            headers: event.headers.clone(),
            original_topic,
            reason,
            unknown_partition: None,
            inflight_bytes: None,
        }
    }

    /// An event librdkafka refused at send time.
    pub fn refused(
        seq: TxnSeq,
        commit_lsn: Lsn,
        event: &OutboxEvent,
        topic: &str,
        error: &KafkaError,
    ) -> Self {
        let mut poisoned = Self::new(
            seq,
            commit_lsn,
            event,
            Some(topic.to_string()),
            format!("Kafka rejected it: {error}"),
        );
        poisoned.unknown_partition = unknown_partition(error, event.partition);
        poisoned
    }

    /// A delivery Kafka rejected after it was produced.
    pub fn from_failure(seq: TxnSeq, inflight_bytes: usize, f: DeliveryFailure) -> Self {
        Poisoned {
            seq,
            commit_lsn: f.commit_lsn,
            reason: format!("Kafka rejected it: {}", f.error),
            unknown_partition: unknown_partition(&f.error, f.partition),
            id: f.event_id,
            key: f.key,
            payload: f.payload,
            event_type: f.event_type,
            headers: f.extra_headers,
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

fn unknown_partition(error: &KafkaError, partition: Option<i32>) -> Option<i32> {
    (error.rdkafka_error_code() == Some(RDKafkaErrorCode::UnknownPartition))
        .then_some(partition)
        .flatten()
}

/// The error for a refusal that is configuration, not the event: the policy
/// does not apply, walrelay stops.
pub fn configuration_error(event_id: Option<&Bytes>, topic: &str, error: &KafkaError) -> Error {
    Error::permanent(format!(
        "Kafka refused event {} for topic {topic}: {error}. This is a permission or \
         configuration problem, not the event, so walrelay stopped (even with --on-poison \
         dead-letter) and the slot stays before it; grant walrelay's principal WRITE on the \
         topic (or fix the -X properties) and restart",
        text(event_id)
    ))
}

impl ApplyLoop<'_> {
    /// Applies the poison policy.
    pub(super) async fn reject(&mut self, mut poisoned: Poisoned) -> Result<()> {
        if let (Some(partition), Some(topic)) =
            (poisoned.unknown_partition, poisoned.original_topic.clone())
        {
            // librdkafka judges by its cached metadata, which may predate
            // partitions added since: only fresh metadata makes it poison.
            match self.topics.partition_count(&topic).await? {
                Some(count) if (partition as usize) < count => {
                    return Err(Error::transient(format!(
                        "partition {partition} of topic {topic} exists but the producer did not \
                         know it yet; starting a new session"
                    )))
                }
                count => {
                    poisoned.reason = format!(
                        "its partition column asks for partition {partition}, but topic {topic} \
                         has {} partitions",
                        count.unwrap_or(0)
                    )
                }
            }
        }
        match self.settings.on_poison {
            OnPoison::Halt => Err(poisoned.halt_error(self.settings)),
            OnPoison::DeadLetter => self.dead_letter(poisoned).await,
        }
    }

    /// Publishes the whole event to the dead-letter topic in place of its
    /// own. The transaction stays pending until Kafka acknowledges the copy.
    async fn dead_letter(&mut self, p: Poisoned) -> Result<()> {
        let topic = self.settings.dead_letter_topic.clone();
        let info = self.topics.ensure_dead_letter().await?;
        let lsn = p.commit_lsn.to_string();
        let mut headers: Vec<(&str, Option<&[u8]>)> = vec![
            ("walrelay.reason", Some(p.reason.as_bytes())),
            ("walrelay.event-id", p.id.as_deref()),
            ("walrelay.commit-lsn", Some(lsn.as_bytes())),
        ];
        if let Some(original) = &p.original_topic {
            headers.push(("walrelay.original-topic", Some(original.as_bytes())));
        }
        headers.extend(p.headers.iter().map(|(k, v)| (k.as_str(), v.as_deref())));
        let now_us = unix_now_us();
        let outgoing = Outgoing {
            topic: &topic,
            key: p.key.as_ref(),
            payload: p.payload.as_ref(),
            event_id: p.id.as_ref(),
            event_type: p.event_type.as_ref(),
            extra_headers: &headers,
            partition: None,
            // The event's own timestamp may be what Kafka refused.
            timestamp_ms: now_us / 1000,
            dead_letter: true,
            commit_lsn: p.commit_lsn,
            commit_time_us: now_us,
        };
        let cannot = |why: String| {
            Error::permanent(format!(
                "cannot dead-letter event {} (transaction at LSN {}), which was poison because: \
                 {}; {why}. walrelay stopped and the slot stays before it; raise \
                 --dead-letter-max-message-bytes (and the max.message.bytes of {topic}) or fix \
                 the cause, and restart",
                text(p.id.as_ref()),
                p.commit_lsn,
                p.reason
            ))
        };
        if let Some(why) = info.refuse_size(&topic, outgoing.record_size()) {
            return Err(cannot(why));
        }
        match self.produce(p.seq, &outgoing).await? {
            Ok(()) => {}
            Err(e) if classify(&e) == Rejection::Retriable => {
                return Err(Error::transient(
                    "cannot hand a dead-letter record to the Kafka producer",
                )
                .with_source(e))
            }
            Err(e) => {
                return Err(cannot(format!(
                    "Kafka rejected the dead-letter record too: {e}"
                )))
            }
        }
        warn!(
            event_id = %text(p.id.as_ref()),
            commit_lsn = %p.commit_lsn,
            original_topic = p.original_topic.as_deref().unwrap_or("(none)"),
            reason = %p.reason,
            dead_letter_topic = %topic,
            "poison event sent to the dead-letter topic"
        );
        self.metrics.record_dead_letter();
        // The rejected original no longer waits for Kafka: its copy does.
        if let Some(bytes) = p.inflight_bytes {
            self.acked(p.seq, bytes);
        }
        Ok(())
    }
}
