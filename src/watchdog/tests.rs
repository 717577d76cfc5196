//! The watchdog's rules (`assess`) on figures made up here, and its loop
//! on scripted readings and paused time (`timing.rs`): no Postgres.

use super::*;
use crate::postgres::lsn::Lsn;

mod timing;

#[test]
fn a_lost_slot_is_never_described_as_unlimited() {
    let mut slot = slot(0);
    slot.safe_wal_size = None;
    slot.wal_keep_limit = Some(48 * 1024 * 1024);
    slot.wal_status = Some("lost".into());
    assert_eq!(safe_wal_text(&slot), "none: the slot is lost");
    slot.wal_status = Some("unreserved".into());
    assert_eq!(
        safe_wal_text(&slot),
        "none (max_slot_wal_keep_size = 48.0 MiB)"
    );
    slot.wal_keep_limit = None;
    slot.wal_status = Some("reserved".into());
    assert_eq!(
        safe_wal_text(&slot),
        "unlimited (max_slot_wal_keep_size = -1)"
    );
}

fn settings() -> WatchdogSettings {
    WatchdogSettings {
        interval: Duration::from_secs(10),
        lag_warn_bytes: 1000,
        lag_critical_bytes: 10_000,
        safe_wal_warn_ratio: 0.2,
        stall_timeout: Duration::from_secs(60),
        webhook: None,
    }
}

fn slot(lag: i64) -> SlotReport {
    SlotReport {
        name: "walrelay".into(),
        plugin: Some("pgoutput".into()),
        slot_type: "logical".into(),
        database: Some("app".into()),
        in_this_database: true,
        active: true,
        active_pid: Some(1),
        confirmed_flush: Some(Lsn(1)),
        restart: Some(Lsn(1)),
        wal_status: Some("reserved".into()),
        safe_wal_size: None,
        current_wal: Lsn(1),
        lag_bytes: lag,
        retained_bytes: lag,
        wal_keep_limit: None,
    }
}

fn healthy() -> RelayView {
    RelayView {
        streaming: true,
        inflight_events: 0,
        acked_since_last_check: 10,
        confirm_age: Duration::ZERO,
        kafka_silent_for: None,
        lag_grew: false,
    }
}

#[test]
fn small_lag_is_ok() {
    let a = assess(&slot(10), &healthy(), &settings());
    assert_eq!((a.level, a.cause), (Level::Ok, Cause::None));
}

#[test]
fn lag_thresholds_raise_warning_then_critical() {
    let s = settings();
    assert_eq!(assess(&slot(5_000), &healthy(), &s).level, Level::Warning);
    assert_eq!(assess(&slot(20_000), &healthy(), &s).level, Level::Critical);
}

#[test]
fn pending_events_with_no_acks_point_at_the_broker() {
    let view = RelayView {
        inflight_events: 50,
        acked_since_last_check: 0,
        ..healthy()
    };
    assert_eq!(
        assess(&slot(5_000), &view, &settings()).cause,
        Cause::BrokerDown
    );
}

#[test]
fn brokers_silent_past_the_stall_timeout_are_broker_down_with_nothing_pending() {
    let silent = |secs| RelayView {
        inflight_events: 0,
        kafka_silent_for: Some(Duration::from_secs(secs)),
        ..healthy()
    };
    let s = settings();
    let early = assess(&slot(10), &silent(s.stall_timeout.as_secs() - 1), &s);
    assert_eq!((early.level, early.cause), (Level::Ok, Cause::None));
    let away = assess(&slot(10), &silent(s.stall_timeout.as_secs()), &s);
    assert_eq!(
        (away.level, away.cause),
        (Level::Critical, Cause::BrokerDown)
    );
    assert!(
        away.reasons[0].contains("no Kafka broker"),
        "{:?}",
        away.reasons
    );
}

#[test]
fn pending_events_that_never_confirm_are_a_stall() {
    let view = RelayView {
        inflight_events: 5,
        acked_since_last_check: 100,
        confirm_age: Duration::from_secs(61),
        ..healthy()
    };
    let a = assess(&slot(10), &view, &settings());
    assert_eq!(
        (a.level, a.cause, a.stalled),
        (Level::Critical, Cause::Stall, true)
    );
}

#[test]
fn growing_lag_with_progress_is_a_slow_consumer() {
    let view = RelayView {
        lag_grew: true,
        ..healthy()
    };
    assert_eq!(
        assess(&slot(5_000), &view, &settings()).cause,
        Cause::SlowConsumer
    );
}

#[test]
fn little_safe_wal_left_warns_and_unreserved_is_critical_and_lost_is_fatal() {
    let mut report = slot(10);
    report.wal_keep_limit = Some(1_000_000);
    report.safe_wal_size = Some(100_000);
    let a = assess(&report, &healthy(), &settings());
    assert_eq!((a.level, a.cause), (Level::Warning, Cause::WalRetention));
    report.wal_status = Some("unreserved".into());
    assert_eq!(
        assess(&report, &healthy(), &settings()).level,
        Level::Critical
    );
    report.wal_status = Some("lost".into());
    assert!(assess(&report, &healthy(), &settings()).lost);
}

#[test]
fn a_relay_that_is_not_streaming_is_named() {
    let view = RelayView {
        streaming: false,
        ..healthy()
    };
    assert_eq!(
        assess(&slot(5_000), &view, &settings()).cause,
        Cause::NotStreaming
    );
}

#[test]
fn bytes_are_shown_in_binary_units() {
    assert_eq!(human_bytes(512), "512 B");
    assert_eq!(human_bytes(3 * 1024 * 1024 / 2), "1.5 MiB");
}
