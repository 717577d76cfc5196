//! Faults with real processes: a paused broker, a killed relay, a killed
//! walsender, and WAL written by tables walrelay does not publish.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use support::kafka::KafkaReader;
use support::outbox::{committed_ids, current_lsn, insert_batch, read_until_all_arrive};
use support::pg::{confirmed_flush_lsn, slot_lag};
use support::{eventually, Relay, Stack};

const WAIT: Duration = Duration::from_secs(90);

fn read_all(reader: &KafkaReader, expected: &HashSet<String>, relay: &Relay) -> HashSet<String> {
    read_until_all_arrive(reader, expected, HashSet::new(), relay, WAIT)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slot_is_not_advanced_while_broker_is_paused() {
    let Stack {
        pg: _pg,
        broker,
        client,
        relay,
    } = Stack::start(&[]).await;
    let reader = broker.consumer();

    insert_batch(&client, "Paused", 1).await;
    reader.subscribe(&["outbox.event.Paused"]);
    let first = reader.read(1, WAIT);
    assert_eq!(first.len(), 1, "log:\n{}", relay.log());
    let seen_before_pause = first
        .iter()
        .map(|m| m.header("id").unwrap().to_string())
        .collect();

    broker.pause();
    let before_outage = current_lsn(&client).await;
    for _ in 0..10 {
        insert_batch(&client, "Paused", 10).await;
    }
    tokio::time::sleep(Duration::from_secs(6)).await;
    let confirmed = confirmed_flush_lsn(&client, "walrelay").await;
    assert!(
        confirmed <= before_outage,
        "slot moved to {confirmed:x}, past {before_outage:x}, while the broker was paused"
    );
    assert!(relay.metric("walrelay_inflight_events").unwrap_or(0.0) > 0.0);

    broker.resume();
    read_until_all_arrive(
        &reader,
        &committed_ids(&client, "Paused").await,
        seen_before_pause,
        &relay,
        WAIT,
    );
    let end = current_lsn(&client).await;
    eventually(
        WAIT,
        "the slot to move after the broker resumed",
        || async { (confirmed_flush_lsn(&client, "walrelay").await >= end - 1024).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_killed_mid_stream_loses_no_committed_event_after_restart() {
    let Stack {
        pg,
        broker,
        client,
        mut relay,
    } = Stack::start(&[]).await;

    let writer_pg = pg.client().await;
    let writer = tokio::spawn(async move {
        for _ in 0..200 {
            insert_batch(&writer_pg, "Killed", 10).await;
        }
    });
    // Kill it while events are flowing, then start it again.
    eventually(WAIT, "some deliveries", || async {
        (relay
            .metric("walrelay_events_published_total")
            .unwrap_or(0.0)
            >= 100.0)
            .then_some(())
    })
    .await;
    relay.kill9();
    tokio::time::sleep(Duration::from_millis(500)).await;
    relay.restart();
    writer.await.unwrap();

    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.Killed"]);
    let expected = committed_ids(&client, "Killed").await;
    assert_eq!(expected.len(), 2000);
    read_all(&reader, &expected, &relay);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_walsender_is_reconnected_without_loss() {
    let Stack {
        pg: _pg,
        broker,
        client,
        relay,
    } = Stack::start(&[]).await;

    insert_batch(&client, "Reconnect", 50).await;
    client
        .execute(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = 'walrelay'",
            &[],
        )
        .await
        .unwrap();
    insert_batch(&client, "Reconnect", 50).await;

    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.Reconnect"]);
    read_all(&reader, &committed_ids(&client, "Reconnect").await, &relay);
    eventually(WAIT, "a reconnect to be counted", || async {
        (relay.metric("walrelay_reconnects_total").unwrap_or(0.0) >= 1.0).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_outbox_does_not_pin_wal_written_by_other_tables() {
    let Stack {
        pg: _pg,
        broker: _broker,
        client,
        relay,
    } = Stack::start(&["--watchdog-interval", "1s"]).await;

    let before_write = current_lsn(&client).await;
    client
        .batch_execute(
            "CREATE TABLE busy (id bigint, filler text); \
             INSERT INTO busy SELECT i, repeat(md5(i::text), 8) FROM generate_series(1, 120000) i;",
        )
        .await
        .unwrap();
    // The slot may already be catching up (confirmations go out promptly),
    // so the WAL written is measured on its own.
    let written = current_lsn(&client).await - before_write;
    assert!(
        written > 20 << 20,
        "the test wrote only {written} bytes of WAL"
    );

    let lag = eventually(WAIT, "slot lag under 1 MB", || async {
        let lag = slot_lag(&client, "walrelay").await;
        (lag < 1 << 20).then_some(lag)
    })
    .await;
    assert!(lag < 1 << 20, "lag {lag}");
    // Operators see the same through the metric.
    eventually(WAIT, "walrelay_slot_lag_bytes under 1 MB", || async {
        relay
            .metric("walrelay_slot_lag_bytes")
            .filter(|&lag| lag < (1 << 20) as f64)
    })
    .await;
}
