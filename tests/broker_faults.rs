//! The broker killed and restarted, and unreachable for a minute, under
//! load: nothing is lost and walrelay never gives up on its own.

mod support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use support::outbox::{committed_ids, events, read_until_all_arrive};
use support::{Broker, Postgres, Relay, Stack};

const WAIT: Duration = Duration::from_secs(180);

/// Every committed "Durable" event, read from its topic.
async fn durable_events_arrive(client: &tokio_postgres::Client, broker: &Broker, relay: &Relay) {
    let expected = committed_ids(client, "Durable").await;
    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.Durable"]);
    read_until_all_arrive(&reader, &expected, HashSet::new(), relay, WAIT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_killed_and_restarted_on_durable_storage_loses_nothing() {
    let pg = Postgres::start();
    let mut broker = Broker::start_durable();
    let client = pg.client_with_outbox().await;
    let mut relay = Relay::start(&pg, &broker);
    relay.wait_ready(WAIT);

    for round in 0..3 {
        events("Durable", 200).insert(&client).await;
        broker.kill();
        events("Durable", 200).insert(&client).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        broker.restart_after_kill();
        events("Durable", 200).insert(&client).await;
        assert!(
            relay.wait(Duration::from_millis(100)).is_none(),
            "walrelay gave up in round {round}"
        );
    }
    durable_events_arrive(&client, &broker, &relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_unreachable_for_a_minute_under_load_delays_but_loses_nothing() {
    let mut stack = Stack::start(&[]).await;
    events("Durable", 10).insert(&stack.client).await;

    stack.broker.pause();
    let paused = Instant::now();
    while paused.elapsed() < Duration::from_secs(65) {
        events("Durable", 20).insert(&stack.client).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        stack.relay.wait(Duration::from_millis(100)).is_none(),
        "walrelay gave up while the stack.broker was away"
    );
    stack.broker.resume();
    durable_events_arrive(&stack.client, &stack.broker, &stack.relay).await;
}
