//! Prometheus metrics and the small HTTP endpoint that serves them, with
//! `/healthz` (the process is alive) and `/readyz` (it is streaming).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tracing::{debug, info};

use crate::error::{Error, Result, StopCause};

pub mod meter;
mod per_event;

pub use per_event::EventTimings;

#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

/// The stages of an event's way from the commit to the confirmation, each
/// timed on its own so a slow tail can be traced to where it forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    CommitToReceived,
    ReceivedToProduced,
    ProducedToAcked,
    AckedToConfirmed,
}

impl Stage {
    const ALL: [Stage; 4] = [
        Stage::CommitToReceived,
        Stage::ReceivedToProduced,
        Stage::ProducedToAcked,
        Stage::AckedToConfirmed,
    ];

    fn label(self) -> &'static str {
        match self {
            Stage::CommitToReceived => "commit_to_received",
            Stage::ReceivedToProduced => "received_to_produced",
            Stage::ProducedToAcked => "produced_to_acked",
            Stage::AckedToConfirmed => "acked_to_confirmed",
        }
    }
}

/// The `wal_status` values Postgres reports for a slot.
pub const WAL_STATUSES: [&str; 4] = ["reserved", "extended", "unreserved", "lost"];

/// What the brokers answered the last probe: not probed yet, a broker
/// answered, none did.
const UNPROBED: u8 = 0;
const ANSWERING: u8 = 1;
const SILENT: u8 = 2;

/// The values of `walrelay_role`: what this walrelay is to its slot. With
/// two replicas (active/passive), one is `active` and the other `standby`.
pub const ROLES: [&str; 3] = ["active", "standby", "none"];

struct Inner {
    registry: Registry,
    /// Streaming from the slot right now.
    streaming: AtomicBool,
    /// Waiting as a standby: another process streams from the slot, and
    /// this one reached Postgres at its last poll.
    standby: AtomicBool,
    role: IntGaugeVec,
    /// Set by the watchdog when events are pending and nothing is confirmed.
    stalled: AtomicBool,
    /// What the last probe of the brokers found (kafka::reachability):
    /// `UNPROBED`, `ANSWERING` or `SILENT`. Kept across sessions, so an
    /// outage is told once however many sessions it spans.
    kafka_answer: AtomicU8,
    /// Microseconds after `started`, plus one, at which the brokers stopped
    /// answering; 0 while they answer or before the first probe.
    kafka_silent_since_us: AtomicU64,
    kafka_reachable_gauge: IntGauge,
    /// What the last schema registry request found (`UNPROBED`,
    /// `ANSWERING`, `SILENT`), and its gauge, registered by the first
    /// request: a walrelay without a registry shows none.
    registry_answer: AtomicU8,
    registry_reachable_gauge: std::sync::OnceLock<IntGauge>,
    started: Instant,
    /// Acknowledgement instants on the Unix epoch, for the delivery latency.
    unix: crate::clock::UnixInstants,
    /// Microseconds after `started` at which the confirmed LSN last moved, or
    /// nothing was pending.
    last_progress_us: AtomicU64,
    /// A session ended with events pending that are not confirmed since:
    /// they are still pending (the next session reads them again), so its
    /// fresh count of none in flight must not restart the confirm age.
    pending_carried: AtomicBool,
    acked: AtomicU64,
    events_published: IntCounterVec,
    delivery_latency: Histogram,
    confirmed_flush_lsn: IntGauge,
    inflight_events: IntGauge,
    inflight_bytes: IntGauge,
    publish_errors: IntCounterVec,
    reconnects: IntCounterVec,
    dead_letters: prometheus::IntCounter,
    topics_created: prometheus::IntCounter,
    slot: SlotGauges,
    slot_lag_alert_level: IntGauge,
    last_confirm_age_seconds: Gauge,
    streaming_gauge: IntGauge,
    pending_transactions: IntGauge,
    /// walrelay_stage_latency_seconds, resolved once per stage (in
    /// `Stage::ALL`'s order): observed for every event, so no label lookup.
    stage_latency: [prometheus::Histogram; 4],
    slot_missing: IntGauge,
    publication_broken: IntGauge,
    /// The stop walrelay is held on (`relay::refused`), if any: /readyz
    /// and the gauges read it.
    held: std::sync::Mutex<Option<StopCause>>,
    ignored_messages: IntCounterVec,
    snapshot: SnapshotGauges,
    /// The prefixes `ignored_messages` has a label for.
    ignored_prefixes: std::sync::Mutex<std::collections::HashSet<String>>,
    /// The WAL position of the watchdog's last check that found the outbox
    /// published as accepted (0: none yet), for retention.
    outbox_verified: AtomicU64,
}

/// Distinct prefixes `walrelay_ignored_messages_total` names; the rest are
/// counted as `(other)`, so a writer inventing prefixes cannot grow /metrics.
const IGNORED_PREFIX_LABELS: usize = 50;

/// Registers each metric as it is made: a name registered twice is a bug.
struct Register<'r>(&'r Registry);

impl Register<'_> {
    fn add<C: prometheus::core::Collector + Clone + 'static>(&self, collector: C) -> C {
        self.0
            .register(Box::new(collector.clone()))
            .expect("metric registered once");
        collector
    }

    fn int_gauge(&self, name: &str, help: &str) -> IntGauge {
        self.add(IntGauge::new(name, help).expect("valid metric"))
    }

    fn gauge(&self, name: &str, help: &str) -> Gauge {
        self.add(Gauge::new(name, help).expect("valid metric"))
    }

    fn counter(&self, name: &str, help: &str) -> prometheus::IntCounter {
        self.add(prometheus::IntCounter::new(name, help).expect("valid metric"))
    }

    fn counter_vec(&self, name: &str, help: &str, label: &str) -> IntCounterVec {
        self.add(IntCounterVec::new(Opts::new(name, help), &[label]).expect("valid metric"))
    }

    fn histogram(&self, name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
        let opts = HistogramOpts::new(name, help).buckets(buckets);
        self.add(Histogram::with_opts(opts).expect("valid metric"))
    }
}

fn stage_latency() -> prometheus::HistogramVec {
    prometheus::HistogramVec::new(
        HistogramOpts::new(
            "walrelay_stage_latency_seconds",
            "Time an event spends in each stage: commit_to_received (the commit timestamp \
             to its transaction's arrival), received_to_produced (arrival to the producer), \
             produced_to_acked (the producer to Kafka's acknowledgement), acked_to_confirmed \
             (confirmable to the status update that confirms it).",
        )
        .buckets(vec![
            0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5,
            1.0, 2.5, 5.0, 10.0,
        ]),
        &["stage"],
    )
    .expect("valid metric")
}

/// Which role this walrelay plays (`ROLES`).
fn role_gauge() -> IntGaugeVec {
    IntGaugeVec::new(
        Opts::new(
            "walrelay_role",
            "1 for this walrelay's role, 0 for the others: active (streams from the slot), \
             standby (another process streams from it; this one reaches Postgres and takes \
             over when the slot is free), none (neither: starting, reconnecting, unable to \
             reach Postgres, or refusing to start).",
        ),
        &["role"],
    )
    .expect("valid metric")
}

fn build_info() -> IntGaugeVec {
    let build_info = IntGaugeVec::new(
        Opts::new("walrelay_build_info", "walrelay's version, always 1."),
        &["version"],
    )
    .expect("valid metric");
    build_info
        .with_label_values(&[env!("CARGO_PKG_VERSION")])
        .set(1);
    build_info
}

/// The series operators alert on exist from the start, at 0: each role
/// (none until walrelay knows), each reconnect target, each delivery
/// error kind.
fn seed_labels(role: &IntGaugeVec, reconnects: &IntCounterVec, publish_errors: &IntCounterVec) {
    for name in ROLES {
        role.with_label_values(&[name])
            .set(i64::from(name == "none"));
    }
    for target in ["postgres", "kafka"] {
        reconnects.with_label_values(&[target]);
    }
    for reason in [
        "MessageTimedOut",
        "MessageSizeTooLarge",
        "InvalidTopic",
        "TopicAuthorizationFailed",
    ] {
        publish_errors.with_label_values(&[reason]);
    }
}

/// The first start's snapshot, as `/metrics` shows it.
struct SnapshotGauges {
    running: IntGauge,
    rows: IntGauge,
    published: IntGauge,
    per_second: Gauge,
    seconds_left: Gauge,
}

impl SnapshotGauges {
    fn register(registry: &Registry) -> Self {
        let int = |name: &str, help: &str| IntGauge::new(name, help).expect("valid metric");
        let float = |name: &str, help: &str| Gauge::new(name, help).expect("valid metric");
        let gauges = SnapshotGauges {
            running: int(
                "walrelay_snapshot_running",
                "1 while the first start's snapshot (--snapshot-where) publishes rows; nothing streams meanwhile.",
            ),
            rows: int(
                "walrelay_snapshot_rows",
                "Rows the first start's snapshot publishes.",
            ),
            published: int(
                "walrelay_snapshot_rows_published",
                "Rows of the snapshot Kafka has acknowledged.",
            ),
            per_second: float(
                "walrelay_snapshot_rows_per_second",
                "The snapshot's rate so far, in rows acknowledged a second.",
            ),
            seconds_left: float(
                "walrelay_snapshot_seconds_left",
                "The snapshot's time left at its rate so far; -1 when unknown.",
            ),
        };
        gauges.seconds_left.set(-1.0);
        for collector in [
            Box::new(gauges.running.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(gauges.rows.clone()),
            Box::new(gauges.published.clone()),
            Box::new(gauges.per_second.clone()),
            Box::new(gauges.seconds_left.clone()),
        ] {
            registry
                .register(collector)
                .expect("metric registered once");
        }
        gauges
    }
}

/// The slot's figures as the watchdog last read them, served only while
/// they are known: not before its first reading, and not while it cannot
/// read Postgres (down, unreachable, the slot gone). A frozen figure would
/// look healthy (a lag of 0, an active slot) exactly when nobody knows.
#[derive(Clone)]
struct SlotGauges {
    lag_bytes: IntGauge,
    retained_wal_bytes: IntGauge,
    safe_wal_size_bytes: IntGauge,
    wal_status: IntGaugeVec,
    active: IntGauge,
    known: Arc<AtomicBool>,
}

impl SlotGauges {
    fn new() -> Self {
        let gauge = |name: &str, help: &str| IntGauge::new(name, help).expect("valid metric");
        let wal_status = IntGaugeVec::new(
            Opts::new(
                "walrelay_slot_wal_status",
                "1 for the slot's current wal_status, 0 for the others.",
            ),
            &["status"],
        )
        .expect("valid metric");
        for status in WAL_STATUSES {
            wal_status.with_label_values(&[status]);
        }
        SlotGauges {
            lag_bytes: gauge(
                "walrelay_slot_lag_bytes",
                "The WAL position (pg_current_wal_lsn(), on a standby pg_last_wal_replay_lsn()) minus the slot's confirmed_flush_lsn.",
            ),
            retained_wal_bytes: gauge(
                "walrelay_slot_retained_wal_bytes",
                "The WAL position (on a standby, its replay position) minus the slot's restart_lsn: WAL the slot keeps on disk.",
            ),
            safe_wal_size_bytes: gauge(
                "walrelay_slot_safe_wal_size_bytes",
                "WAL that can still be written before the slot is lost; -1 when retention is unlimited (max_slot_wal_keep_size = -1).",
            ),
            wal_status,
            active: gauge(
                "walrelay_slot_active",
                "1 when a process streams from the slot (pg_replication_slots.active).",
            ),
            known: Arc::new(AtomicBool::new(false)),
        }
    }

    fn parts(&self) -> [&dyn prometheus::core::Collector; 5] {
        [
            &self.lag_bytes,
            &self.retained_wal_bytes,
            &self.safe_wal_size_bytes,
            &self.wal_status,
            &self.active,
        ]
    }
}

impl prometheus::core::Collector for SlotGauges {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        self.parts().into_iter().flat_map(|c| c.desc()).collect()
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        if !self.known.load(Ordering::Relaxed) {
            return Vec::new();
        }
        self.parts().into_iter().flat_map(|c| c.collect()).collect()
    }
}

/// What the watchdog read from `pg_replication_slots`.
#[derive(Debug, Clone, Default)]
pub struct SlotFigures {
    pub lag_bytes: i64,
    pub retained_wal_bytes: i64,
    /// None when retention is unlimited (`max_slot_wal_keep_size = -1`).
    pub safe_wal_size_bytes: Option<i64>,
    pub wal_status: Option<String>,
    pub active: bool,
}

/// One topic's `walrelay_events_published_total`, looked up once per route.
#[derive(Clone)]
pub struct Published(prometheus::IntCounter);

impl std::fmt::Debug for Published {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Published").field(&self.0.get()).finish()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let r = Register(&registry);
        // Delivery: what Kafka acknowledged, how fast, what failed.
        let events_published = r.counter_vec(
            "walrelay_events_published_total",
            "Events Kafka acknowledged, by topic.",
            "topic",
        );
        let delivery_latency = r.histogram(
            "walrelay_delivery_latency_seconds",
            "Time from the Postgres commit to Kafka's acknowledgement.",
            vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                60.0,
            ],
        );
        let confirmed_flush_lsn = r.int_gauge(
            "walrelay_confirmed_flush_lsn",
            "The LSN walrelay last confirmed to Postgres, as a number.",
        );
        let inflight_events = r.int_gauge(
            "walrelay_inflight_events",
            "Events produced but not yet acknowledged by Kafka.",
        );
        let inflight_bytes = r.int_gauge(
            "walrelay_inflight_bytes",
            "Key and value bytes produced but not yet acknowledged by Kafka.",
        );
        let publish_errors = r.counter_vec(
            "walrelay_publish_errors_total",
            "Kafka delivery errors, by kind.",
            "reason",
        );
        let reconnects = r.counter_vec(
            "walrelay_reconnects_total",
            "Reconnects after a failure, by target: postgres (a session ended by Postgres), \
             kafka (a session ended by Kafka, or an established broker connection lost).",
            "target",
        );
        let dead_letters = r.counter(
            "walrelay_dead_letter_events_total",
            "Poison events published to the dead-letter topic.",
        );
        let topics_created = r.counter(
            "walrelay_topics_created_total",
            "Topics walrelay created for routed events.",
        );
        // The slot and the session's health.
        let slot = r.add(SlotGauges::new());
        let slot_lag_alert_level = r.int_gauge(
            "walrelay_slot_lag_alert_level",
            "The watchdog's alert level: 0 ok, 1 warning, 2 critical.",
        );
        let last_confirm_age_seconds = r.gauge(
            "walrelay_last_confirm_age_seconds",
            "Seconds since the confirmed LSN last moved while events were pending, across sessions; 0 when nothing is pending.",
        );
        let streaming_gauge = r.int_gauge(
            "walrelay_streaming",
            "1 while events can flow: walrelay streams from its slot and a Kafka broker answers.",
        );
        let role = r.add(role_gauge());
        let kafka_reachable_gauge = r.int_gauge(
            "walrelay_kafka_reachable",
            "1 while a Kafka broker answers walrelay's probe (a metadata request every 2 s).",
        );
        let pending_transactions = r.int_gauge(
            "walrelay_pending_transactions",
            "Transactions read but not yet confirmed (open, or waiting for Kafka or an earlier one).",
        );
        let stage_latency = r.add(stage_latency());
        let stages = Stage::ALL.map(|stage| stage_latency.with_label_values(&[stage.label()]));
        let slot_missing = r.int_gauge(
            "walrelay_slot_missing",
            "1 when the slot walrelay streamed from no longer exists.",
        );
        let publication_broken = r.int_gauge(
            "walrelay_publication_broken",
            "1 when the publication no longer delivers the outbox table's INSERTs (table dropped, renamed or removed).",
        );
        let ignored_messages = r.counter_vec(
            "walrelay_ignored_messages_total",
            "Transactional pg_logical_emit_message messages whose prefix is not --message-prefix, by prefix (--source messages).",
            "prefix",
        );
        r.add(build_info());
        seed_labels(&role, &reconnects, &publish_errors);
        let snapshot = SnapshotGauges::register(&registry);
        Metrics(Arc::new(Inner {
            registry,
            snapshot,
            streaming: AtomicBool::new(false),
            standby: AtomicBool::new(false),
            role,
            stalled: AtomicBool::new(false),
            kafka_answer: AtomicU8::new(UNPROBED),
            kafka_silent_since_us: AtomicU64::new(0),
            kafka_reachable_gauge,
            registry_answer: AtomicU8::new(UNPROBED),
            registry_reachable_gauge: std::sync::OnceLock::new(),
            started: Instant::now(),
            unix: crate::clock::UnixInstants::new(),
            last_progress_us: AtomicU64::new(0),
            pending_carried: AtomicBool::new(false),
            acked: AtomicU64::new(0),
            events_published,
            delivery_latency,
            confirmed_flush_lsn,
            inflight_events,
            inflight_bytes,
            publish_errors,
            reconnects,
            dead_letters,
            topics_created,
            slot,
            slot_lag_alert_level,
            last_confirm_age_seconds,
            streaming_gauge,
            pending_transactions,
            stage_latency: stages,
            slot_missing,
            publication_broken,
            held: std::sync::Mutex::new(None),
            ignored_messages,
            ignored_prefixes: Default::default(),
            outbox_verified: AtomicU64::new(0),
        }))
    }

    /// The first start's snapshot (`run --snapshot-where`): whether it
    /// runs, its rows and those acknowledged, its rate and time left.
    pub fn set_snapshot(&self, running: bool, rate: &crate::metrics::meter::Rate) {
        let g = &self.0.snapshot;
        g.running.set(i64::from(running));
        g.rows.set(rate.total as i64);
        g.published.set(rate.done as i64);
        g.per_second.set(rate.per_second);
        g.seconds_left
            .set(rate.left.map_or(-1.0, |left| left.as_secs_f64()));
    }

    /// The published-events counter of `topic`, to count its deliveries
    /// without a lookup by label for each.
    pub fn published(&self, topic: &str) -> Published {
        Published(self.0.events_published.with_label_values(&[topic]))
    }

    /// The per-event observations, buffered on the publishing thread.
    pub fn event_timings(&self) -> EventTimings {
        EventTimings::new(self.clone())
    }

    /// A refused delivery, by the sink's short stable reason.
    pub fn record_publish_error(&self, reason: &str) {
        self.0.publish_errors.with_label_values(&[reason]).inc();
    }

    /// A message of another application's prefix, ignored.
    pub fn record_ignored_message(&self, prefix: &str) {
        let mut labelled = self
            .0
            .ignored_prefixes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let label = if labelled.contains(prefix) {
            prefix
        } else if labelled.len() < IGNORED_PREFIX_LABELS {
            labelled.insert(prefix.to_string());
            prefix
        } else {
            "(other)"
        };
        self.0.ignored_messages.with_label_values(&[label]).inc();
    }

    pub fn record_dead_letter(&self) {
        self.0.dead_letters.inc();
    }

    pub fn record_topic_created(&self) {
        self.0.topics_created.inc();
    }

    pub fn record_reconnect(&self, target: &str) {
        self.0.reconnects.with_label_values(&[target]).inc();
    }

    /// The confirmed LSN; the confirm age restarts only if it moved on: a
    /// new session starting where the last one stopped is no progress.
    pub fn set_confirmed(&self, lsn: u64) {
        let before = self.0.confirmed_flush_lsn.get();
        self.0.confirmed_flush_lsn.set(lsn as i64);
        if lsn as i64 > before {
            self.0.pending_carried.store(false, Ordering::Relaxed);
            self.mark_progress();
        }
    }

    pub fn set_inflight(&self, events: usize, bytes: usize) {
        let carried = self.0.pending_carried.load(Ordering::Relaxed);
        if !carried && events > 0 && self.0.inflight_events.get() == 0 {
            // Nothing was pending: the confirm age starts from here, not
            // from the last event of an idle hour ago. (While nothing is
            // pending it reads 0 whatever the mark.)
            self.mark_progress();
        }
        self.0.inflight_events.set(events as i64);
        self.0.inflight_bytes.set(bytes as i64);
    }

    fn mark_progress(&self) {
        let now = self.0.started.elapsed().as_micros() as u64;
        self.0.last_progress_us.store(now, Ordering::Relaxed);
    }

    pub fn inflight_events(&self) -> i64 {
        self.0.inflight_events.get()
    }

    /// Events Kafka has acknowledged since start.
    pub fn acked_total(&self) -> u64 {
        self.0.acked.load(Ordering::Relaxed)
    }

    /// A session ended: events it left pending, in flight or in a
    /// transaction read and not confirmed (an event whose topic lookup just
    /// failed is no longer in flight), stay pending until the confirmed LSN
    /// moves: the next session reads them again.
    pub fn session_ended(&self) {
        let pending = self.0.inflight_events.get() > 0 || self.0.pending_transactions.get() > 0;
        self.0.pending_carried.fetch_or(pending, Ordering::Relaxed);
    }

    /// How long the confirmed LSN has not moved while events were pending,
    /// in this session or the ones before it.
    pub fn confirm_age(&self) -> Duration {
        if self.0.inflight_events.get() == 0 && !self.0.pending_carried.load(Ordering::Relaxed) {
            return Duration::ZERO;
        }
        let last = Duration::from_micros(self.0.last_progress_us.load(Ordering::Relaxed));
        self.0.started.elapsed().saturating_sub(last)
    }

    /// Streaming from the slot (the role `active`); `walrelay_streaming`
    /// also needs a broker that answers, for events to flow.
    pub fn set_streaming(&self, streaming: bool) {
        self.0.streaming.store(streaming, Ordering::Relaxed);
        self.show_streaming();
        self.show_role();
    }

    fn show_streaming(&self) {
        let flowing = self.is_streaming() && self.is_kafka_reachable();
        self.0.streaming_gauge.set(i64::from(flowing));
    }

    /// Waiting as a standby (another process streams from the slot), or not.
    pub fn set_standby(&self, standby: bool) {
        self.0.standby.store(standby, Ordering::Relaxed);
        if standby {
            // What the last session left pending is another process's now.
            self.0.pending_carried.store(false, Ordering::Relaxed);
        }
        self.show_role();
    }

    fn show_role(&self) {
        let role = if self.is_streaming() {
            "active"
        } else if self.0.standby.load(Ordering::Relaxed) {
            "standby"
        } else {
            "none"
        };
        for name in ROLES {
            self.0
                .role
                .with_label_values(&[name])
                .set(i64::from(name == role));
        }
    }

    pub fn is_streaming(&self) -> bool {
        self.0.streaming.load(Ordering::Relaxed)
    }

    pub fn set_stalled(&self, stalled: bool) {
        self.0.stalled.store(stalled, Ordering::Relaxed);
    }

    /// Ready means streaming from the slot, a broker answering, and not
    /// stalled.
    pub fn is_ready(&self) -> bool {
        self.unready_because().is_none()
    }

    /// What /readyz says when walrelay is not ready.
    pub fn unready_because(&self) -> Option<&'static str> {
        if let Some(cause) = self.held() {
            return Some(match cause {
                StopCause::SlotMissing => {
                    "not streaming: the replication slot walrelay streamed from is missing (see \
                     the log for how to recover)"
                }
                StopCause::SlotLost => {
                    "not streaming: Postgres invalidated the replication slot (wal_status = \
                     lost; see the log for how to recover)"
                }
                StopCause::OutboxChanged => {
                    "not streaming: the outbox is no longer published as walrelay read it (see \
                     the log for the events at risk and how to recover)"
                }
                _ => "not streaming: stopped (see the log)",
            });
        }
        if !self.is_streaming() {
            Some(if self.0.slot_missing.get() == 1 {
                "not streaming: the replication slot walrelay streamed from is missing (see the \
                 log for how to recover)"
            } else if self.0.standby.load(Ordering::Relaxed) {
                "not streaming: a standby, another process streams from the slot"
            } else {
                "not streaming"
            })
        } else if self.0.stalled.load(Ordering::Relaxed) {
            Some("stalled: events are pending and the confirmed LSN does not move")
        } else if !self.is_kafka_reachable() {
            Some(
                "Kafka does not answer: no broker of --kafka-brokers replied to a metadata request",
            )
        } else if self.0.registry_answer.load(Ordering::Relaxed) == SILENT {
            Some(
                "the schema registry does not answer: events wait in the slot until \
                 --schema-registry-url answers",
            )
        } else {
            None
        }
    }

    /// What the last probe of the brokers found; true when that is news to
    /// tell: the first silence since start or since a broker last answered,
    /// or the first answer after a silence, whichever session probed.
    pub fn set_kafka_reachable(&self, reachable: bool) -> bool {
        let m = &self.0;
        let now = if reachable { ANSWERING } else { SILENT };
        let before = m.kafka_answer.swap(now, Ordering::Relaxed);
        m.kafka_reachable_gauge.set(i64::from(reachable));
        self.show_streaming();
        if reachable {
            m.kafka_silent_since_us.store(0, Ordering::Relaxed);
        } else {
            let now = m.started.elapsed().as_micros() as u64 + 1;
            let _ = m.kafka_silent_since_us.compare_exchange(
                0,
                now,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        before != now && !(before == UNPROBED && reachable)
    }

    /// What the last schema registry request found; the first call
    /// registers `walrelay_schema_registry_reachable`.
    pub fn set_schema_registry_reachable(&self, reachable: bool) {
        let m = &self.0;
        let gauge = m.registry_reachable_gauge.get_or_init(|| {
            let gauge = IntGauge::new(
                "walrelay_schema_registry_reachable",
                "1 if the schema registry answered walrelay's last request, 0 if it did not \
                 (events wait in the slot meanwhile).",
            )
            .expect("valid metric");
            m.registry
                .register(Box::new(gauge.clone()))
                .expect("registered once");
            gauge
        });
        gauge.set(i64::from(reachable));
        let now = if reachable { ANSWERING } else { SILENT };
        m.registry_answer.store(now, Ordering::Relaxed);
    }

    pub fn is_kafka_reachable(&self) -> bool {
        self.0.kafka_answer.load(Ordering::Relaxed) == ANSWERING
    }

    /// How long no broker has answered, if none does now.
    pub fn kafka_silent_for(&self) -> Option<Duration> {
        let since = self.0.kafka_silent_since_us.load(Ordering::Relaxed);
        (since > 0).then(|| {
            self.0
                .started
                .elapsed()
                .saturating_sub(Duration::from_micros(since - 1))
        })
    }

    /// What the watchdog read: served from now on, until `forget_slot`.
    pub fn set_slot(&self, slot: &SlotFigures) {
        let g = &self.0.slot;
        g.lag_bytes.set(slot.lag_bytes);
        g.retained_wal_bytes.set(slot.retained_wal_bytes);
        g.safe_wal_size_bytes
            .set(slot.safe_wal_size_bytes.unwrap_or(-1));
        for status in WAL_STATUSES {
            let current = slot.wal_status.as_deref() == Some(status);
            g.wal_status
                .with_label_values(&[status])
                .set(i64::from(current));
        }
        g.active.set(i64::from(slot.active));
        g.known.store(true, Ordering::Relaxed);
    }

    /// The watchdog cannot read the slot (Postgres down, the slot gone):
    /// its figures leave /metrics rather than freeze at their last values.
    pub fn forget_slot(&self) {
        self.0.slot.known.store(false, Ordering::Relaxed);
    }

    pub fn observe_stage(&self, stage: Stage, took: Duration) {
        self.0.stage_latency[stage as usize].observe(took.as_secs_f64());
    }

    pub fn set_pending_transactions(&self, count: usize) {
        self.0.pending_transactions.set(count as i64);
    }

    pub fn set_slot_missing(&self, missing: bool) {
        // Held for a missing slot, it stays missing to walrelay until a
        // restart decides again (a slot made since is not the one it read).
        let held = self.held() == Some(StopCause::SlotMissing);
        self.0.slot_missing.set(i64::from(missing || held));
    }

    pub fn set_publication_broken(&self, broken: bool) {
        // A stop held for a changed outbox stays broken, whatever the
        // publication looks like by now: events may have bypassed the slot.
        let held = self.held() == Some(StopCause::OutboxChanged);
        self.0.publication_broken.set(i64::from(broken || held));
    }

    /// walrelay is held on `cause` until stopped (`relay::refused`):
    /// nothing streams, and /readyz and the cause's gauge say why.
    pub fn hold(&self, cause: StopCause) {
        *self.0.held.lock().unwrap_or_else(|e| e.into_inner()) = Some(cause);
        self.set_standby(false);
        self.set_streaming(false);
        match cause {
            StopCause::OutboxChanged => self.0.publication_broken.set(1),
            StopCause::SlotMissing => self.0.slot_missing.set(1),
            _ => {}
        }
    }

    fn held(&self) -> Option<StopCause> {
        *self.0.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn set_alert_level(&self, level: i64) {
        self.0.slot_lag_alert_level.set(level);
    }

    /// The registry, for a task that registers metrics of its own (retention).
    pub fn registry(&self) -> &Registry {
        &self.0.registry
    }

    /// The watchdog found the outbox published as accepted at this WAL position.
    pub fn set_outbox_verified(&self, lsn: u64) {
        self.0.outbox_verified.fetch_max(lsn, Ordering::Relaxed);
    }

    /// The newest WAL position at which the outbox was found published as
    /// accepted; 0 before the first check.
    pub fn outbox_verified(&self) -> u64 {
        self.0.outbox_verified.load(Ordering::Relaxed)
    }

    pub fn render(&self) -> String {
        self.0
            .last_confirm_age_seconds
            .set(self.confirm_age().as_secs_f64());
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.0.registry.gather(), &mut out)
            .expect("text encoding cannot fail");
        String::from_utf8(out).expect("metrics are UTF-8")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Binds the endpoint now (so a taken port fails start-up) and serves it in the background.
pub async fn serve(addr: SocketAddr, metrics: Metrics) -> Result<()> {
    let listener = TcpListener::bind(addr).await.map_err(|e| {
        Error::permanent(format!(
            "cannot listen on --metrics-addr {addr}; choose a free address"
        ))
        .with_source(e)
    })?;
    info!(%addr, "serving /metrics, /healthz and /readyz");
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            let metrics = metrics.clone();
            tokio::spawn(async move {
                // Read the request head (bounded); closing with unread bytes would reset the connection.
                let mut request = Vec::with_capacity(512);
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 8192 {
                    match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await
                    {
                        Ok(Ok(0)) => break,
                        Ok(Ok(n)) => request.extend_from_slice(&buf[..n]),
                        Ok(Err(e)) => return debug!(error = %e, "metrics request failed"),
                        Err(_) => return,
                    }
                }
                let (status, content_type, body) = respond(&request, &metrics);
                let response = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    Ok(())
}

fn respond(request: &[u8], metrics: &Metrics) -> (&'static str, &'static str, String) {
    let line = request
        .split(|&b| b == b'\r' || b == b'\n')
        .next()
        .unwrap_or(&[]);
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if method != "GET" {
        return ("405 Method Not Allowed", "text/plain", "GET only\n".into());
    }
    match path.split('?').next().unwrap_or("") {
        "/metrics" => ("200 OK", "text/plain; version=0.0.4", metrics.render()),
        "/healthz" => ("200 OK", "text/plain", "ok\n".into()),
        "/readyz" => match metrics.unready_because() {
            None => ("200 OK", "text/plain", "ready\n".into()),
            Some(why) => ("503 Service Unavailable", "text/plain", format!("{why}\n")),
        },
        _ => (
            "404 Not Found",
            "text/plain",
            "try /metrics, /healthz or /readyz\n".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_confirm_age_runs_on_across_a_session_that_ended_with_events_pending() {
        let metrics = Metrics::new();
        metrics.set_confirmed(100);
        metrics.set_inflight(1, 10);
        std::thread::sleep(Duration::from_millis(20));
        // The failed topic lookup takes the event out of flight, then the
        // session ends with its transaction unconfirmed.
        metrics.set_pending_transactions(1);
        metrics.set_inflight(0, 0);
        metrics.session_ended();
        // The next session starts where the last one stopped.
        metrics.set_confirmed(100);
        metrics.set_inflight(0, 0);
        assert!(metrics.confirm_age() >= Duration::from_millis(20));
        metrics.set_inflight(1, 10);
        assert!(metrics.confirm_age() >= Duration::from_millis(20));
        // Only a confirmed LSN that moves on starts it again.
        metrics.set_confirmed(200);
        assert!(metrics.confirm_age() < Duration::from_millis(20));
    }

    #[test]
    fn the_slot_figures_are_served_only_while_known() {
        let metrics = Metrics::new();
        assert!(!metrics.render().contains("walrelay_slot_active "));
        metrics.set_slot(&SlotFigures {
            active: true,
            ..SlotFigures::default()
        });
        assert!(metrics.render().contains("walrelay_slot_active 1"));
        metrics.forget_slot();
        let text = metrics.render();
        assert!(!text.contains("walrelay_slot_lag_bytes"), "{text}");
        assert!(text.contains("walrelay_slot_lag_alert_level"), "{text}");
    }

    #[test]
    fn a_kafka_outage_is_news_once_and_streaming_needs_a_broker() {
        let metrics = Metrics::new();
        metrics.set_streaming(true);
        assert!(!Metrics::new().set_kafka_reachable(true), "a first answer");
        assert!(metrics.set_kafka_reachable(false), "the first silence");
        assert!(metrics.render().contains("\nwalrelay_streaming 0\n"));
        assert!(!metrics.set_kafka_reachable(false), "said already");
        assert!(metrics.set_kafka_reachable(true), "answers again");
        assert!(metrics.render().contains("\nwalrelay_streaming 1\n"));
        assert!(metrics.set_kafka_reachable(false), "a new outage");
    }

    #[test]
    fn each_stage_is_observed_under_its_own_label() {
        let metrics = Metrics::new();
        for (i, stage) in Stage::ALL.into_iter().enumerate() {
            for _ in 0..=i {
                metrics.observe_stage(stage, Duration::from_millis(1));
            }
        }
        let text = metrics.render();
        for (i, stage) in Stage::ALL.into_iter().enumerate() {
            let line = format!(
                "walrelay_stage_latency_seconds_count{{stage=\"{}\"}} {}",
                stage.label(),
                i + 1
            );
            assert!(text.contains(&line), "no `{line}` in:\n{text}");
        }
    }
}
