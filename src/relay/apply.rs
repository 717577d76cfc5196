//! The apply loop of one streaming session: replication messages in, Kafka
//! messages out, delivery reports back, and status updates that confirm only
//! what Kafka has acknowledged.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rdkafka::error::KafkaError;
use tokio::sync::{mpsc, watch};
use tokio::time::{interval, Instant, MissedTickBehavior};
use tracing::{error, info, warn};

use crate::checkpoint::{Checkpoint, TxnSeq};
use crate::config::{OnUpdate, Source};
use crate::error::{Error, Result};
use crate::clock;
use crate::kafka::producer::{Delivery, Outgoing, Producer, SendError};
use crate::kafka::topics::{TopicInfo, TopicManager};
use crate::kafka::{classify, Rejection};
use crate::metrics::{Metrics, Stage};
use crate::outbox::mapping::{MappingError, OutboxEvent, OutboxSchema};
use crate::outbox::message::event_from_message;
use crate::postgres::lsn::Lsn;
use crate::postgres::pgoutput::{self, EmittedMessage, LogicalMessage, Relation};
use crate::postgres::publication::{RelationResolver, RelationRole};
use crate::postgres::replication::{
    ReplicationMessage, ReplicationStream, StatusSender,
};

use super::poison::{configuration_error, Poisoned};
use super::Settings;

/// Distinct route-by values remembered before the topic cache starts over.
const ROUTE_CACHE_LIMIT: usize = 10_000;

/// How soon a moved confirmation is reported: often enough that a crash
/// re-delivers little, rarely enough to cost the walsender nothing.
const PROMPT_CONFIRM: Duration = Duration::from_millis(20);

/// What a session opened, handed to the apply loop.
pub struct SessionParts {
    pub stream: ReplicationStream,
    pub status: StatusSender,
    pub producer: Producer,
    pub deliveries: mpsc::UnboundedReceiver<Delivery>,
    /// Places relations the stream names (None for the table-less outbox).
    pub resolver: Option<RelationResolver>,
    /// The slot's confirmed position at the start.
    pub confirmed: Lsn,
    /// Silence on the replication connection longer than this means it is dead.
    pub read_timeout: Duration,
}

/// The transaction whose changes are arriving now.
struct OpenTxn {
    seq: TxnSeq,
    commit_lsn: Lsn,
    /// Microseconds since the Unix epoch.
    commit_time_us: i64,
}

pub struct ApplyLoop<'a> {
    pub(super) settings: &'a Settings,
    pub(super) topics: TopicManager<'a>,
    pub(super) metrics: Metrics,
    stream: ReplicationStream,
    status: StatusSender,
    producer: Producer,
    deliveries: mpsc::UnboundedReceiver<Delivery>,
    pub(super) checkpoint: Checkpoint,
    /// The outbox schema by relation oid; `None` for other published tables.
    relations: HashMap<u32, Option<OutboxSchema>>,
    resolver: Option<RelationResolver>,
    open_txn: Option<OpenTxn>,
    received: Lsn,
    read_timeout: Duration,
    /// When the server last sent anything (or reading last resumed).
    last_heard: Instant,
    asked_for_keepalive: bool,
    /// The confirmed LSN of the last status update, and when it went out.
    reported: Lsn,
    reported_at: Instant,
    /// When the confirmed LSN first moved past what was last reported.
    confirmable_since: Option<Instant>,
    pub(super) inflight_events: usize,
    pub(super) inflight_bytes: usize,
    /// Deliveries Kafka refused as poison, waiting for the poison policy.
    pub(super) rejected: VecDeque<Poisoned>,
    /// Topics by route-by value, already checked (and created).
    topics_by_route: HashMap<Bytes, (Arc<str>, TopicInfo)>,
}

impl<'a> ApplyLoop<'a> {
    pub fn new(
        settings: &'a Settings,
        topics: TopicManager<'a>,
        metrics: Metrics,
        parts: SessionParts,
    ) -> Self {
        let confirmed = parts.confirmed;
        metrics.set_confirmed(confirmed.0);
        ApplyLoop {
            settings,
            topics,
            metrics,
            stream: parts.stream,
            status: parts.status,
            producer: parts.producer,
            deliveries: parts.deliveries,
            checkpoint: Checkpoint::new(confirmed),
            relations: HashMap::new(),
            resolver: parts.resolver,
            open_txn: None,
            received: confirmed,
            read_timeout: parts.read_timeout,
            last_heard: Instant::now(),
            asked_for_keepalive: false,
            reported: confirmed,
            reported_at: Instant::now(),
            confirmable_since: None,
            inflight_events: 0,
            inflight_bytes: 0,
            rejected: VecDeque::new(),
            topics_by_route: HashMap::new(),
        }
    }

    /// Streams until `shutdown` fires (then drains and returns Ok) or an error ends the session.
    pub async fn run(mut self, shutdown: &mut watch::Receiver<bool>) -> Result<()> {
        let mut status_tick = interval(self.settings.status_interval);
        status_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            while let Some(poisoned) = self.rejected.pop_front() {
                self.reject(poisoned).await?;
            }
            let has_room = self.inflight_events < self.settings.max_inflight_events
                && self.inflight_bytes < self.settings.max_inflight_bytes
                && self.checkpoint.pending() < self.settings.max_pending_transactions;
            if !has_room {
                // Not reading is not the server's silence.
                self.last_heard = Instant::now();
            }
            let confirm_moved = self.checkpoint.confirmed() > self.reported;
            tokio::select! {
                biased;
                _ = shutdown.wait_for(|stop| *stop) => return self.shut_down().await,
                Some(delivery) = self.deliveries.recv() => self.on_delivery(delivery)?,
                _ = status_tick.tick() => self.send_status(false).await?,
                _ = tokio::time::sleep_until(self.reported_at + PROMPT_CONFIRM), if confirm_moved => {
                    self.send_status(false).await?
                }
                // Backpressure: with the window full, stop reading; the walsender waits.
                message = self.stream.next(), if has_room => {
                    self.last_heard = Instant::now();
                    self.asked_for_keepalive = false;
                    self.on_replication(message?).await?
                }
                // A quiet server is asked for a keepalive, so that silence
                // past the whole read timeout means it is gone.
                _ = tokio::time::sleep_until(self.last_heard + self.read_timeout / 2),
                    if has_room && !self.asked_for_keepalive => {
                    self.send_status(true).await?;
                    self.asked_for_keepalive = true;
                }
                _ = tokio::time::sleep_until(self.last_heard + self.read_timeout), if has_room => {
                    return Err(Error::transient(format!(
                        "Postgres sent nothing on the replication connection for {:?}, not even \
                         an answer to a keepalive request: the server or the network is \
                         unresponsive; reconnecting (--replication-timeout)",
                        self.read_timeout
                    )));
                }
            }
        }
    }

    async fn on_replication(&mut self, message: ReplicationMessage) -> Result<()> {
        match message {
            ReplicationMessage::Keepalive {
                wal_end,
                reply_requested,
            } => {
                self.received = self.received.max(wal_end);
                if self.checkpoint.observe_wal_end(wal_end) {
                    self.metrics.set_confirmed(self.checkpoint.confirmed().0);
                }
                if reply_requested {
                    self.send_status(false).await?;
                }
                Ok(())
            }
            ReplicationMessage::XLogData {
                wal_start, data, ..
            } => {
                self.received = self.received.max(wal_start);
                let message = pgoutput::decode(data).map_err(|e| {
                    Error::transient(format!("cannot decode the change at LSN {wal_start}"))
                        .with_source(e)
                })?;
                self.on_change(message).await
            }
        }
    }

    async fn on_change(&mut self, message: LogicalMessage) -> Result<()> {
        match message {
            LogicalMessage::Begin(begin) => {
                if self.open_txn.is_some() {
                    return Err(protocol("BEGIN inside an open transaction"));
                }
                let seq = self.checkpoint.begin();
                let commit_time_us = clock::pg_to_unix_us(begin.commit_time);
                self.metrics
                    .observe_stage(Stage::CommitToReceived, clock::since_unix_us(commit_time_us));
                self.metrics
                    .set_pending_transactions(self.checkpoint.pending());
                self.open_txn = Some(OpenTxn {
                    seq,
                    commit_lsn: begin.final_lsn,
                    commit_time_us,
                });
            }
            LogicalMessage::Commit(commit) => {
                let txn = self
                    .open_txn
                    .take()
                    .ok_or_else(|| protocol("COMMIT without BEGIN"))?;
                self.checkpoint.commit(txn.seq, commit.end_lsn);
                self.advance();
            }
            LogicalMessage::Relation(relation) => self.on_relation(relation).await?,
            LogicalMessage::Insert { relation, new } => {
                let schema = match self.relations.get(&relation) {
                    Some(Some(schema)) => schema,
                    // Placed as another published table when it was described.
                    Some(None) => return Ok(()),
                    None => return Err(protocol("INSERT for a relation never described")),
                };
                let mapped = schema.event(new);
                self.apply_event(mapped, "an INSERT").await?;
            }
            LogicalMessage::Update { relation, .. } => {
                if let Some(Some(_)) = self.relations.get(&relation) {
                    let what = "an UPDATE of an outbox row: only INSERTs are events";
                    match self.settings.on_update {
                        OnUpdate::Warn => warn!("ignoring {what}"),
                        OnUpdate::Error => error!("ignoring {what}"),
                        OnUpdate::Fatal => {
                            return Err(Error::permanent(format!(
                                "{what}, and --on-update is fatal; stop updating outbox rows or \
                                 choose --on-update warn"
                            )))
                        }
                    }
                }
            }
            LogicalMessage::Message(message) => self.on_emitted_message(message).await?,
            LogicalMessage::Delete { .. }
            | LogicalMessage::Truncate { .. }
            | LogicalMessage::Type { .. }
            | LogicalMessage::Origin { .. } => {}
        }
        Ok(())
    }

    /// A `pg_logical_emit_message` event (--source messages). Only
    /// transactional ones are events: a non-transactional message is sent
    /// even when its transaction rolls back, so it could be a phantom.
    async fn on_emitted_message(&mut self, message: EmittedMessage) -> Result<()> {
        if self.settings.source != Source::Messages
            || message.prefix != self.settings.message_prefix
        {
            return Ok(());
        }
        if !message.transactional {
            let event = event_from_message(&message.content, &self.settings.mapping.route_by)
                .unwrap_or_else(|e| *e.event);
            let reason = format!(
                "a non-transactional message with prefix {:?} is sent even when its transaction \
                 rolls back, so it is not an outbox event; emit events with \
                 pg_logical_emit_message(true, …) (sql/outbox_messages.sql)",
                message.prefix
            );
            // It stands outside any transaction: give it one of its own.
            let seq = self.checkpoint.begin();
            self.reject(Poisoned::new(seq, message.lsn, &event, None, reason))
                .await?;
            self.checkpoint.commit(seq, message.lsn);
            self.advance();
            return Ok(());
        }
        let mapped = event_from_message(&message.content, &self.settings.mapping.route_by);
        self.apply_event(mapped, "a transactional message").await
    }

    /// Publishes an event of the open transaction, or applies the poison
    /// policy to a row or message that could not become one.
    async fn apply_event(
        &mut self,
        mapped: std::result::Result<OutboxEvent, MappingError>,
        what: &str,
    ) -> Result<()> {
        let txn = self
            .open_txn
            .as_ref()
            .ok_or_else(|| protocol(&format!("{what} outside a transaction")))?;
        let (seq, commit_lsn, commit_time_us) = (txn.seq, txn.commit_lsn, txn.commit_time_us);
        match mapped {
            Ok(event) => self.publish(seq, commit_lsn, commit_time_us, event).await,
            Err(MappingError { event, reason }) => {
                self.reject(Poisoned::new(seq, commit_lsn, &event, None, reason))
                    .await
            }
        }
    }

    /// A Relation message arrives before a table's first change in a session
    /// and again after its schema changes: the cached mapping is replaced.
    /// A relation seen for the first time is placed through the catalog: the
    /// outbox or one of its partitions maps as the outbox, another published
    /// table is ignored (said once), and anything else stops the relay,
    /// because its rows might be events walrelay cannot read.
    async fn on_relation(&mut self, relation: Relation) -> Result<()> {
        let known = self.relations.get(&relation.oid);
        let is_outbox = match (known, &self.resolver) {
            (Some(schema), _) => schema.is_some(),
            (None, None) => false,
            (None, Some(resolver)) => match resolver.role(&relation).await? {
                RelationRole::Outbox => true,
                RelationRole::Other => {
                    warn!(
                        table = %format!("{}.{}", relation.namespace, relation.name),
                        publication = %self.settings.publication,
                        "the publication also publishes this table; its changes are not outbox \
                         events and are ignored"
                    );
                    false
                }
                RelationRole::Unknown => {
                    return Err(Error::permanent(format!(
                        "the replication stream carries changes of table {}.{} (oid {}), which \
                         is not the outbox table {}, not one of its partitions, and not in \
                         publication {:?} now (dropped, detached or removed since): walrelay \
                         cannot tell whether its rows are events, so it stopped before them. \
                         If they are not events, advance the slot past this transaction by hand \
                         (pg_replication_slot_advance); if they are, publish them by hand first",
                        relation.namespace,
                        relation.name,
                        relation.oid,
                        self.settings.table,
                        self.settings.publication
                    )))
                }
            },
        };
        let schema = if is_outbox {
            let table = &self.settings.table;
            let schema = OutboxSchema::from_relation(&relation, &self.settings.mapping, table)?;
            if known.is_some() {
                info!(table = %table, "outbox table schema changed; mapping updated");
            }
            Some(schema)
        } else {
            None
        };
        self.relations.insert(relation.oid, schema);
        Ok(())
    }

    async fn publish(
        &mut self,
        seq: TxnSeq,
        commit_lsn: Lsn,
        commit_time_us: i64,
        event: OutboxEvent,
    ) -> Result<()> {
        let Some(route_value) = &event.route_value else {
            let reason = format!(
                "its route-by column {:?} is NULL",
                self.settings.mapping.route_by
            );
            return self
                .reject(Poisoned::new(seq, commit_lsn, &event, None, reason))
                .await;
        };
        let (topic, info) = match self.topic_for(route_value).await? {
            Ok(found) => found,
            Err(reason) => {
                return self
                    .reject(Poisoned::new(seq, commit_lsn, &event, None, reason))
                    .await
            }
        };
        let headers: Vec<(&str, Option<&[u8]>)> = event
            .headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_deref()))
            .collect();
        let outgoing = Outgoing {
            topic: &topic,
            key: event.key.as_ref(),
            payload: event.payload.as_ref(),
            event_id: event.id.as_ref(),
            event_type: event.event_type.as_ref(),
            extra_headers: &headers,
            partition: event.partition,
            timestamp_ms: event.timestamp_ms.unwrap_or(commit_time_us / 1000),
            dead_letter: false,
            commit_lsn,
            commit_time_us,
        };
        // The broker enforces the topic's max.message.bytes; librdkafka only its own limit.
        if let Some(reason) = info.refuse_size(&topic, outgoing.record_size()) {
            let poisoned = Poisoned::new(seq, commit_lsn, &event, Some(topic.to_string()), reason);
            return self.reject(poisoned).await;
        }
        let refused = match self.produce(seq, &outgoing).await? {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        match classify(&refused) {
            Rejection::Poison => {
                let poisoned = Poisoned::refused(seq, commit_lsn, &event, &topic, &refused);
                self.reject(poisoned).await
            }
            Rejection::Configuration => {
                Err(configuration_error(event.id.as_ref(), &topic, &refused))
            }
            Rejection::Retriable => Err(Error::transient(format!(
                "cannot hand event {} to the Kafka producer",
                event.id_text()
            ))
            .with_source(refused)),
        }
    }

    /// The topic for a route-by value, or why the event cannot go there.
    /// Routing and the topic's checks run once per distinct value in a
    /// session; after that it is one lookup.
    async fn topic_for(
        &mut self,
        route_value: &Bytes,
    ) -> Result<std::result::Result<(Arc<str>, TopicInfo), String>> {
        if let Some((topic, info)) = self.topics_by_route.get(route_value) {
            return Ok(Ok((topic.clone(), *info)));
        }
        let topic = match self
            .settings
            .router
            .topic(&String::from_utf8_lossy(route_value))
        {
            Ok(topic) => topic,
            Err(reason) => return Ok(Err(reason)),
        };
        let info = match self.topics.ensure(&topic).await? {
            Ok(info) => info,
            Err(reason) => return Ok(Err(reason)),
        };
        // A route-by column of many distinct values must not grow the cache forever.
        if self.topics_by_route.len() >= ROUTE_CACHE_LIMIT {
            self.topics_by_route.clear();
        }
        let topic: Arc<str> = topic.into();
        // A copy of the key: a slice would pin the whole replication message.
        self.topics_by_route
            .insert(Bytes::copy_from_slice(route_value), (topic.clone(), info));
        Ok(Ok((topic, info)))
    }

    /// Hands one message to librdkafka and counts it as in flight for `seq`.
    /// A full local queue is waited out by taking delivery reports. The inner
    /// result is librdkafka's refusal of this message; the outer one is an
    /// error met while waiting.
    pub(super) async fn produce(
        &mut self,
        seq: TxnSeq,
        outgoing: &Outgoing<'_>,
    ) -> Result<std::result::Result<(), KafkaError>> {
        loop {
            match self.producer.send(seq, outgoing) {
                Ok(()) => break,
                Err(SendError::QueueFull) => {
                    let delivery = self.deliveries.recv().await.ok_or_else(|| {
                        Error::transient("the Kafka producer stopped reporting deliveries")
                    })?;
                    self.on_delivery(delivery)?;
                }
                Err(SendError::Failed(e)) => return Ok(Err(e)),
            }
        }
        self.checkpoint.event_sent(seq);
        // The message this event came in was read at `last_heard`.
        self.metrics
            .observe_stage(Stage::ReceivedToProduced, self.last_heard.elapsed());
        self.inflight_events += 1;
        self.inflight_bytes += outgoing.size();
        self.metrics
            .set_inflight(self.inflight_events, self.inflight_bytes);
        Ok(Ok(()))
    }

    fn on_delivery(&mut self, delivery: Delivery) -> Result<()> {
        match delivery.result {
            Ok(()) => {
                self.acked(delivery.txn, delivery.bytes);
                Ok(())
            }
            Err(failure) if delivery.dead_letter && classify(&failure.error) != Rejection::Retriable => {
                Err(Error::permanent(format!(
                    "Kafka rejected the dead-letter record of event {} too: {} (topic {}); \
                     walrelay stopped and the slot stays before it; fix the cause (for a size \
                     error, raise --dead-letter-max-message-bytes and the topic's \
                     max.message.bytes) and restart",
                    text(failure.event_id.as_ref()),
                    failure.error,
                    failure.topic
                )))
            }
            Err(failure) if !delivery.dead_letter && classify(&failure.error) == Rejection::Poison => {
                // The policy runs in the loop: it may need to wait for Kafka.
                self.rejected
                    .push_back(Poisoned::from_failure(delivery.txn, delivery.bytes, *failure));
                Ok(())
            }
            Err(failure) if classify(&failure.error) == Rejection::Configuration => Err(
                configuration_error(failure.event_id.as_ref(), &failure.topic, &failure.error),
            ),
            // A retriable error surfaced despite infinite retries (a dead-letter
            // record's too): start over from the slot, which still holds the event.
            Err(failure) => Err(Error::transient(format!(
                "delivery of event {} failed: {} (topic {}); resending from the slot's confirmed position",
                text(failure.event_id.as_ref()),
                failure.error,
                failure.topic
            ))),
        }
    }

    /// Kafka acknowledged one event of `seq`.
    pub(super) fn acked(&mut self, seq: TxnSeq, bytes: usize) {
        self.checkpoint.event_acked(seq);
        self.inflight_events -= 1;
        self.inflight_bytes -= bytes;
        self.metrics
            .set_inflight(self.inflight_events, self.inflight_bytes);
        self.advance();
    }

    fn advance(&mut self) {
        if self.checkpoint.advance() {
            self.metrics.set_confirmed(self.checkpoint.confirmed().0);
            self.confirmable_since.get_or_insert_with(Instant::now);
        }
        self.metrics
            .set_pending_transactions(self.checkpoint.pending());
    }

    async fn send_status(&mut self, reply_requested: bool) -> Result<()> {
        let confirmed = self.checkpoint.confirmed();
        self.status
            .send(self.received, confirmed, reply_requested)
            .await?;
        self.reported = confirmed;
        self.reported_at = Instant::now();
        if let Some(since) = self.confirmable_since.take() {
            self.metrics
                .observe_stage(Stage::AckedToConfirmed, since.elapsed());
        }
        Ok(())
    }

    /// Stops reading, waits (bounded) for in-flight deliveries, confirms what
    /// they allow and closes the connection.
    async fn shut_down(mut self) -> Result<()> {
        info!(
            inflight = self.inflight_events,
            "shutting down: waiting for in-flight deliveries"
        );
        let deadline = Instant::now() + self.settings.shutdown_timeout;
        let mut status_tick = interval(
            self.settings
                .status_interval
                .max(Duration::from_millis(100)),
        );
        while self.inflight_events > 0 {
            tokio::select! {
                Some(delivery) = self.deliveries.recv() => self.on_delivery(delivery)?,
                _ = status_tick.tick() => self.send_status(false).await?,
                _ = tokio::time::sleep_until(deadline) => {
                    warn!(
                        inflight = self.inflight_events,
                        "shutdown timeout reached; unconfirmed events will be sent again on restart"
                    );
                    break;
                }
            }
        }
        self.send_status(false).await?;
        info!(confirmed_lsn = %self.checkpoint.confirmed(), "final status update sent");
        self.status.close().await;
        Ok(())
    }
}

/// An id or header for messages, or a placeholder when absent.
pub(super) fn text(value: Option<&Bytes>) -> String {
    value
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .unwrap_or_else(|| "(NULL)".into())
}

fn protocol(what: &str) -> Error {
    Error::transient(format!("unexpected replication stream: {what}"))
}
