//! The apply loop of one streaming session: replication messages in,
//! records out to the sink, deliveries back, and status updates that confirm
//! only what the sink has acknowledged (see `progress` for why each confirmed
//! LSN is safe).
//!
//! The loop reads and dispatches. `Progress` keeps the books, `Publisher`
//! turns events into records for the sink, `poison` decides what happens to
//! an event that cannot be published; `Upstream` and `Sink` are the two
//! peers, so the whole loop runs in tests without Postgres or Kafka.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{interval, sleep_until, Instant, MissedTickBehavior};
use tracing::{debug, error, info, warn};

use super::resume::{Confirmed, Position};
use super::upstream::{Liveness, Upstream};
use crate::clock;
use crate::config::{ExactlyOnce, OnUpdate, Settings, Source};
use crate::delivery::poison::Poisoned;
use crate::delivery::progress::{Progress, Ticket, TxnRef};
use crate::delivery::publish::{transaction, Publisher};
use crate::error::{Error, Result};
use crate::metrics::{Metrics, Stage};
use crate::outbox::cloudevents::Change;
use crate::outbox::mapping::{MappingError, OutboxEvent, OutboxSchema};
use crate::outbox::message::event_from_message;
use crate::postgres::guard;
use crate::postgres::lsn::Lsn;
use crate::postgres::names::TableName;
use crate::postgres::pgoutput::{self, EmittedMessage, LogicalMessage, Relation};
use crate::postgres::placement::RelationRole;
use crate::postgres::replication::ReplicationMessage;
use crate::postgres::state::recovery::{outbox_changed_error, AtRisk};
use crate::postgres::state::ServerId;
use crate::sink::Sink;

/// How long a session that lost Postgres still takes Kafka's deliveries.
const SETTLE_ON_ERROR: Duration = Duration::from_secs(5);
/// The most messages applied after one wake-up from what is already read.
const BUFFERED_BATCH: usize = 256;
/// The longest deliveries wait to be taken while the loop has no other
/// reason to wake (see `stream`).
const DELIVERY_DELAY: Duration = Duration::from_millis(10);
/// The longest, after looks that found nothing (Kafka does not answer).
const MAX_DELIVERY_DELAY: Duration = Duration::from_millis(160);

/// What an outbox schema is built from: the Relation message, and the
/// table's NOT NULL columns and DEFAULT expressions from the catalog.
type Described = (Relation, BTreeSet<String>, BTreeMap<String, String>);

pub struct ApplyLoop<'a, U, S> {
    settings: &'a Settings,
    upstream: U,
    publisher: Publisher<'a, S>,
    progress: Progress,
    liveness: Liveness,
    metrics: Metrics,
    /// The outbox schema by relation oid; `None` for other published tables.
    relations: HashMap<u32, Option<OutboxSchema>>,
    /// What each outbox schema was built from: Postgres sends a Relation
    /// message again after any invalidation (`ALTER TABLE … SET (…)`, a
    /// new index), and only a real change is worth a line at INFO.
    described: HashMap<u32, Described>,
    open_txn: Option<TxnRef>,
    /// The open transaction's place in the WAL, for the source block of
    /// its rows (--value-format cloudevents, --metadata-headers).
    change: Change,
    /// The end of the last commit read in this session.
    last_commit: Option<Lsn>,
    /// A message with --message-prefix arrived in this session.
    prefix_seen: bool,
    /// Other prefixes already warned about (a few at most).
    warned_prefixes: HashSet<String>,
    /// Where confirmed positions are remembered beyond the session.
    remember: Option<(ServerId, &'a Position)>,
    /// What the guard's messages are judged against, when it is installed.
    guard: Option<guard::Watch>,
    /// How long deliveries may wait to be taken now (see `stream`).
    delivery_delay: Duration,
}

impl<'a, U: Upstream, S: Sink<Ticket>> ApplyLoop<'a, U, S> {
    /// `confirmed` is the slot's position at the start; silence on the
    /// upstream longer than `read_timeout` means it is gone.
    pub fn new(
        settings: &'a Settings,
        upstream: U,
        sink: S,
        confirmed: Lsn,
        read_timeout: Duration,
        metrics: Metrics,
    ) -> Self {
        ApplyLoop {
            settings,
            upstream,
            publisher: Publisher::new(settings, sink, metrics.clone()),
            progress: Progress::new(confirmed, settings.flow, metrics.clone()),
            liveness: Liveness::new(read_timeout),
            metrics,
            relations: HashMap::new(),
            described: HashMap::new(),
            open_txn: None,
            change: Change::read_at(0),
            last_commit: None,
            prefix_seen: false,
            warned_prefixes: HashSet::new(),
            remember: None,
            guard: None,
            delivery_delay: DELIVERY_DELAY,
        }
    }

    /// Judges the guard's messages (sql/walrelay_guard.sql) against `watch`.
    pub fn guarded(mut self, watch: Option<guard::Watch>) -> Self {
        self.guard = watch;
        self
    }

    /// Delivers exactly once: the sink writes in transactions, which close
    /// on Postgres commit boundaries (`publish::transaction`).
    pub fn exactly_once(mut self, limits: ExactlyOnce, run: transaction::Run) -> Self {
        self.publisher.exactly_once(limits, run);
        self
    }

    /// Shares every confirmed position on `server` with later sessions.
    pub fn remembering(mut self, server: ServerId, position: &'a Position) -> Self {
        self.remember = Some((server, position));
        self
    }

    /// Streams until `shutdown` fires (then drains and returns Ok) or an error ends the session.
    pub async fn run(mut self, shutdown: &mut watch::Receiver<bool>) -> Result<()> {
        match self.stream(shutdown).await {
            Ok(()) => {
                let drained = self.shut_down().await;
                self.upstream.close().await;
                drained
            }
            Err(e) if e.is_transient() => {
                // Postgres went away (a crash, a failover): what Kafka
                // acknowledges now need not be sent again by the next session.
                self.settle_inflight(SETTLE_ON_ERROR).await;
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    async fn stream(&mut self, shutdown: &mut watch::Receiver<bool>) -> Result<()> {
        let mut status_tick = interval(self.settings.flow.status_interval);
        status_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            // Deliveries do not wake the loop while it reads: each one would
            // cost a wake-up of its own (at 2,000 one-event transactions a
            // second, a third of them). They are taken at every wake-up
            // instead, and within DELIVERY_DELAY when nothing else comes
            // (longer while looks find none). With the window full, or with
            // exactly-once delivery, they are what the loop waits for, so
            // then they wake it.
            if self.take_deliveries()? > 0 {
                self.delivery_delay = DELIVERY_DELAY;
            }
            let reading = self.may_read().await?;
            // What this turn observed reaches /metrics before the loop waits.
            self.publisher.flush_timings();
            if !reading {
                self.liveness.not_reading();
            }
            let prompt = !reading || self.publisher.wants_prompt_deliveries();
            let deliveries_due = (!prompt && self.progress.inflight_events() > 0)
                .then(|| Instant::now() + self.delivery_delay);
            let report_at = self.progress.report_due();
            let close_at = self.publisher.close_at();
            let ask_at = self.liveness.ask_at();
            tokio::select! {
                biased;
                // The guard wait_for returns is dropped at once: it must not
                // be held while other branches await.
                _ = async { drop(shutdown.wait_for(|stop| *stop).await) } => break,
                Some(delivery) = self.publisher.delivery(), if prompt => {
                    self.publisher.on_delivery(&mut self.progress, delivery)?
                }
                _ = sleep_until(deliveries_due.unwrap_or_else(Instant::now)), if deliveries_due.is_some() => {
                    self.delivery_delay = match self.take_deliveries()? {
                        0 => (self.delivery_delay * 2).min(MAX_DELIVERY_DELAY),
                        _ => DELIVERY_DELAY,
                    };
                }
                _ = status_tick.tick() => self.report(false).await?,
                _ = sleep_until(report_at.unwrap_or_else(Instant::now)), if report_at.is_some() => {
                    self.report(false).await?
                }
                // Exactly once: a Kafka transaction whose time is up between
                // Postgres transactions.
                _ = sleep_until(close_at.unwrap_or_else(Instant::now)), if close_at.is_some() => {
                    self.publisher.close_transaction()
                }
                message = self.upstream.next(), if reading => {
                    self.liveness.heard();
                    self.on_replication(message?).await?;
                    self.read_buffered().await?
                }
                _ = sleep_until(ask_at.unwrap_or_else(Instant::now)), if reading && ask_at.is_some() => {
                    self.report(true).await?;
                    self.liveness.asked();
                }
                _ = sleep_until(self.liveness.dead_at()), if reading => {
                    return Err(Error::transient(format!(
                        "Postgres sent nothing on the replication connection for {:?}, not even \
                         an answer to a keepalive request: the server or the network is \
                         unresponsive; reconnecting (--replication-timeout)",
                        self.liveness.timeout()
                    )));
                }
            }
        }
        Ok(())
    }

    /// Takes every delivery already at hand; says how many.
    fn take_deliveries(&mut self) -> Result<usize> {
        let mut taken = 0;
        while let Some(delivery) = self.publisher.try_delivery() {
            self.publisher.on_delivery(&mut self.progress, delivery)?;
            taken += 1;
        }
        Ok(taken)
    }

    /// Settles what Kafka refused, then says whether the next message may be
    /// read. Backpressure: with the window full, or while a record must
    /// travel alone, reading stops; the walsender waits.
    async fn may_read(&mut self) -> Result<bool> {
        self.publisher.settle_rejected(&mut self.progress).await?;
        Ok(self.progress.has_room() && self.publisher.ready_for_more())
    }

    /// Applies the messages already read from the socket, up to
    /// `BUFFERED_BATCH`, without a trip through the `select!` for each (its
    /// timers, wakers and clock reads are a good part of a small message's
    /// cost in a backlog). Each one is taken on the loop's own terms
    /// (`may_read`); deliveries and status updates wait at most one batch.
    /// The batch counts as heard when the loop woke for it (each message's
    /// arrival, for `received_to_produced`) and again at its end: a clock
    /// read per batch, not per message.
    async fn read_buffered(&mut self) -> Result<()> {
        use futures_util::FutureExt;
        let mut read = false;
        for _ in 0..BUFFERED_BATCH {
            if !self.may_read().await? {
                break;
            }
            // `next` is cancel-safe: a look that finds nothing loses nothing.
            let Some(message) = self.upstream.next().now_or_never() else {
                break;
            };
            read = true;
            self.on_replication(message?).await?;
        }
        if read {
            self.liveness.heard();
        }
        Ok(())
    }

    async fn on_replication(&mut self, message: ReplicationMessage) -> Result<()> {
        match message {
            ReplicationMessage::Keepalive {
                wal_end,
                reply_requested,
            } => {
                self.progress.keepalive(wal_end);
                if reply_requested {
                    self.report(false).await?;
                }
                Ok(())
            }
            ReplicationMessage::XLogData {
                wal_start, data, ..
            } => {
                self.progress.received(wal_start);
                // Reading it again would fail the same way: stop before it.
                let message = pgoutput::decode(data).map_err(|e| {
                    Error::permanent(format!(
                        "cannot decode the pgoutput message at LSN {wal_start}; walrelay stopped \
                         before it and the slot stays at {}. This is a message walrelay does not \
                         understand (a newer protocol feature, or a damaged stream): upgrade \
                         walrelay, or report it with the server's version",
                        self.progress.confirmed()
                    ))
                    .with_source(e)
                })?;
                self.on_change(message, wal_start).await
            }
        }
    }

    /// `wal_start` is where the message's change is in the WAL.
    async fn on_change(&mut self, message: LogicalMessage, wal_start: Lsn) -> Result<()> {
        match message {
            LogicalMessage::Begin(begin) => {
                if self.open_txn.is_some() {
                    return Err(protocol("BEGIN inside an open transaction"));
                }
                let commit_time_us = clock::pg_to_unix_us(begin.commit_time);
                self.metrics.observe_stage(
                    Stage::CommitToReceived,
                    clock::since_unix_us(commit_time_us),
                );
                self.open_txn = Some(TxnRef {
                    seq: self.progress.begin(),
                    commit_lsn: begin.final_lsn,
                    commit_time_us,
                });
                self.change = Change {
                    commit_time_us,
                    xid: Some(begin.xid),
                    lsn: None,
                    last_commit: self.last_commit,
                    read: false,
                };
            }
            LogicalMessage::Commit(commit) => {
                let txn = self
                    .open_txn
                    .take()
                    .ok_or_else(|| protocol("COMMIT without BEGIN"))?;
                self.publisher
                    .end_transaction(&mut self.progress, txn, commit.end_lsn);
                self.last_commit = Some(commit.end_lsn);
            }
            LogicalMessage::Relation(relation) => self.on_relation(relation).await?,
            LogicalMessage::Insert { relation, new } => {
                let mapped = match self.relations.get(&relation) {
                    Some(Some(schema)) => {
                        let change = Change {
                            lsn: Some(wal_start),
                            ..self.change
                        };
                        schema.event(new, &change)
                    }
                    // Placed as another published table when it was described.
                    Some(None) => return Ok(()),
                    None => return Err(protocol("INSERT for a relation never described")),
                };
                self.apply_event(mapped, "an INSERT").await?;
            }
            LogicalMessage::Update { relation, .. } => {
                if let Some(Some(_)) = self.relations.get(&relation) {
                    self.on_outbox_update()?;
                }
            }
            LogicalMessage::Message(message) => {
                // Debezium counts a message outside a transaction as a commit
                // of its own (the source block's lastCommitLsn).
                if !message.transactional {
                    self.last_commit = Some(wal_start);
                }
                self.on_emitted_message(message).await?
            }
            LogicalMessage::Delete { .. }
            | LogicalMessage::Truncate { .. }
            | LogicalMessage::Type { .. }
            | LogicalMessage::Origin { .. } => {}
        }
        Ok(())
    }

    fn on_outbox_update(&self) -> Result<()> {
        let what = "an UPDATE of an outbox row: only INSERTs are events";
        match self.settings.on_update {
            OnUpdate::Warn => warn!("ignoring {what}"),
            OnUpdate::Error => error!("ignoring {what}"),
            OnUpdate::Fatal => {
                return Err(Error::permanent(format!(
                    "{what}, and --on-update is fatal; stop updating outbox rows or choose \
                     --on-update warn"
                )))
            }
        }
        Ok(())
    }

    /// A `pg_logical_emit_message` event (--source messages). Only
    /// transactional ones are events: a non-transactional message is sent
    /// even when its transaction rolls back, so it could be a phantom.
    async fn on_emitted_message(&mut self, message: EmittedMessage) -> Result<()> {
        if message.prefix == guard::PREFIX {
            return self.on_guard(&message);
        }
        if self.settings.source != Source::Messages {
            return Ok(());
        }
        if message.prefix != self.settings.message_prefix {
            self.ignore_message(&message.prefix);
            return Ok(());
        }
        self.prefix_seen = true;
        let route_by = &self.settings.mapping.route_by;
        let trace_field = self.settings.mapping.tracing_span_context.as_deref();
        if message.transactional {
            let mapped = event_from_message(&message.content, route_by, trace_field);
            return self.apply_event(mapped, "a transactional message").await;
        }
        let event = event_from_message(&message.content, route_by, trace_field)
            .unwrap_or_else(|e| *e.event);
        let reason = format!(
            "a non-transactional message with prefix {:?} is sent even when its transaction \
             rolls back, so it is not an outbox event; emit events with \
             pg_logical_emit_message(true, …) (sql/outbox_messages.sql)",
            message.prefix
        );
        // It stands outside any transaction: give it one of its own.
        let txn = TxnRef {
            seq: self.progress.begin(),
            commit_lsn: message.lsn,
            commit_time_us: clock::unix_now_us(),
        };
        let poisoned = Poisoned::new(txn, &event, None, reason);
        self.publisher.reject(&mut self.progress, poisoned).await?;
        self.publisher
            .end_transaction(&mut self.progress, txn, message.lsn);
        Ok(())
    }

    /// A guard message: a command of this transaction changed a publication
    /// or a table. If it changed how the outbox is published, walrelay stops
    /// before the transaction: from it on, until the outbox is published
    /// again, inserts never reached the slot.
    fn on_guard(&self, message: &EmittedMessage) -> Result<()> {
        let (Some(watch), Some(txn), true) = (&self.guard, self.open_txn, message.transactional)
        else {
            return Ok(());
        };
        let notice = guard::Notice::parse(&message.content).map_err(|e| {
            Error::permanent(format!(
                "cannot read the guard's message at LSN {} (sql/walrelay_guard.sql): it may come \
                 from a newer guard than this walrelay knows; walrelay stopped before it and the \
                 slot stays at {}. Upgrade walrelay, or install this version's \
                 sql/walrelay_guard.sql",
                message.lsn,
                self.progress.confirmed()
            ))
            .with_source(e)
        })?;
        let Some(what) = watch.judge(&notice) else {
            return Ok(());
        };
        if watch.accepted_through.is_some_and(|a| txn.commit_lsn <= a) {
            info!(commit_lsn = %txn.commit_lsn, "{what}: accepted with --accept-outbox-change, reading on");
            return Ok(());
        }
        let at = std::time::UNIX_EPOCH
            + Duration::from_micros(u64::try_from(txn.commit_time_us).unwrap_or(0));
        let risk = AtRisk {
            from: format!(
                "{} (the transaction committed at {} that made the change: walrelay stopped \
                 before it, and the slot stays at {})",
                txn.commit_lsn,
                humantime::format_rfc3339_micros(at),
                self.progress.confirmed()
            ),
            to: "the position where it was published again".to_string(),
            // As positions: after the slot's, which stays before the
            // change's own transaction (its rows may be missing too).
            range: Some((self.progress.confirmed(), None)),
        };
        error!(level = "critical", cause = "publication_changed", "{what}");
        Err(outbox_changed_error(
            &format!("the guard saw how the outbox is published change: {what}"),
            &risk,
        ))
    }

    /// Other applications' messages are not events, but a prefix mistyped
    /// on either side would lose every event in silence: count them all,
    /// and say so while the configured prefix has never been seen.
    fn ignore_message(&mut self, prefix: &str) {
        self.metrics.record_ignored_message(prefix);
        if !self.prefix_seen
            && self.warned_prefixes.len() < 10
            && self.warned_prefixes.insert(prefix.to_string())
        {
            warn!(
                prefix,
                message_prefix = %self.settings.message_prefix,
                "ignoring messages with another prefix, and none with --message-prefix has \
                 arrived yet: if these are your events, fix the prefix on the writer's side \
                 or in --message-prefix (walrelay_ignored_messages_total counts them)"
            );
        }
    }

    /// Publishes an event of the open transaction, or hands a row or message
    /// that could not become one to the poison policy.
    async fn apply_event(
        &mut self,
        mapped: std::result::Result<OutboxEvent, MappingError>,
        what: &str,
    ) -> Result<()> {
        let txn = self
            .open_txn
            .ok_or_else(|| protocol(&format!("{what} outside a transaction")))?;
        let received_at = self.liveness.heard_at();
        self.publisher
            .publish_mapped(&mut self.progress, txn, mapped, received_at)
            .await
    }

    /// A Relation message arrives before a table's first change in a session
    /// and again after its schema changes: the cached mapping is replaced.
    /// A relation seen for the first time is placed by the upstream: the
    /// outbox or one of its partitions maps as the outbox, another published
    /// table is ignored (said once), and anything else stops the relay,
    /// because its rows might be events walrelay cannot read. The outbox is
    /// placed again on every Relation message, for its NOT NULL columns.
    async fn on_relation(&mut self, relation: Relation) -> Result<()> {
        let known = self.relations.get(&relation.oid).map(Option::is_some);
        let columns = match known {
            Some(false) => None,
            _ => match self.upstream.place(&relation).await? {
                RelationRole::Outbox { not_null, defaults } => Some((not_null, defaults)),
                // Known as the outbox, no longer placed (renamed or dropped
                // since): still the outbox, its columns read as nullable.
                _ if known.is_some() => Some((BTreeSet::new(), BTreeMap::new())),
                RelationRole::Other => {
                    warn!(
                        table = %format!("{}.{}", relation.namespace, relation.name),
                        publication = %self.settings.publication,
                        "the publication also publishes this table; its changes are not outbox \
                         events and are ignored"
                    );
                    None
                }
                RelationRole::Unknown => return Err(self.unplaceable(&relation)),
                RelationRole::Replaced { table, oid, since } => {
                    return Err(self.replaced(&relation, &table, oid, since))
                }
            },
        };
        let schema = if let Some((not_null, defaults)) = columns {
            let table = &self.outbox_name(&relation);
            let mapping = &self.settings.mapping;
            let schema =
                OutboxSchema::from_relation(&relation, mapping, table, &not_null, &defaults)?;
            let now = (relation.clone(), not_null, defaults);
            match self.described.insert(relation.oid, now.clone()) {
                Some(before) if before != now => {
                    info!(table = %table, "outbox table schema changed; mapping updated")
                }
                Some(_) => debug!(table = %table, "outbox table described again, unchanged"),
                None => {}
            }
            Some(schema)
        } else {
            None
        };
        self.relations.insert(relation.oid, schema);
        Ok(())
    }

    /// The outbox table a relation belongs to, for messages: the one
    /// `--table`, or with several the relation's own name (a partition is
    /// named as itself).
    fn outbox_name(&self, relation: &Relation) -> TableName {
        match self.settings.tables.as_slice() {
            [table] => table.clone(),
            _ => TableName {
                schema: relation.namespace.clone(),
                name: relation.name.clone(),
            },
        }
    }

    /// A new table under an outbox table's name: its rows from before it
    /// joined the publication never reached the slot.
    fn replaced(&self, relation: &Relation, table: &TableName, oid: u32, since: Lsn) -> Error {
        let to = match self.open_txn {
            Some(txn) => format!("the transaction that commits at {}", txn.commit_lsn),
            None => "now".to_string(),
        };
        let risk = AtRisk {
            from: since.to_string(),
            to,
            range: Some((since, self.open_txn.map(|txn| txn.commit_lsn))),
        };
        let what = format!(
            "the outbox table {table} was dropped and recreated: the stream carries rows of \
             {}.{} (oid {}, under table oid {oid}), which is not the table walrelay accepted",
            relation.namespace, relation.name, relation.oid
        );
        outbox_changed_error(&what, &risk)
    }

    fn unplaceable(&self, relation: &Relation) -> Error {
        let slot = &self.settings.slot;
        let confirmed = self.progress.confirmed();
        // Relation messages come inside the transaction that uses them.
        let (at, skip) = match self.open_txn {
            Some(txn) => (
                format!("the transaction that commits at LSN {}", txn.commit_lsn),
                format!(
                    "SELECT pg_replication_slot_advance('{slot}', '{}');",
                    Lsn(txn.commit_lsn.0 + 1)
                ),
            ),
            None => (
                format!("the change after LSN {confirmed}"),
                "pg_replication_slot_advance".to_string(),
            ),
        };
        Error::permanent(format!(
            "the replication stream carries changes of table {}.{} (oid {}) in {at}, and that \
             table is not the outbox table {}, not one of its partitions, and not in \
             publication {:?} now (dropped, detached or removed since): walrelay cannot tell \
             whether its rows are events, so it stopped before them; the slot stays at \
             {confirmed}. If they are not events, skip the transaction by hand: {skip} In the \
             outbox pattern that transaction usually holds outbox rows too, which the skip \
             would lose: publish them again afterwards (same event ids, so consumers dedupe). \
             See docs/operations.md, \"A relation walrelay cannot place\"",
            relation.namespace,
            relation.name,
            relation.oid,
            self.settings.tables_text(),
            self.settings.publication
        ))
    }

    async fn report(&mut self, reply_requested: bool) -> Result<()> {
        let (received, confirmed) = self.progress.report();
        self.remember_position();
        self.upstream
            .report(received, confirmed, reply_requested)
            .await
    }

    /// Tells later sessions (and the state table) what is confirmed now.
    fn remember_position(&self) {
        let Some((server, position)) = &self.remember else {
            return;
        };
        let now = Confirmed {
            server: server.clone(),
            lsn: self.progress.confirmed(),
            delivered: self.progress.delivered(),
        };
        position.send_if_modified(|held| {
            let newer = held
                .as_ref()
                .is_none_or(|h| h.server != now.server || h.lsn < now.lsn);
            if newer {
                *held = Some(now);
            }
            newer
        });
    }

    /// Takes deliveries for up to `limit` without the upstream, which is
    /// gone, and remembers what they confirm.
    async fn settle_inflight(&mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.progress.inflight_events() > 0 {
            tokio::select! {
                Some(delivery) = self.publisher.delivery() => {
                    if self.publisher.on_delivery(&mut self.progress, delivery).is_err() {
                        break;
                    }
                }
                _ = sleep_until(deadline) => break,
            }
        }
        self.remember_position();
    }

    /// Stops reading, waits (bounded) for in-flight deliveries, confirms what
    /// they allow and closes the connection.
    async fn shut_down(&mut self) -> Result<()> {
        info!(
            inflight = self.progress.inflight_events(),
            "shutting down: waiting for in-flight deliveries"
        );
        let deadline = Instant::now() + self.settings.timeouts.shutdown;
        let mut status_tick = interval(
            self.settings
                .flow
                .status_interval
                .max(Duration::from_millis(100)),
        );
        while self.progress.inflight_events() > 0 {
            tokio::select! {
                Some(delivery) = self.publisher.delivery() => {
                    self.publisher.on_delivery(&mut self.progress, delivery)?
                }
                _ = status_tick.tick() => self.report(false).await?,
                _ = sleep_until(deadline) => {
                    warn!(
                        inflight = self.progress.inflight_events(),
                        "shutdown timeout reached; unconfirmed events will be sent again on restart"
                    );
                    break;
                }
            }
        }
        self.publisher.finish(&mut self.progress, deadline).await?;
        self.report(false).await?;
        info!(confirmed_lsn = %self.progress.confirmed(), "final status update sent");
        Ok(())
    }
}

/// A stream that breaks pgoutput's rules: reading it again would not help.
fn protocol(what: &str) -> Error {
    Error::permanent(format!(
        "unexpected replication stream: {what}; walrelay stopped and the slot stays before it"
    ))
}
