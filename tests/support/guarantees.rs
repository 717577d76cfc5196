//! The core guarantees as scenarios on a broker of a given kind: events
//! arrive routed, keyed and in commit order; the slot waits for the broker's
//! acknowledgements; kill -9 of walrelay and a broker that dies or stops
//! answering lose nothing, nor do Postgres restarts and crashes. end_to_end.rs, faults.rs, resilience.rs and
//! broker_faults.rs run them on the default broker (`WALRELAY_TEST_BROKER`),
//! apache_kafka.rs on Apache Kafka.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::kafka::Received;
use super::outbox::{committed_ids, current_lsn, events, read_until_all_arrive};
use super::pg::confirmed_flush_lsn;
use super::{eventually, Broker, BrokerKind, Postgres, Relay, Stack};

const WAIT: Duration = Duration::from_secs(90);
/// A broker that was down for a while has a backlog to take.
const BROKER_WAIT: Duration = Duration::from_secs(180);

/// Every committed "Durable" event, read from its topic.
async fn durable_events_arrive(client: &tokio_postgres::Client, broker: &Broker, relay: &Relay) {
    let expected = committed_ids(client, "Durable").await;
    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.Durable"]);
    read_until_all_arrive(&reader, &expected, HashSet::new(), relay, BROKER_WAIT);
}

pub async fn events_are_routed_keyed_and_headed_by_their_columns(kind: BrokerKind) {
    let stack = Stack::start_kind(kind, &[]).await;

    let written = [
        (
            "00000000-0000-0000-0000-000000000001",
            "order-1",
            "OrderPlaced",
            r#"{"version": 1, "total": 1999}"#,
        ),
        (
            "00000000-0000-0000-0000-000000000002",
            "order-1",
            "OrderPaid",
            r#"{"version": 1, "method": "card"}"#,
        ),
        (
            "00000000-0000-0000-0000-000000000003",
            "order-2",
            "OrderShipped",
            r#"{"version": 2, "note": "ünïcødé ✓"}"#,
        ),
    ];
    for (id, key, event_type, payload) in written {
        events(event_type, 1)
            .id(id)
            .aggregate(key)
            .payload(payload)
            .insert(&stack.client)
            .await;
    }

    let reader = stack.broker.consumer();
    reader.subscribe(&[
        "outbox.event.OrderPlaced",
        "outbox.event.OrderPaid",
        "outbox.event.OrderShipped",
    ]);
    let got = reader.read(3, WAIT);
    assert_eq!(got.len(), 3, "got {got:?}\nlog:\n{}", stack.relay.log());
    for (id, key, event_type, payload) in written {
        let m = got
            .iter()
            .find(|m| m.header("id") == Some(id))
            .unwrap_or_else(|| panic!("event {id} missing from {got:?}"));
        assert_eq!(m.topic, format!("outbox.event.{event_type}"));
        assert_eq!(m.key.as_deref(), Some(key));
        assert_eq!(m.header("event_type"), Some(event_type));
        // jsonb normalises the text; compare as JSON.
        let sent: serde_json::Value = serde_json::from_str(payload).unwrap();
        let received: serde_json::Value =
            serde_json::from_str(m.value.as_deref().unwrap()).unwrap();
        assert_eq!(received, sent);
        assert!(
            m.timestamp.unwrap() > 1_600_000_000_000,
            "commit time as timestamp"
        );
    }
}

pub async fn kafka_order_follows_commit_order_not_start_order(kind: BrokerKind) {
    let pg = Postgres::start();
    let broker = Broker::start_kind(kind);
    let setup = pg.client_with_outbox().await;
    let relay = Relay::start(&pg, &broker);
    relay.wait_ready(WAIT);

    let mut first = pg.client().await;
    let mut second = pg.client().await;
    let started_first = first.transaction().await.unwrap();
    started_first
        .execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES ('00000000-0000-0000-0000-0000000000f1', 'order', 'same-key', 'Ordered', '{\"n\": \"started first\"}')",
            &[],
        )
        .await
        .unwrap();
    let started_second = second.transaction().await.unwrap();
    started_second
        .execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES ('00000000-0000-0000-0000-0000000000f2', 'order', 'same-key', 'Ordered', '{\"n\": \"started second\"}')",
            &[],
        )
        .await
        .unwrap();
    started_second.commit().await.unwrap();
    started_first.commit().await.unwrap();
    drop(setup);

    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.Ordered"]);
    let mut got = reader.read(2, WAIT);
    got.sort_by_key(|m| (m.partition, m.offset));
    let order: Vec<_> = got.iter().map(|m| m.header("id").unwrap()).collect();
    assert_eq!(
        order,
        [
            "00000000-0000-0000-0000-0000000000f2",
            "00000000-0000-0000-0000-0000000000f1"
        ],
        "the transaction that committed first comes first"
    );
}

pub async fn slot_is_not_advanced_while_broker_is_paused(kind: BrokerKind) {
    let stack = Stack::start_kind(kind, &[]).await;
    let reader = stack.broker.consumer();

    events("Paused", 1).insert(&stack.client).await;
    reader.subscribe(&["outbox.event.Paused"]);
    let first = reader.read(1, WAIT);
    assert_eq!(first.len(), 1, "log:\n{}", stack.relay.log());
    let seen_before_pause = first
        .iter()
        .map(|m| m.header("id").unwrap().to_string())
        .collect();

    stack.broker.pause();
    let before_outage = current_lsn(&stack.client).await;
    for _ in 0..10 {
        events("Paused", 10).insert(&stack.client).await;
    }
    tokio::time::sleep(Duration::from_secs(6)).await;
    let confirmed = confirmed_flush_lsn(&stack.client, "walrelay").await;
    assert!(
        confirmed <= before_outage,
        "slot moved to {confirmed:x}, past {before_outage:x}, while the stack.broker was paused"
    );
    assert!(
        stack
            .relay
            .metric("walrelay_inflight_events")
            .unwrap_or(0.0)
            > 0.0
    );

    stack.broker.resume();
    read_until_all_arrive(
        &reader,
        &committed_ids(&stack.client, "Paused").await,
        seen_before_pause,
        &stack.relay,
        WAIT,
    );
    let end = current_lsn(&stack.client).await;
    eventually(
        WAIT,
        "the slot to move after the stack.broker resumed",
        || async {
            (confirmed_flush_lsn(&stack.client, "walrelay").await >= end - 1024).then_some(())
        },
    )
    .await;
}

pub async fn relay_killed_mid_stream_loses_no_committed_event_after_restart(kind: BrokerKind) {
    let mut stack = Stack::start_kind(kind, &[]).await;

    let writer_pg = stack.pg.client().await;
    let writer = tokio::spawn(async move {
        for _ in 0..200 {
            events("Killed", 10).insert(&writer_pg).await;
        }
    });
    // Kill it while events are flowing, then start it again.
    eventually(WAIT, "some deliveries", || async {
        (stack
            .relay
            .metric("walrelay_events_published_total")
            .unwrap_or(0.0)
            >= 100.0)
            .then_some(())
    })
    .await;
    stack.relay.kill9();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stack.relay.restart();
    writer.await.unwrap();

    let reader = stack.broker.consumer();
    reader.subscribe(&["outbox.event.Killed"]);
    let expected = committed_ids(&stack.client, "Killed").await;
    assert_eq!(expected.len(), 2000);
    read_until_all_arrive(&reader, &expected, HashSet::new(), &stack.relay, WAIT);
}

/// One writer inserting `event_type` events five to a transaction, over ten
/// keys, until told to stop; commit order is the order of `seq`.
struct SeqWriter {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl SeqWriter {
    async fn start(pg: &Postgres, event_type: &'static str) -> Self {
        let writer_pg = pg.client().await;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop_writer = stop.clone();
        let task = tokio::spawn(async move {
            let mut seq = 0i64;
            while !stop_writer.load(std::sync::atomic::Ordering::Relaxed) {
                writer_pg
                    .execute(
                        "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
                         SELECT gen_random_uuid(), 'order', 'key-' || ((($1::bigint + i) % 10)), $2, \
                                jsonb_build_object('seq', $1::bigint + i) \
                         FROM generate_series(0, 4) i",
                        &[&seq, &event_type],
                    )
                    .await
                    .unwrap();
                seq += 5;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        SeqWriter { stop, task }
    }

    async fn stop(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.task.await.unwrap();
    }
}

/// Every delivery of the committed `event_type` events, in (partition,
/// offset) order, once all of them have arrived.
async fn every_delivery(stack: &Stack, event_type: &str) -> (HashSet<String>, Vec<Received>) {
    let expected = committed_ids(&stack.client, event_type).await;
    let reader = stack.broker.consumer();
    reader.subscribe(&[format!("outbox.event.{event_type}").as_str()]);
    let mut all = Vec::new();
    let mut seen = HashSet::new();
    let deadline = Instant::now() + BROKER_WAIT;
    while !expected.is_subset(&seen) && Instant::now() < deadline {
        for m in reader.read(expected.len(), Duration::from_secs(2)) {
            seen.insert(m.header("id").unwrap().to_string());
            all.push(m);
        }
    }
    let missing = expected.difference(&seen).count();
    assert_eq!(
        missing,
        0,
        "{missing} of {} committed events missing",
        expected.len()
    );
    all.sort_by_key(|m| (m.partition, m.offset));
    (expected, all)
}

/// Per key, first deliveries follow commit order (`seq`).
fn assert_first_deliveries_in_key_order(all: &[Received]) {
    let mut first = HashSet::new();
    let mut last_seq: HashMap<String, i64> = HashMap::new();
    for m in all {
        if !first.insert(m.header("id").unwrap().to_string()) {
            continue;
        }
        let value: serde_json::Value = serde_json::from_str(m.value.as_deref().unwrap()).unwrap();
        let seq = value["seq"].as_i64().unwrap();
        let key = m.key.clone().unwrap();
        if let Some(prev) = last_seq.insert(key.clone(), seq) {
            assert!(
                seq > prev,
                "key {key}: seq {seq} first delivered after {prev}"
            );
        }
    }
}

pub async fn twenty_kill9_restarts_under_load_lose_nothing_and_keep_per_key_order(
    kind: BrokerKind,
) {
    let mut stack = Stack::start_kind(kind, &[]).await;
    let writer = SeqWriter::start(&stack.pg, "Chaos").await;
    let mut rng = 0x2545F4914F6CDD1Du64;
    for _ in 0..20 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        tokio::time::sleep(Duration::from_millis(150 + rng % 500)).await;
        stack.relay.restart(); // kill -9, then start the same command again
    }
    writer.stop().await;

    let (expected, all) = every_delivery(&stack, "Chaos").await;
    assert_first_deliveries_in_key_order(&all);
    eprintln!(
        "{} committed events, {} deliveries ({} duplicates from unconfirmed windows)",
        expected.len(),
        all.len(),
        all.len() - expected.len()
    );
}

/// The broker goes away while produce requests are in flight, by kill -9
/// and by a clean shutdown, and walrelay stays up. Its idempotent producer
/// then retries each batch with the same sequence numbers, which the broker
/// deduplicates: every event lands once, with no gap and in commit order
/// per key. A duplicate here would mean a retry outside the idempotent
/// session (a new producer id), a gap a batch given up.
pub async fn a_broker_restarted_mid_batch_leaves_no_duplicate_gap_or_reordering(kind: BrokerKind) {
    // A short request timeout, so that a stall of the broker makes the
    // client send requests again (with idempotence off, this test fails).
    let mut stack = Stack::start_kind(kind, &["-X", "request.timeout.ms=2000"]).await;
    let writer = SeqWriter::start(&stack.pg, "Sequenced").await;
    for round in 0..4 {
        eventually(WAIT, "deliveries before the restart", || async {
            let published = stack.relay.metric("walrelay_events_published_total");
            (published.unwrap_or(0.0) >= 200.0 * (round + 1) as f64).then_some(())
        })
        .await;
        match round {
            0 | 2 => stack.broker.restart(),
            1 => {
                stack.broker.stop();
                stack.broker.restart_after_kill();
            }
            // A stall longer than the request timeout: the client gives the
            // request up and sends it again on a new connection, and the
            // broker, once it runs again, still reads the first copy.
            _ => {
                stack.broker.pause();
                tokio::time::sleep(Duration::from_secs(5)).await;
                stack.broker.resume();
            }
        }
        assert!(
            stack.relay.wait(Duration::from_millis(100)).is_none(),
            "walrelay gave up in round {round}:\n{}",
            stack.relay.log()
        );
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    writer.stop().await;

    let (expected, all) = every_delivery(&stack, "Sequenced").await;
    assert_first_deliveries_in_key_order(&all);
    let ids: Vec<&str> = all.iter().map(|m| m.header("id").unwrap()).collect();
    let distinct: HashSet<&str> = ids.iter().copied().collect();
    assert_eq!(
        ids.len(),
        distinct.len(),
        "{} duplicates among {} committed events",
        ids.len() - distinct.len(),
        expected.len()
    );
    for pair in all.windows(2) {
        if pair[0].partition == pair[1].partition {
            assert_eq!(
                pair[1].offset,
                pair[0].offset + 1,
                "a gap in partition {}'s offsets",
                pair[0].partition
            );
        }
    }
    assert!(
        stack.relay.wait(Duration::from_millis(100)).is_none(),
        "walrelay stopped"
    );
}

/// On Apache Kafka whatever the default broker: the tests' tansu keeps its
/// data in memory (`Broker::start_durable`).
pub async fn broker_killed_and_restarted_on_durable_storage_loses_nothing() {
    let pg = Postgres::start();
    let mut broker = Broker::start_durable();
    let client = pg.client_with_outbox().await;
    let mut relay = Relay::start(&pg, &broker);
    relay.wait_ready(BROKER_WAIT);

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

pub async fn broker_unreachable_for_a_minute_under_load_delays_but_loses_nothing(kind: BrokerKind) {
    let mut stack = Stack::start_kind(kind, &[]).await;
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

/// Postgres restarted fast, then immediately (a crash), then its walsender
/// terminated from SQL: each session ends and the next loses nothing.
pub async fn postgres_restarts_fast_and_immediate_lose_nothing(kind: BrokerKind) {
    let mut pg = Postgres::start();
    let broker = Broker::start_kind(kind);
    let client = pg.client_with_outbox().await;
    let relay = Relay::start(&pg, &broker);
    relay.wait_ready(WAIT);

    events("Restarted", 300).insert(&client).await;
    pg.restart("fast");
    let client = pg.client().await;
    events("Restarted", 300).insert(&client).await;
    // Let it reconnect, so the next restart hits a live session.
    eventually(WAIT, "a reconnect after the fast restart", || async {
        (relay.metric("walrelay_reconnects_total").unwrap_or(0.0) >= 1.0).then_some(())
    })
    .await;
    relay.wait_ready(WAIT);
    pg.restart("immediate");
    let client = pg.client().await;
    events("Restarted", 300).insert(&client).await;
    relay.wait_ready(WAIT);
    // The walsender killed from SQL is one more way to lose the connection.
    client
        .execute(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = 'walrelay'",
            &[],
        )
        .await
        .unwrap();
    events("Restarted", 300).insert(&client).await;

    let expected = committed_ids(&client, "Restarted").await;
    assert_eq!(expected.len(), 1200);
    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.Restarted"]);
    read_until_all_arrive(&reader, &expected, HashSet::new(), &relay, WAIT);
    assert!(relay.metric("walrelay_reconnects_total").unwrap() >= 2.0);
}
