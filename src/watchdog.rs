//! The watchdog: on its own control connection, reads the slot every
//! `--watchdog-interval`, publishes its figures as metrics, and raises an
//! alert level before retained WAL fills the disk. Each change of level is
//! logged once, with the figures and a hint at the likely cause, and POSTed
//! to `--alert-webhook` when one is set.

use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;
use tracing::{error, info, warn};

use crate::error::Error;
use crate::metrics::{Metrics, SlotFigures};
use crate::postgres::slot::SlotReport;
use crate::postgres::state::recovery::lost_slot_error;

mod reading;
mod source;
mod webhook;

use reading::Readings;
pub use source::Watched;

/// How often a watchdog that cannot reach Postgres says so again.
const BLIND_REPEAT: Duration = Duration::from_secs(60);

/// The longest one check may wait for Postgres, connecting included: a
/// frozen backend must not hold the watchdog (and its guard against loss)
/// forever.
const CHECK_TIMEOUT: Duration = Duration::from_secs(30);

/// A check's result, or a transient error if Postgres did not answer in time
/// (the caller then drops the connection and connects again).
async fn answered<T>(
    check: impl std::future::Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    tokio::time::timeout(CHECK_TIMEOUT, check)
        .await
        .unwrap_or_else(|_| {
            Err(Error::transient(format!(
                "Postgres did not answer the watchdog within {CHECK_TIMEOUT:?}"
            )))
        })
}
pub use webhook::Webhook;

#[derive(Debug, Clone)]
pub struct WatchdogSettings {
    pub interval: Duration,
    pub lag_warn_bytes: u64,
    pub lag_critical_bytes: u64,
    pub safe_wal_warn_ratio: f64,
    pub stall_timeout: Duration,
    pub webhook: Option<Webhook>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Ok = 0,
    Warning = 1,
    Critical = 2,
}

impl Level {
    fn name(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Warning => "warning",
            Level::Critical => "critical",
        }
    }
}

/// The likely reason the slot is not keeping up, told apart from what the
/// relay itself observes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    None,
    /// Events are pending and Kafka has acknowledged nothing since the last check.
    BrokerDown,
    /// Kafka acknowledges events, yet the confirmed LSN has not moved for --stall-timeout.
    Stall,
    /// Confirmations move, but the slot falls further behind.
    SlowConsumer,
    /// The relay is not streaming: reconnecting, or halted by a poison event.
    NotStreaming,
    /// Postgres is about to remove WAL the slot needs.
    WalRetention,
    /// Postgres has removed WAL the slot needed: it can never resume.
    SlotLost,
}

impl Cause {
    fn name(self) -> &'static str {
        match self {
            Cause::None => "none",
            Cause::BrokerDown => "broker_down",
            Cause::Stall => "stall",
            Cause::SlowConsumer => "slow_consumer",
            Cause::NotStreaming => "not_streaming",
            Cause::WalRetention => "wal_retention",
            Cause::SlotLost => "slot_lost",
        }
    }

    fn hint(self) -> &'static str {
        match self {
            Cause::None => "",
            Cause::BrokerDown => {
                "Kafka has acknowledged nothing since the last check while events wait: \
                 the broker is likely down or unreachable; check the brokers and walrelay's \
                 log for librdkafka errors"
            }
            Cause::Stall => {
                "the confirmed LSN has not moved for --stall-timeout although Kafka \
                 acknowledges events: a delivery is stuck; check walrelay's log and the \
                 partition leaders of the outbox topics"
            }
            Cause::SlowConsumer => {
                "walrelay confirms, but more slowly than the database writes: a slow \
                 consumer; check the broker's produce latency and walrelay's CPU"
            }
            Cause::NotStreaming => {
                "walrelay is not streaming from the slot: it is reconnecting, or a poison \
                 event halted it (see its log); the slot stays where it stopped"
            }
            Cause::WalRetention => {
                "Postgres is close to removing WAL the slot needs (max_slot_wal_keep_size): \
                 restore delivery now or the slot will be lost"
            }
            Cause::SlotLost => {
                "the slot is lost and walrelay stops; see docs/operations.md, \"The slot is lost\""
            }
        }
    }
}

/// What the relay itself observed since the last check.
#[derive(Debug, Clone, Copy)]
pub struct RelayView {
    pub streaming: bool,
    pub inflight_events: i64,
    pub acked_since_last_check: u64,
    pub confirm_age: Duration,
    pub lag_grew: bool,
    /// How long no Kafka broker has answered walrelay's probe, if none does.
    pub kafka_silent_for: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Assessment {
    pub level: Level,
    pub cause: Cause,
    pub reasons: Vec<String>,
    pub stalled: bool,
    pub lost: bool,
}

/// Decides the alert level from the slot and the relay's own view. Pure, so
/// every rule can be tested without a database.
pub fn assess(slot: &SlotReport, relay: &RelayView, s: &WatchdogSettings) -> Assessment {
    let mut level = Level::Ok;
    let mut reasons = Vec::new();
    let mut raise = |to: Level, why: String| {
        level = level.max(to);
        reasons.push(why);
    };
    let lag = slot.lag_bytes.max(0) as u64;
    if lag >= s.lag_critical_bytes {
        raise(
            Level::Critical,
            format!(
                "slot lag {} ≥ --lag-critical-bytes {}",
                human_bytes(lag),
                human_bytes(s.lag_critical_bytes)
            ),
        );
    } else if lag >= s.lag_warn_bytes {
        raise(
            Level::Warning,
            format!(
                "slot lag {} ≥ --lag-warn-bytes {}",
                human_bytes(lag),
                human_bytes(s.lag_warn_bytes)
            ),
        );
    }
    let mut retention = false;
    if let (Some(safe), Some(limit)) = (slot.safe_wal_size, slot.wal_keep_limit) {
        if limit > 0 && (safe as f64) < s.safe_wal_warn_ratio * limit as f64 {
            retention = true;
            raise(
                Level::Warning,
                format!(
                    "only {} of max_slot_wal_keep_size {} is left before the slot is lost",
                    human_bytes(safe.max(0) as u64),
                    human_bytes(limit as u64)
                ),
            );
        }
    }
    let lost = slot.wal_status.as_deref() == Some("lost");
    match slot.wal_status.as_deref() {
        Some("unreserved") => {
            retention = true;
            raise(
                Level::Critical,
                "wal_status is unreserved: the next checkpoint may remove WAL the slot needs"
                    .into(),
            );
        }
        Some("lost") => {
            retention = true;
            raise(
                Level::Critical,
                "wal_status is lost: WAL the slot needed has been removed".into(),
            );
        }
        _ => {}
    }
    let stalled =
        relay.streaming && relay.inflight_events > 0 && relay.confirm_age >= s.stall_timeout;
    if stalled {
        raise(
            Level::Critical,
            format!(
                "{} events pending and the confirmed LSN has not moved for {}s",
                relay.inflight_events,
                relay.confirm_age.as_secs()
            ),
        );
    }
    // Whether or not events are pending: a broker list nothing answers on
    // must not look healthy until the first event.
    let broker_away = relay.streaming
        && relay
            .kafka_silent_for
            .is_some_and(|silent| silent >= s.stall_timeout);
    if broker_away {
        raise(
            Level::Critical,
            format!(
                "no Kafka broker has answered for {}s",
                relay.kafka_silent_for.unwrap_or_default().as_secs()
            ),
        );
    }
    let cause = if level == Level::Ok {
        Cause::None
    } else if lost {
        Cause::SlotLost
    } else if retention {
        Cause::WalRetention
    } else if !relay.streaming {
        Cause::NotStreaming
    } else if broker_away || (relay.inflight_events > 0 && relay.acked_since_last_check == 0) {
        Cause::BrokerDown
    } else if stalled {
        Cause::Stall
    } else if relay.lag_grew {
        Cause::SlowConsumer
    } else {
        Cause::None
    };
    Assessment {
        level,
        cause,
        reasons,
        stalled,
        lost,
    }
}

/// Runs until the slot is lost or the outbox is no longer published, which
/// it reports on `fatal`. The slot's figures are in /metrics only while
/// its last reading succeeded (`Metrics::forget_slot`).
pub async fn run(
    watched: Watched,
    settings: WatchdogSettings,
    metrics: Metrics,
    fatal: mpsc::Sender<Error>,
) {
    watch(reading::Postgres::new(watched), settings, metrics, fatal).await
}

/// The watchdog's loop over any readings: Postgres's (`run`), or scripted
/// ones on paused time in the timer tests.
async fn watch(
    mut readings: impl Readings,
    mut settings: WatchdogSettings,
    metrics: Metrics,
    fatal: mpsc::Sender<Error>,
) {
    // Served with or without a webhook, so the alert on it has a series.
    let undelivered = webhook::register_undelivered(&metrics);
    settings.webhook = settings.webhook.map(|w| w.counting(undelivered));
    // The first check waits one interval, so start-up problems are reported
    // by the relay itself, once.
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::now() + settings.interval,
        settings.interval,
    );
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut level = Level::Ok;
    let mut last_acked = metrics.acked_total();
    let mut last_lag = None;
    // tokio's clock, so that the throttle runs on paused time in tests.
    let mut last_blind_warning: Option<tokio::time::Instant> = None;
    loop {
        tick.tick().await;
        // Bounded like every reading: a server that accepts the connection
        // but never answers its startup would hold the watchdog forever,
        // with the slot's last figures still served.
        match answered(readings.connect()).await {
            Ok(()) => {
                if last_blind_warning.take().is_some() {
                    info!("watchdog connected to Postgres again; its checks resume");
                }
            }
            Err(e) => {
                metrics.forget_slot();
                // Its checks (the slot, the publication) guard against
                // loss: being blind must not go unsaid, nor flood the log
                // while the relay's own session says more.
                let now = tokio::time::Instant::now();
                if last_blind_warning.is_none_or(|at| now.duration_since(at) >= BLIND_REPEAT) {
                    last_blind_warning = Some(now);
                    warn!(
                        error = %e.report(),
                        "watchdog cannot connect to Postgres: the slot and publication \
                         checks wait until it can"
                    );
                }
                continue;
            }
        }
        match answered(readings.check_source(&metrics, settings.webhook.as_ref())).await {
            Ok(()) => {}
            Err(e) if e.is_transient() => {
                warn!(error = %e.report(), "watchdog cannot read the publication");
                metrics.forget_slot();
                readings.disconnect();
                continue;
            }
            Err(e) => {
                // The watchdog reads the slot no more: its figures would freeze.
                metrics.forget_slot();
                let _ = fatal.send(e).await;
                return;
            }
        }
        let report = match answered(readings.slot()).await {
            Ok(Some(report)) => {
                readings.slot_present(&metrics);
                report
            }
            Ok(None) => {
                metrics.forget_slot();
                // What the state table remembers of the slot: bounded too.
                let record = async {
                    readings
                        .slot_absent(&metrics, settings.webhook.as_ref())
                        .await;
                    Ok(())
                };
                if let Err(e) = answered(record).await {
                    warn!(error = %e.report(), "watchdog cannot read the slot's record");
                    readings.disconnect();
                }
                continue;
            }
            Err(e) => {
                warn!(error = %e.report(), "watchdog cannot read the slot");
                metrics.forget_slot();
                readings.disconnect();
                continue;
            }
        };
        metrics.set_slot(&SlotFigures {
            lag_bytes: report.lag_bytes,
            retained_wal_bytes: report.retained_bytes,
            safe_wal_size_bytes: report.safe_wal_size,
            wal_status: report.wal_status.clone(),
            active: report.active,
        });
        let acked = metrics.acked_total();
        let view = RelayView {
            streaming: metrics.is_streaming(),
            inflight_events: metrics.inflight_events(),
            acked_since_last_check: acked - last_acked,
            confirm_age: metrics.confirm_age(),
            lag_grew: last_lag.is_some_and(|l| report.lag_bytes > l),
            kafka_silent_for: metrics.kafka_silent_for(),
        };
        last_acked = acked;
        last_lag = Some(report.lag_bytes);
        let assessment = assess(&report, &view, &settings);
        metrics.set_alert_level(assessment.level as i64);
        metrics.set_stalled(assessment.stalled);
        if assessment.level != level {
            announce(level, &assessment, &report, &settings).await;
            level = assessment.level;
        }
        if assessment.lost {
            let lost = lost_slot_error(&report.name, report.confirmed_flush);
            let _ = fatal.send(lost).await;
            return;
        }
    }
}

async fn announce(previous: Level, a: &Assessment, slot: &SlotReport, s: &WatchdogSettings) {
    let figures = format!(
        "lag {}, retained WAL {}, wal_status {}, safe_wal_size {}",
        human_bytes(slot.lag_bytes.max(0) as u64),
        human_bytes(slot.retained_bytes.max(0) as u64),
        slot.wal_status.as_deref().unwrap_or("unknown"),
        safe_wal_text(slot),
    );
    let reasons = a.reasons.join("; ");
    match a.level {
        Level::Ok => {
            info!(slot = %slot.name, previous = previous.name(), %figures, "slot alert cleared")
        }
        Level::Warning => warn!(
            slot = %slot.name, level = "warning", cause = a.cause.name(), %figures, %reasons,
            hint = a.cause.hint(), "slot alert raised"
        ),
        Level::Critical => error!(
            slot = %slot.name, level = "critical", cause = a.cause.name(), %figures, %reasons,
            hint = a.cause.hint(), "slot alert raised"
        ),
    }
    if let Some(webhook) = &s.webhook {
        let body = json!({
            "level": a.level.name(),
            "previous_level": previous.name(),
            "cause": a.cause.name(),
            "hint": a.cause.hint(),
            "reasons": a.reasons,
            "slot": slot.to_json(),
        });
        if let Err(e) = webhook.post(&body).await {
            warn!(error = %e.report(), "alert webhook failed");
        }
    }
}

/// `safe_wal_size` as an operator reads it, for the log and `walrelay
/// status`. Postgres reports NULL both when retention is unlimited and when
/// the slot is lost (or about to be): only the setting tells them apart.
pub fn safe_wal_text(slot: &SlotReport) -> String {
    match (slot.safe_wal_size, slot.wal_keep_limit) {
        (Some(b), _) => human_bytes(b.max(0) as u64),
        (None, _) if slot.wal_status.as_deref() == Some("lost") => "none: the slot is lost".into(),
        (None, None) => "unlimited (max_slot_wal_keep_size = -1)".into(),
        (None, Some(limit)) => format!(
            "none (max_slot_wal_keep_size = {})",
            human_bytes(limit.max(0) as u64)
        ),
    }
}

/// Bytes in binary units, as operators read them.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests;
