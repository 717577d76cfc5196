//! One oversized record among valid ones, on Apache Kafka, which enforces
//! a topic's `max.message.bytes` per batch: only the offender is poison,
//! and its neighbours reach their own topic. A topic whose limit is below
//! the producer's batches costs only its own records' sends: no new
//! session, and other topics keep their batches. tansu does not enforce the
//! limit, so these tests need the real broker.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use support::kafka::{BrokerKind, Received};
use support::outbox::current_lsn;
use support::pg::confirmed_flush_lsn;
use support::{eventually, Stack};

const WAIT: Duration = Duration::from_secs(90);
const DLQ: &str = "walrelay.dead-letter";
const TOPIC: &str = "outbox.event.Sized";
/// The topic's limit: well above each valid event, well below the big one.
const LIMIT: &str = "20000";
/// What walrelay says of a topic whose limit is below its batches.
const SENT_ALONE: &str = "each record to it is sent alone";
/// What walrelay says when it creates a session's producer.
const PRODUCER_CREATED: &str = "created the Kafka producer of the session";

/// A payload that no codec can shrink much: `bytes` hex digits of random data.
fn incompressible(bytes: usize) -> String {
    format!(
        r#"{{"blob": "{}"}}"#,
        (0..bytes / 32)
            .map(|_| uuid_hex())
            .collect::<Vec<_>>()
            .concat()
    )
}

fn uuid_hex() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);
    let mut x = STATE.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
    let mut out = String::new();
    for _ in 0..2 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push_str(&format!("{x:016x}"));
    }
    out
}

/// Twenty valid events and one too large for the topic, in one transaction
/// (so they travel together); the offender's id is returned.
async fn insert_twenty_and_one_too_large(client: &tokio_postgres::Client) -> (String, u64) {
    let offender = "00000000-0000-0000-0000-00000000bad1".to_string();
    let mut sql = String::from("BEGIN;");
    for n in 0..21 {
        let (id, payload) = if n == 10 {
            (offender.clone(), incompressible(60_000))
        } else {
            (
                format!("00000000-0000-0000-0000-{n:012}"),
                incompressible(1_000),
            )
        };
        sql.push_str(&format!(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES ('{id}', 'order', 'order-{}', 'Sized', '{payload}');",
            n % 3
        ));
    }
    sql.push_str("COMMIT;");
    client.batch_execute(&sql).await.unwrap();
    (offender, current_lsn(client).await)
}

/// Every valid event reaches its topic in commit order per key, the
/// offender only the dead-letter topic, and the slot moves past them all.
async fn only_the_offender_is_dead_lettered(stack: &Stack, offender: &str, end: u64) {
    let reader = stack.broker.consumer();
    reader.subscribe(&[TOPIC, DLQ]);
    // The events of the transaction (not one a test sent before it).
    let good = |got: &[Received]| -> HashSet<String> {
        got.iter()
            .filter(|m| m.topic == TOPIC)
            .map(|m| m.header("id").unwrap().to_string())
            .filter(|id| id.starts_with("00000000-0000-0000-0000-"))
            .collect()
    };
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + WAIT;
    while good(&got).len() < 20 || !got.iter().any(|m| m.topic == DLQ) {
        assert!(
            std::time::Instant::now() < deadline,
            "not everything arrived: {:?}; log:\n{}",
            got.iter()
                .map(|m| (&m.topic, m.header("id")))
                .collect::<Vec<_>>(),
            stack.relay.log()
        );
        got.extend(reader.read(21, Duration::from_secs(2)));
    }
    got.extend(reader.read_for(Duration::from_secs(1)));
    let good = good(&got);
    assert_eq!(good.len(), 20, "{}", stack.relay.log());
    assert!(!good.contains(offender));
    let dead: Vec<_> = got.iter().filter(|m| m.topic == DLQ).collect();
    assert!(
        dead.iter().all(|m| m.header("id") == Some(offender)),
        "a valid event went to the dead-letter topic: {:?}",
        dead.iter().map(|m| m.header("id")).collect::<Vec<_>>()
    );
    eventually(WAIT, "the slot to pass the transaction", || async {
        (confirmed_flush_lsn(&stack.client, "walrelay").await >= end - 1024).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressed_record_too_large_for_its_topic_is_the_only_one_dead_lettered() {
    // Compressed, walrelay cannot know a record's size on the wire: the one
    // over the limit before compression travels alone, the broker judges it.
    let stack = Stack::start_kind(
        BrokerKind::Apache,
        &["--on-poison", "dead-letter", "-X", "compression.type=lz4"],
    )
    .await;
    stack
        .broker
        .create_topic_with(TOPIC, 1, &[("max.message.bytes", LIMIT)])
        .await;
    let (offender, end) = insert_twenty_and_one_too_large(&stack.client).await;
    only_the_offender_is_dead_lettered(&stack, &offender, end).await;
    let log = stack.relay.log();
    assert!(
        log.contains(SENT_ALONE),
        "the topic's records were not sent alone: {log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_lowered_under_a_running_walrelay_poisons_only_the_record_over_it() {
    // walrelay learned the topic's default limit; then it is lowered, so a
    // batch with the big record is refused whole and its records are sent
    // again one by one.
    let stack = Stack::start_kind(
        BrokerKind::Apache,
        &["--on-poison", "dead-letter", "-X", "compression.type=lz4"],
    )
    .await;
    stack.broker.create_topic_with(TOPIC, 1, &[]).await;
    stack
        .client
        .batch_execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES (gen_random_uuid(), 'order', 'order-0', 'Sized', '{}')",
        )
        .await
        .unwrap();
    eventually(WAIT, "the first event", || async {
        (stack.relay.metric("walrelay_events_published_total")? >= 1.0).then_some(())
    })
    .await;
    stack
        .broker
        .alter_topic_config(TOPIC, "max.message.bytes", LIMIT)
        .await;

    let (offender, end) = insert_twenty_and_one_too_large(&stack.client).await;
    only_the_offender_is_dead_lettered(&stack, &offender, end).await;
    assert!(
        stack
            .relay
            .log()
            .contains("sending its records again one by one"),
        "{}",
        stack.relay.log()
    );
}

/// `count` events in one transaction, each to the topic of its event type:
/// `types[n % types.len()]`, key `order-{n % 3}`, payload `{"seq": n}`
/// padded to about `pad` bytes, ids numbered from `first`.
async fn insert_mixed(
    client: &tokio_postgres::Client,
    types: &[&str],
    first: usize,
    count: usize,
    pad: usize,
) -> u64 {
    let mut sql = String::from("BEGIN;");
    for n in first..first + count {
        let event_type = types[n % types.len()];
        sql.push_str(&format!(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES ('00000000-0000-0000-0000-{n:012}', 'order', 'order-{}', '{event_type}', \
             '{{\"seq\": {n}, \"pad\": \"{}\"}}');",
            n % 3,
            "x".repeat(pad)
        ));
    }
    sql.push_str("COMMIT;");
    client.batch_execute(&sql).await.unwrap();
    current_lsn(client).await
}

/// Reads `topics` until each holds `counts` of walrelay's events, and checks
/// that each arrived once and, per key, in commit order.
fn read_in_order(
    stack: &Stack,
    reader: &support::kafka::KafkaReader,
    expected: &[(&str, usize)],
) -> Vec<Received> {
    let count = |got: &[Received], topic: &str| got.iter().filter(|m| m.topic == topic).count();
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + WAIT;
    while expected.iter().any(|(t, n)| count(&got, t) < *n) {
        assert!(
            std::time::Instant::now() < deadline,
            "not everything arrived: {:?}; log:\n{}",
            got.iter()
                .map(|m| (&m.topic, m.header("id")))
                .collect::<Vec<_>>(),
            stack.relay.log()
        );
        got.extend(reader.read(64, Duration::from_secs(2)));
    }
    got.extend(reader.read_for(Duration::from_secs(1)));
    for (topic, n) in expected {
        assert_eq!(count(&got, topic), *n, "duplicates in {topic}");
    }
    let mut last: std::collections::HashMap<(String, String), i64> = Default::default();
    for m in &got {
        let value: serde_json::Value = serde_json::from_str(m.value.as_deref().unwrap()).unwrap();
        let seq = value["seq"].as_i64().unwrap();
        let key = (m.topic.clone(), m.key.clone().unwrap_or_default());
        if let Some(before) = last.insert(key.clone(), seq) {
            assert!(before < seq, "{key:?}: {seq} after {before}");
        }
    }
    got
}

/// The lines of walrelay's log that say `what`.
fn lines_saying(stack: &Stack, what: &str) -> Vec<String> {
    stack
        .relay
        .log()
        .lines()
        .filter(|l| l.contains(what))
        .map(str::to_string)
        .collect()
}

/// A topic with a limit (2000) below the producer's batches, another with
/// the broker's default; walrelay streaming with `flags`.
async fn small_and_other(flags: &[&str]) -> Stack {
    let stack = Stack::start_kind(BrokerKind::Apache, flags).await;
    stack
        .broker
        .create_topic_with(SMALL, 1, &[("max.message.bytes", "2000")])
        .await;
    stack.broker.create_topic_with(OTHER, 1, &[]).await;
    stack
}

const SMALL: &str = "outbox.event.Small";
const OTHER: &str = "outbox.event.Other";

/// Postgres sessions walrelay started after its first (none means one session).
fn postgres_reconnects(stack: &Stack) -> Option<f64> {
    stack
        .relay
        .metric("walrelay_reconnects_total{target=\"postgres\"}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_with_a_limit_below_the_batches_does_not_restart_the_session_and_events_stay_in_order(
) {
    let stack = small_and_other(&[]).await;
    let reader = stack.broker.consumer();
    reader.subscribe(&[SMALL, OTHER]);
    insert_mixed(&stack.client, &["Other"], 0, 30, 100).await;
    read_in_order(&stack, &reader, &[(OTHER, 30)]);

    // Twelve events of about 300 bytes for the small topic, among others in
    // one transaction: together they are over its limit.
    insert_mixed(&stack.client, &["Small", "Other"], 30, 24, 300).await;
    let end = insert_mixed(&stack.client, &["Other"], 54, 30, 100).await;
    let got = read_in_order(&stack, &reader, &[(SMALL, 12), (OTHER, 12 + 30)]);
    assert!(got.iter().all(|m| m.topic == SMALL || m.topic == OTHER));
    eventually(WAIT, "the slot to pass the transactions", || async {
        (confirmed_flush_lsn(&stack.client, "walrelay").await >= end - 1024).then_some(())
    })
    .await;

    let log = stack.relay.log();
    assert!(!log.contains("starting a new session"), "{log}");
    assert_eq!(postgres_reconnects(&stack), Some(0.0), "{log}");
    assert_eq!(lines_saying(&stack, SENT_ALONE).len(), 1, "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_topic_keeps_the_producers_batch_size_after_a_topic_with_a_small_limit() {
    let stack = small_and_other(&[]).await;
    let reader = stack.broker.consumer();
    reader.subscribe(&[SMALL, OTHER]);
    // The drain of the other topic before the small topic is used...
    insert_mixed(&stack.client, &["Other"], 0, 200, 100).await;
    read_in_order(&stack, &reader, &[(OTHER, 200)]);
    let before = lines_saying(&stack, PRODUCER_CREATED);
    assert_eq!(before.len(), 1, "{}", stack.relay.log());
    assert!(before[0].contains("batch_size=1000000"), "{before:?}");

    insert_mixed(&stack.client, &["Small"], 200, 1, 100).await;
    read_in_order(&stack, &reader, &[(SMALL, 1)]);
    // ...and after: by the same producer, with the same batch.size.
    insert_mixed(&stack.client, &["Other"], 201, 200, 100).await;
    read_in_order(&stack, &reader, &[(OTHER, 200)]);
    let after = lines_saying(&stack, PRODUCER_CREATED);
    assert_eq!(after, before, "{}", stack.relay.log());
    assert_eq!(postgres_reconnects(&stack), Some(0.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_exactly_once_a_topic_with_a_limit_below_the_batches_does_not_restart_the_session() {
    let stack = small_and_other(&["--delivery", "exactly-once"]).await;
    let reader = stack.broker.read_committed();
    reader.subscribe(&[SMALL, OTHER]);
    insert_mixed(&stack.client, &["Small", "Other"], 0, 24, 300).await;
    let end = insert_mixed(&stack.client, &["Other"], 24, 30, 100).await;
    read_in_order(&stack, &reader, &[(SMALL, 12), (OTHER, 12 + 30)]);
    eventually(WAIT, "the slot to pass the transactions", || async {
        (confirmed_flush_lsn(&stack.client, "walrelay").await >= end - 1024).then_some(())
    })
    .await;
    let log = stack.relay.log();
    assert!(!log.contains("starting a new session"), "{log}");
    assert_eq!(postgres_reconnects(&stack), Some(0.0), "{log}");
}
