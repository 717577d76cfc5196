//! A Postgres crash does not replay minutes of events. A logical slot's
//! confirmed position reaches disk only now and then (at checkpoints), so
//! after a crash the slot falls back; walrelay starts from what it
//! confirmed itself instead, remembered across sessions and, for a restart
//! of walrelay too, in its state table.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::NoTls;

use support::kafka::Received;
use support::outbox::{committed_ids, events};
use support::{eventually, Relay, Stack};

const WAIT: Duration = Duration::from_secs(90);

/// How many times each event id arrived.
fn copies(received: &[Received]) -> HashMap<String, usize> {
    let mut copies = HashMap::new();
    for m in received {
        *copies
            .entry(m.header("id").unwrap().to_string())
            .or_insert(0) += 1;
    }
    copies
}

/// Reads the topic until every committed id arrived, then a little more.
async fn read_all(stack: &Stack, topic: &str, event_type: &str) -> HashMap<String, usize> {
    let expected = committed_ids(&stack.client, event_type).await;
    let reader = stack.broker.consumer();
    reader.subscribe(&[topic]);
    let mut received = Vec::new();
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        received.extend(reader.read(expected.len(), Duration::from_secs(2)));
        let seen = copies(&received);
        if expected.iter().all(|id| seen.contains_key(id)) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {} events never arrived; log:\n{}",
            expected.iter().filter(|id| !seen.contains_key(*id)).count(),
            expected.len(),
            stack.relay.log()
        );
    }
    received.extend(reader.read_for(Duration::from_secs(2)));
    copies(&received)
}

fn resent(copies: &HashMap<String, usize>) -> usize {
    copies.values().map(|n| n - 1).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_crashing_again_and_again_loses_nothing_and_resends_under_one_percent() {
    // Reconnect soon after each crash, as the backoff of a healthy relay would.
    let mut stack = Stack::start(&["--reconnect-max-backoff", "1s"]).await;
    // A writer that goes on through the crashes, one event per transaction
    // (the usual outbox write), reconnecting when Postgres is back.
    let url = stack.pg.url();
    let stop = Arc::new(AtomicBool::new(false));
    let stop_writer = stop.clone();
    let writer = tokio::spawn(async move {
        while !stop_writer.load(Ordering::Relaxed) {
            let Ok((client, connection)) = tokio_postgres::connect(&url, NoTls).await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            tokio::spawn(connection);
            while !stop_writer.load(Ordering::Relaxed) {
                if events("Crashed", 1).try_insert(&client).await.is_err() {
                    break;
                }
                // A few hundred events a second: a service's pace, not a load test.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    });
    for round in 0..8 {
        tokio::time::sleep(Duration::from_millis(1200)).await;
        stack.pg.restart("immediate");
        eventually(WAIT, "walrelay to stream again", || async {
            let reconnects = stack.relay.metric("walrelay_reconnects_total")?;
            (reconnects >= f64::from(round + 1) && stack.relay.metric("walrelay_streaming")? == 1.0)
                .then_some(())
        })
        .await;
    }
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();
    stack.client = stack.pg.client().await;

    let copies = read_all(&stack, "outbox.event.Crashed", "Crashed").await;
    let written = committed_ids(&stack.client, "Crashed").await.len();
    assert!(written > 500, "the writer wrote only {written} events");
    assert_eq!(copies.len(), written, "{}", stack.relay.log());
    let resent = resent(&copies);
    println!("{resent} of {written} events sent again after 8 crashes of Postgres");
    assert!(
        resent * 100 < written,
        "{resent} of {written} events were sent again after 8 crashes of Postgres; log:\n{}",
        stack.relay.log()
    );
    assert!(
        stack
            .relay
            .log()
            .contains("the slot is behind what walrelay confirmed"),
        "the crashes never set the slot back, so the test proves nothing; log:\n{}",
        stack.relay.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_of_walrelay_after_a_postgres_crash_starts_where_kafka_left_off() {
    let mut stack = Stack::start(&[]).await;
    let end = events("Before", 200).insert(&stack.client).await;
    // The state table is written at most once a second; the last commit
    // ends just before `end`.
    let last_commit = format!("{:X}/{:X}", (end - 1024) >> 32, (end - 1024) & 0xffff_ffff);
    eventually(WAIT, "the delivered position to be recorded", || async {
        let row = stack
            .client
            .query_opt(
                "SELECT 1 FROM walrelay_state WHERE delivered_lsn >= $1::text::pg_lsn",
                &[&last_commit],
            )
            .await
            .ok()?;
        row.map(drop)
    })
    .await;
    // Both go down at once: nothing of walrelay's memory survives but the table.
    stack.relay.kill9();
    stack.pg.restart("immediate");
    stack.client = stack.pg.client().await;
    stack.relay = Relay::start(&stack.pg, &stack.broker);
    stack.relay.wait_ready(WAIT);
    events("After", 5).insert(&stack.client).await;

    let before = read_all(&stack, "outbox.event.Before", "Before").await;
    assert_eq!(before.len(), 200);
    assert_eq!(
        resent(&before),
        0,
        "events Kafka had were sent again; log:\n{}",
        stack.relay.log()
    );
    let after = read_all(&stack, "outbox.event.After", "After").await;
    assert_eq!(after.len(), 5);
}
