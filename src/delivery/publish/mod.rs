//! The per-event path: an outbox event becomes a record in its routed
//! topic and goes to the sink; deliveries come back and are counted; an
//! event that cannot be published goes to the poison policy, and a
//! dead-letter copy, when that is the verdict, goes to the sink too.
//!
//! Every send and acknowledgement is booked in `Progress`, which the apply
//! loop owns and lends for each call. With exactly-once delivery the
//! records go in the sink's transactions, which `transaction` opens at the
//! first record and closes on Postgres commit boundaries.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use tokio::time::Instant;
use tracing::warn;

mod oversized;
pub mod transaction;

use oversized::Suspect;
use transaction::{Remembered, Transactions};

use super::poison::{cannot_dead_letter, configuration_error, text, Poisoned, Verdict};
use super::progress::{Progress, Ticket, TxnRef};
use crate::clock;
use crate::config::{OnPoison, Settings};
use crate::error::{Error, Result};
use crate::metrics::{EventTimings, Metrics, Published};
use crate::outbox::mapping::{MappingError, OutboxEvent};
use crate::registry::Unwritten;
use crate::sink::{Delivery, Record, Refusal, Rejection, SendError, Sink, TopicAccess, TopicInfo};

/// Distinct route-by values remembered before the topic cache starts over.
const ROUTE_CACHE_LIMIT: usize = 10_000;

/// Where a route-by value sends its events.
enum Route {
    To(Routed),
    /// Why the event cannot go anywhere: it is poison. The topic it was
    /// routed to, when it has a legal one (a dead-letter copy names it,
    /// for `walrelay redrive` once the topic may be used).
    Nowhere(Option<String>, String),
}

/// A topic checked (and created) for a route-by value.
#[derive(Clone)]
struct Routed {
    topic: Arc<str>,
    info: TopicInfo,
    published: Published,
}

/// What comes back from the sink: a record's delivery, or how the sink's
/// transaction closed (exactly once).
pub enum Outcome {
    Delivery(Delivery<Ticket>),
    Closed(Result<()>),
}

/// What a step of the per-event path leaves: the event's next form, or
/// why it is poison (boxed: the rare case should not size the common one).
type Step<T> = std::result::Result<T, Box<Poisoned>>;

/// What the sink did with a record.
enum Handed {
    /// Taken at this instant.
    Taken(std::time::Instant),
    Refused(Refusal),
}

/// The ticket a record travels with through the sink.
fn ticket(
    txn: TxnRef,
    event: &OutboxEvent,
    record: &Record<'_>,
    published: Published,
    alone: bool,
) -> Ticket {
    Ticket {
        txn: txn.seq,
        commit_lsn: txn.commit_lsn,
        commit_time_us: txn.commit_time_us,
        bytes: record.size(),
        // A copy: a slice would keep the whole replication read buffer
        // (64 KiB or more) while the record is in flight, memory that
        // --max-inflight-bytes does not count.
        event_id: event.id.as_deref().map(Bytes::copy_from_slice),
        published,
        timestamp_ms: record.timestamp_ms,
        dead_letter: false,
        alone,
    }
}

/// --key-format/--value-format avro, json-schema or protobuf: the event registered and encoded
/// for its topic; as it is otherwise. Not a method: a `&Publisher` is not
/// Send (its timings are per-thread), and this future holds what it
/// borrows across the registry's await.
async fn encoded(
    settings: &Settings,
    metrics: &Metrics,
    txn: TxnRef,
    topic: &str,
    event: OutboxEvent,
) -> Result<Step<OutboxEvent>> {
    let Some(registry) = &settings.registry else {
        return Ok(Ok(event));
    };
    let (key, value) = (settings.registry_key, settings.registry_value);
    match registry
        .encode_event(metrics, topic, event, key, value)
        .await
    {
        Ok(event) => Ok(Ok(event)),
        Err((event, Unwritten::Poison(reason))) => Ok(Err(Box::new(Poisoned::new(
            txn,
            &event,
            Some(topic),
            reason,
        )))),
        Err((_, Unwritten::Stop(e))) => Err(e),
    }
}

pub struct Publisher<'a, S> {
    settings: &'a Settings,
    sink: S,
    metrics: Metrics,
    /// Each event's observations, added to `metrics` by `flush_timings`.
    timings: EventTimings,
    /// Topics by route-by value, already checked (and created).
    routes: HashMap<Bytes, Routed>,
    /// Deliveries the sink refused as poison, waiting for the policy.
    rejected: VecDeque<Poisoned>,
    /// Records whose batch was refused for size, to be sent again alone.
    suspects: VecDeque<Suspect>,
    /// A record sent alone has not had its outcome yet.
    alone_in_flight: bool,
    /// Suspects of one refusal are being sent again (said once).
    probing: bool,
    /// The sink's transactions, with exactly-once delivery.
    transactions: Option<Transactions>,
}

impl<'a, S: Sink<Ticket>> Publisher<'a, S> {
    pub fn new(settings: &'a Settings, sink: S, metrics: Metrics) -> Self {
        Publisher {
            settings,
            sink,
            timings: metrics.event_timings(),
            metrics,
            routes: HashMap::new(),
            rejected: VecDeque::new(),
            suspects: VecDeque::new(),
            alone_in_flight: false,
            probing: false,
            transactions: None,
        }
    }

    /// The sink's next delivery, or the outcome of closing its
    /// transaction. Cancel-safe.
    pub async fn delivery(&mut self) -> Option<Outcome> {
        let Some(closing) = self.transactions.as_mut().and_then(Transactions::closing) else {
            return self.sink.delivery().await.map(Outcome::Delivery);
        };
        tokio::select! {
            delivery = self.sink.delivery() => delivery.map(Outcome::Delivery),
            outcome = closing => Some(Outcome::Closed(outcome)),
        }
    }

    /// A delivery already at hand. An exactly-once publisher's closing
    /// outcomes come only through `delivery`.
    pub fn try_delivery(&mut self) -> Option<Outcome> {
        self.sink.try_delivery().map(Outcome::Delivery)
    }

    /// Whether deliveries must be taken the moment they come: a Kafka
    /// transaction's close waits on them. Otherwise the loop takes them
    /// when it wakes for its own reasons.
    pub fn wants_prompt_deliveries(&self) -> bool {
        self.transactions.is_some()
    }

    /// Applies the policy to deliveries refused as poison since the last
    /// call, and sends alone each record whose batch was refused for size.
    pub async fn settle_rejected(&mut self, progress: &mut Progress) -> Result<()> {
        while let Some(poisoned) = self.rejected.pop_front() {
            self.reject(progress, poisoned).await?;
        }
        self.send_suspect_alone(progress)
    }

    /// A row (or message) as the mapping read it: published when it became
    /// an event, handed to the poison policy when it could not.
    pub async fn publish_mapped(
        &mut self,
        progress: &mut Progress,
        txn: TxnRef,
        mapped: std::result::Result<OutboxEvent, MappingError>,
        received_at: Instant,
    ) -> Result<()> {
        match mapped {
            Ok(event) => self.publish(progress, txn, event, received_at).await,
            Err(MappingError { event, reason }) => {
                let poisoned = Poisoned::new(txn, &event, None, reason);
                self.reject(progress, poisoned).await
            }
        }
    }

    /// The per-event path: route, encode, check the size, hand to the sink.
    pub async fn publish(
        &mut self,
        progress: &mut Progress,
        txn: TxnRef,
        event: OutboxEvent,
        received_at: Instant,
    ) -> Result<()> {
        if self.skips(txn.commit_lsn) {
            return Ok(());
        }
        let routed = match self.routed(progress, txn, &event).await? {
            Ok(routed) => routed,
            Err(poisoned) => return self.reject(progress, *poisoned).await,
        };
        let event = match encoded(self.settings, &self.metrics, txn, &routed.topic, event).await? {
            Ok(event) => event,
            Err(poisoned) => return self.reject(progress, *poisoned).await,
        };
        let Routed {
            topic,
            info,
            published,
        } = routed;
        let record = event.record(&topic, txn.commit_time_us / 1000);
        let alone = match self.sends_alone(txn, &event, &topic, &info, record.wire_size()) {
            Ok(alone) => alone,
            Err(poisoned) => return self.reject(progress, *poisoned).await,
        };
        let ticket = ticket(txn, &event, &record, published, alone);
        if alone {
            self.until_only_held_in_flight(progress).await?;
        }
        match self.hand(progress, &record, ticket).await? {
            Handed::Taken(at) => {
                self.alone_in_flight |= alone;
                self.timings
                    .produced(at.saturating_duration_since(received_at.into_std()));
                Ok(())
            }
            Handed::Refused(refusal) => self.refused(progress, txn, &event, &topic, refusal).await,
        }
    }

    /// The topic of an event's route-by value, or why it has none.
    async fn routed(
        &mut self,
        progress: &mut Progress,
        txn: TxnRef,
        event: &OutboxEvent,
    ) -> Result<Step<Routed>> {
        let Some(route_value) = &event.route_value else {
            let reason = format!(
                "its route-by column {:?} is NULL",
                self.settings.mapping.route_by
            );
            return Ok(Err(Box::new(Poisoned::new(txn, event, None, reason))));
        };
        Ok(match self.route(progress, route_value).await? {
            Route::To(routed) => Ok(routed),
            Route::Nowhere(topic, reason) => Err(Box::new(Poisoned::new(
                txn,
                event,
                topic.as_deref(),
                reason,
            ))),
        })
    }

    /// Whether the record goes alone in its batch, or why it is poison:
    /// its size against the topic's limit, then what Kafka said of it in
    /// an aborted transaction.
    fn sends_alone(
        &self,
        txn: TxnRef,
        event: &OutboxEvent,
        topic: &str,
        info: &TopicInfo,
        wire_size: usize,
    ) -> Step<bool> {
        // The broker enforces the topic's max.message.bytes, and refuses the
        // whole batch of a record over it; librdkafka only its own limit.
        let mut alone = match info.refuse_size(topic, wire_size) {
            None => false,
            // Over the limit for certain: poison now, before it can take
            // its neighbours with it.
            Some(reason) if !info.assumed && !self.settings.topics.compressed => {
                return Err(Box::new(Poisoned::new(txn, event, Some(topic), reason)));
            }
            // Compressed, or against an assumed limit: it may fit, and
            // sent alone the broker's verdict is its own.
            Some(_) => true,
        };
        // The producer's batches may outgrow the topic's limit: alone, its
        // batch is this record, which fits (`TopicManager::fit_batches`).
        alone |= info.send_alone;
        // What Kafka said of it inside an aborted transaction.
        match self.remembered(txn.commit_lsn, event.id.as_ref()) {
            Some(Remembered::Alone) => Ok(true),
            Some(Remembered::Refused(refusal)) => {
                Err(Box::new(Poisoned::refused(txn, event, topic, &refusal)))
            }
            None => Ok(alone),
        }
    }

    /// A record the sink refused as it was handed over: poison, a stop
    /// for the operator's configuration, or a transient error.
    async fn refused(
        &mut self,
        progress: &mut Progress,
        txn: TxnRef,
        event: &OutboxEvent,
        topic: &str,
        refusal: Refusal,
    ) -> Result<()> {
        match refusal.rejection {
            // Refused before it left (librdkafka's own limit): by itself.
            Rejection::Poison | Rejection::UnknownPartition(_) | Rejection::Oversized => {
                let poisoned = Poisoned::refused(txn, event, topic, &refusal);
                self.reject(progress, poisoned).await
            }
            Rejection::Configuration => Err(configuration_error(
                event.id.as_ref(),
                topic,
                &refusal,
                &crate::kafka::principal(&self.settings.kafka),
            )),
            Rejection::Retriable => Err(Error::transient(format!(
                "cannot hand event {} to the Kafka producer",
                event.id_text()
            ))
            .with_source(refusal)),
        }
    }

    /// The topic for a route-by value, or why the event cannot go there.
    /// Routing and the topic's checks run once per distinct value in a
    /// session; after that it is one lookup.
    async fn route(&mut self, progress: &mut Progress, route_value: &Bytes) -> Result<Route> {
        if let Some(routed) = self.routes.get(route_value) {
            return Ok(Route::To(routed.clone()));
        }
        let routed = self
            .settings
            .router
            .topic(&String::from_utf8_lossy(route_value));
        let topic = match routed {
            Ok(topic) => topic,
            Err(reason) => return Ok(Route::Nowhere(None, reason)),
        };
        progress.waiting_for_topic(true);
        let access = self.sink.open_topic(&topic).await;
        progress.waiting_for_topic(false);
        let info = match access? {
            TopicAccess::Open(info) => info,
            TopicAccess::Closed(reason) => return Ok(Route::Nowhere(Some(topic), reason)),
        };
        // A route-by column of many distinct values must not grow the cache forever.
        if self.routes.len() >= ROUTE_CACHE_LIMIT {
            self.routes.clear();
        }
        let routed = Routed {
            published: self.metrics.published(&topic),
            topic: topic.into(),
            info,
        };
        // A copy of the key: a slice would pin the whole replication message.
        self.routes
            .insert(Bytes::copy_from_slice(route_value), routed.clone());
        Ok(Route::To(routed))
    }

    /// Hands one record to the sink and counts it in flight. A full queue
    /// is waited out by taking deliveries.
    async fn hand(
        &mut self,
        progress: &mut Progress,
        record: &Record<'_>,
        ticket: Ticket,
    ) -> Result<Handed> {
        let (seq, bytes) = (ticket.txn, ticket.bytes);
        let mut ticket = ticket;
        self.opening(progress, seq);
        let taken_at = loop {
            // One clock reading for the sink's timing and the publisher's.
            let now = std::time::Instant::now();
            match self.sink.send(record, ticket, now) {
                Ok(()) => break now,
                Err(SendError::Full(back)) => {
                    ticket = back;
                    self.take_delivery(progress).await?;
                }
                Err(SendError::Refused(refusal)) => return Ok(Handed::Refused(refusal)),
            }
        };
        progress.sent(seq, bytes);
        self.entered();
        Ok(Handed::Taken(taken_at))
    }

    /// Adds the events' observations so far to the shared metrics: before
    /// each wait, so that what a scrape sees is never more than one batch old.
    pub fn flush_timings(&self) {
        self.timings.flush();
    }

    /// Waits for the sink's next delivery and books it.
    async fn take_delivery(&mut self, progress: &mut Progress) -> Result<()> {
        self.flush_timings();
        let outcome = self
            .delivery()
            .await
            .ok_or_else(|| Error::transient("the Kafka producer stopped reporting deliveries"))?;
        self.on_delivery(progress, outcome)
    }

    /// Books what came back from the sink.
    pub fn on_delivery(&mut self, progress: &mut Progress, outcome: Outcome) -> Result<()> {
        let delivery = match outcome {
            Outcome::Delivery(delivery) => delivery,
            Outcome::Closed(outcome) => return self.on_closed(progress, outcome),
        };
        let Delivery {
            ticket,
            took,
            at,
            result,
        } = delivery;
        self.alone_in_flight &= !ticket.alone;
        let failure = match result {
            Ok(()) => {
                self.timings
                    .acked(&ticket.published, ticket.commit_time_us, at, took);
                progress.acked(ticket.txn, ticket.bytes, at);
                return Ok(());
            }
            Err(failure) => *failure,
        };
        let refusal = &failure.refusal;
        match refusal.rejection {
            // A retriable error surfaced despite infinite retries: start over
            // from the slot, which still holds the event.
            Rejection::Retriable => Err(Error::transient(format!(
                "delivery of event {} failed: {refusal} (topic {}); resending from the slot's \
                 confirmed position{}",
                text(ticket.event_id.as_ref()),
                failure.record.topic,
                if self.transactions.is_some() {
                    " (its Kafka transaction is aborted and sent again; a Postgres transaction \
                     that takes longer to send than -X transaction.timeout.ms is aborted every \
                     time: raise it)"
                } else {
                    ""
                }
            ))),
            _ if ticket.dead_letter => Err(cannot_dead_letter(
                ticket.event_id.as_ref(),
                ticket.commit_lsn,
                &format!(
                    "Kafka rejected the dead-letter record too: {refusal} (topic {})",
                    failure.record.topic
                ),
            )),
            Rejection::Configuration => Err(configuration_error(
                ticket.event_id.as_ref(),
                &failure.record.topic,
                refusal,
                &crate::kafka::principal(&self.settings.kafka),
            )),
            // Its batch was refused for size: perhaps for a neighbour. The
            // loop sends it again alone (`oversized`).
            Rejection::Oversized if !ticket.alone => {
                if let Some(doomed) = self.doomed(&ticket, Remembered::Alone) {
                    return Err(doomed);
                }
                self.suspects.push_back(Suspect { ticket, failure });
                Ok(())
            }
            // The policy runs in the loop: it may need to wait for the sink.
            Rejection::Poison | Rejection::UnknownPartition(_) | Rejection::Oversized => {
                if self.settings.on_poison == OnPoison::DeadLetter {
                    let verdict = Remembered::Refused(failure.refusal.clone());
                    if let Some(doomed) = self.doomed(&ticket, verdict) {
                        return Err(doomed);
                    }
                }
                self.rejected
                    .push_back(Poisoned::undelivered(ticket, failure));
                Ok(())
            }
        }
    }

    /// Applies the poison policy to an event that cannot be published.
    pub async fn reject(&mut self, progress: &mut Progress, poisoned: Poisoned) -> Result<()> {
        // Read again after a restart; dead-lettered (or halted on) before.
        if poisoned.inflight_bytes.is_none() && self.skips(poisoned.commit_lsn) {
            return Ok(());
        }
        let poisoned = match poisoned.unknown_partition {
            Some(_) => {
                let count = self.sink.partition_count(&poisoned.record.topic).await?;
                poisoned.settle_partition(count)?
            }
            None => poisoned,
        };
        let settings = self.settings;
        match poisoned.verdict(settings.on_poison, settings.dead_letter_topic()) {
            Verdict::Halt(error) => Err(error),
            Verdict::DeadLetter(copy) => {
                progress.waiting_for_topic(true);
                let info = self.sink.open_dead_letter_topic().await;
                progress.waiting_for_topic(false);
                let info = info?;
                // The event's own timestamp may be what Kafka refused.
                let now_us = clock::unix_now_us();
                let record = copy.as_record(now_us / 1000);
                if let Some(why) = info.refuse_size(&copy.topic, record.wire_size()) {
                    return Err(poisoned.cannot_dead_letter(&why));
                }
                let ticket = Ticket {
                    txn: poisoned.seq,
                    commit_lsn: poisoned.commit_lsn,
                    commit_time_us: now_us,
                    bytes: record.size(),
                    event_id: poisoned.event_id.as_deref().map(Bytes::copy_from_slice),
                    published: self.metrics.published(&copy.topic),
                    timestamp_ms: record.timestamp_ms,
                    dead_letter: true,
                    alone: info.send_alone,
                };
                if info.send_alone {
                    // The refused original, still counted in flight, waits
                    // for its copy: it is not one to wait for.
                    let original = usize::from(poisoned.inflight_bytes.is_some());
                    self.until_in_flight_at_most(progress, original).await?;
                }
                match self.hand(progress, &record, ticket).await? {
                    Handed::Taken(_) => self.alone_in_flight |= info.send_alone,
                    Handed::Refused(refusal) if refusal.rejection == Rejection::Retriable => {
                        return Err(Error::transient(
                            "cannot hand a dead-letter record to the Kafka producer",
                        )
                        .with_source(refusal))
                    }
                    Handed::Refused(refusal) => {
                        return Err(poisoned.cannot_dead_letter(&format!(
                            "Kafka rejected the dead-letter record too: {refusal}"
                        )))
                    }
                }
                warn!(
                    event_id = %text(poisoned.event_id.as_ref()),
                    commit_lsn = %poisoned.commit_lsn,
                    original_topic = %poisoned.record.topic,
                    reason = %poisoned.reason,
                    dead_letter_topic = %copy.topic,
                    "poison event sent to the dead-letter topic"
                );
                self.metrics.record_dead_letter();
                // A refused original no longer waits for the sink: its copy does.
                if let Some(bytes) = poisoned.inflight_bytes {
                    progress.acked(poisoned.seq, bytes, std::time::Instant::now());
                }
                Ok(())
            }
        }
    }
}
