//! The broker killed and restarted, and unreachable for a minute, under
//! load: nothing is lost and walrelay never gives up on its own.

mod support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use support::{Broker, Postgres, Relay};

const WAIT: Duration = Duration::from_secs(180);

async fn insert_batch(client: &tokio_postgres::Client, count: i32) {
    client
        .execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             SELECT gen_random_uuid(), 'order', 'agg-' || (i % 5), 'Durable', '{}' \
             FROM generate_series(1, $1::int) i",
            &[&count],
        )
        .await
        .unwrap();
}

async fn assert_everything_arrives(
    client: &tokio_postgres::Client,
    broker: &Broker,
    relay: &Relay,
) {
    let expected: HashSet<String> = client
        .query("SELECT id::text FROM outbox", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.Durable"]);
    let mut seen = HashSet::new();
    let deadline = Instant::now() + WAIT;
    while !expected.is_subset(&seen) && Instant::now() < deadline {
        for m in reader.read(expected.len(), Duration::from_secs(2)) {
            seen.insert(m.header("id").unwrap().to_string());
        }
    }
    let missing = expected.difference(&seen).count();
    assert_eq!(
        missing,
        0,
        "{missing} of {} events missing; log:\n{}",
        expected.len(),
        relay.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_killed_and_restarted_on_durable_storage_loses_nothing() {
    let pg = Postgres::start();
    let mut broker = Broker::start_durable();
    let client = pg.client_with_outbox().await;
    let mut relay = Relay::start(&pg, &broker);
    relay.wait_ready(WAIT);

    for round in 0..3 {
        insert_batch(&client, 200).await;
        broker.kill();
        insert_batch(&client, 200).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        broker.restart_after_kill();
        insert_batch(&client, 200).await;
        assert!(
            relay.wait(Duration::from_millis(100)).is_none(),
            "walrelay gave up in round {round}"
        );
    }
    assert_everything_arrives(&client, &broker, &relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_unreachable_for_a_minute_under_load_delays_but_loses_nothing() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let mut relay = Relay::start(&pg, &broker);
    relay.wait_ready(WAIT);
    insert_batch(&client, 10).await;

    broker.pause();
    let paused = Instant::now();
    while paused.elapsed() < Duration::from_secs(65) {
        insert_batch(&client, 20).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        relay.wait(Duration::from_millis(100)).is_none(),
        "walrelay gave up while the broker was away"
    );
    broker.resume();
    assert_everything_arrives(&client, &broker, &relay).await;
}
