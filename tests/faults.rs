//! Faults with real processes: a paused broker, a killed relay, a killed
//! walsender, and WAL written by tables walrelay does not publish.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use support::outbox::{committed_ids, current_lsn, events, read_until_all_arrive};
use support::pg::slot_lag;
use support::{eventually, guarantees, BrokerKind, Stack};

const WAIT: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slot_is_not_advanced_while_broker_is_paused() {
    guarantees::slot_is_not_advanced_while_broker_is_paused(BrokerKind::from_env()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_killed_mid_stream_loses_no_committed_event_after_restart() {
    guarantees::relay_killed_mid_stream_loses_no_committed_event_after_restart(
        BrokerKind::from_env(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_walsender_is_reconnected_without_loss() {
    let stack = Stack::start(&[]).await;

    events("Reconnect", 50).insert(&stack.client).await;
    stack.client
        .execute(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = 'walrelay'",
            &[],
        )
        .await
        .unwrap();
    events("Reconnect", 50).insert(&stack.client).await;

    let reader = stack.broker.consumer();
    reader.subscribe(&["outbox.event.Reconnect"]);
    let expected = committed_ids(&stack.client, "Reconnect").await;
    read_until_all_arrive(&reader, &expected, HashSet::new(), &stack.relay, WAIT);
    eventually(WAIT, "a reconnect to be counted", || async {
        (stack
            .relay
            .metric("walrelay_reconnects_total")
            .unwrap_or(0.0)
            >= 1.0)
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_outbox_does_not_pin_wal_written_by_other_tables() {
    let stack = Stack::start(&["--watchdog-interval", "1s"]).await;

    let before_write = current_lsn(&stack.client).await;
    stack
        .client
        .batch_execute(
            "CREATE TABLE busy (id bigint, filler text); \
             INSERT INTO busy SELECT i, repeat(md5(i::text), 8) FROM generate_series(1, 120000) i;",
        )
        .await
        .unwrap();
    // The slot may already be catching up (confirmations go out promptly),
    // so the WAL written is measured on its own.
    let written = current_lsn(&stack.client).await - before_write;
    assert!(
        written > 20 << 20,
        "the test wrote only {written} bytes of WAL"
    );

    let lag = eventually(WAIT, "slot lag under 1 MB", || async {
        let lag = slot_lag(&stack.client, "walrelay").await;
        (lag < 1 << 20).then_some(lag)
    })
    .await;
    assert!(lag < 1 << 20, "lag {lag}");
    // Operators see the same through the metric.
    eventually(WAIT, "walrelay_slot_lag_bytes under 1 MB", || async {
        stack
            .relay
            .metric("walrelay_slot_lag_bytes")
            .filter(|&lag| lag < (1 << 20) as f64)
    })
    .await;
}
