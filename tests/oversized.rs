//! One oversized record among valid ones, on Apache Kafka, which enforces
//! a topic's `max.message.bytes` per batch: only the offender is poison,
//! and its neighbours reach their own topic. tansu does not enforce the
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
        log.contains("batch.size"),
        "batches were not made to fit the topic: {log}"
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
