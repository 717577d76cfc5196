//! Poison events under both policies, with a real oversized payload and a
//! real illegal topic name: never a silent drop.

mod support;

use std::time::Duration;

use support::outbox::current_lsn;
use support::pg::confirmed_flush_lsn;
use support::{eventually, promtool, Broker, Postgres, Relay, Stack, OUTBOX_SQL};

const WAIT: Duration = Duration::from_secs(60);

async fn insert(client: &tokio_postgres::Client, id: &str, event_type: &str, payload: &str) -> u64 {
    client
        .execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES ($1::text::uuid, 'order', 'order-1', $2, $3::text::jsonb)",
            &[&id, &event_type, &payload],
        )
        .await
        .unwrap();
    current_lsn(client).await
}

fn big_payload() -> String {
    format!(r#"{{"blob": "{}"}}"#, "x".repeat(50_000))
}

const LIMIT: &[&str] = &["-X", "message.max.bytes=20000"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_event_halts_the_relay_before_it_and_names_it() {
    let mut stack = Stack::start(LIMIT).await;

    let id = "00000000-0000-0000-0000-00000000b16b";
    let before = insert(
        &stack.client,
        "00000000-0000-0000-0000-000000000001",
        "Fine",
        "{}",
    )
    .await;
    insert(&stack.client, id, "Fine", &big_payload()).await;

    let status = stack
        .relay
        .wait(WAIT)
        .expect("walrelay halts on a poison event");
    assert_eq!(status.code(), Some(6), "the poison stop's exit code");
    let log = stack.relay.log();
    assert!(log.contains(id), "the error names the event; log:\n{log}");
    assert!(log.contains("cause=\"poison\""), "{log}");
    assert!(log.contains("transaction at LSN"), "{log}");
    assert!(
        log.contains("--on-poison dead-letter"),
        "the error names a way out; {log}"
    );
    assert!(
        confirmed_flush_lsn(&stack.client, "walrelay").await <= before,
        "the slot stays before the poison event"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn illegal_topic_name_halts_the_relay_and_names_the_event() {
    let mut stack = Stack::start(&[]).await;

    let id = "00000000-0000-0000-0000-0000000000aa";
    insert(&stack.client, id, "Order Placed!", "{}").await;
    let status = stack
        .relay
        .wait(WAIT)
        .expect("walrelay halts on a poison event");
    assert!(!status.success());
    let log = stack.relay.log();
    assert!(
        log.contains(id) && log.contains("not a legal Kafka topic name"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_events_are_dead_lettered_whole_with_their_reason_and_the_relay_goes_on() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    client
        .batch_execute("ALTER TABLE outbox ALTER COLUMN event_type DROP NOT NULL")
        .await
        .unwrap();
    // The topic's own limit, which the broker enforces; the client's is larger.
    broker
        .create_topic_with("outbox.event.Fine", 1, &[("max.message.bytes", "20000")])
        .await;
    let relay = Relay::start_with(&pg, &broker, &["--on-poison", "dead-letter"]);
    relay.wait_ready(WAIT);
    let healthy = promtool::scrape(relay.metrics_port);
    let quiet = promtool::firing_since(relay.metrics_port, &healthy);
    assert!(quiet.is_empty(), "healthy, yet {quiet:?} fire");

    let too_big = "00000000-0000-0000-0000-0000000000b1";
    let bad_topic = "00000000-0000-0000-0000-0000000000b2";
    let null_route = "00000000-0000-0000-0000-0000000000b3";
    insert(
        &client,
        "00000000-0000-0000-0000-0000000000a1",
        "Fine",
        "{}",
    )
    .await;
    insert(&client, too_big, "Fine", &big_payload()).await;
    insert(&client, bad_topic, "no spaces allowed", r#"{"kept": true}"#).await;
    client
        .execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES ($1::text::uuid, 'order', 'order-1', NULL, '{}')",
            &[&null_route],
        )
        .await
        .unwrap();
    let end = insert(
        &client,
        "00000000-0000-0000-0000-0000000000a2",
        "Fine",
        "{}",
    )
    .await;

    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.Fine", "walrelay.dead-letter"]);
    let got = reader.read(5, WAIT);
    let fine: Vec<_> = got
        .iter()
        .filter(|m| m.topic == "outbox.event.Fine")
        .collect();
    let dead: Vec<_> = got
        .iter()
        .filter(|m| m.topic == "walrelay.dead-letter")
        .collect();
    assert_eq!(
        fine.len(),
        2,
        "the good events go on: {got:?}\n{}",
        relay.log()
    );
    assert_eq!(dead.len(), 3, "{got:?}");

    let find = |id: &str| dead.iter().find(|m| m.header("id") == Some(id)).unwrap();
    let big = find(too_big);
    assert_eq!(big.header("walrelay.event-id"), Some(too_big));
    assert_eq!(
        big.header("walrelay.original-topic"),
        Some("outbox.event.Fine")
    );
    let reason = big.header("walrelay.reason").unwrap();
    assert!(
        reason.contains("over max.message.bytes (20000) of topic outbox.event.Fine"),
        "{reason}"
    );
    assert!(big.header("walrelay.commit-lsn").unwrap().contains('/'));
    assert!(big.header("walrelay.value-omitted").is_none());
    let value: serde_json::Value = serde_json::from_str(big.value.as_deref().unwrap()).unwrap();
    let expected: serde_json::Value = serde_json::from_str(&big_payload()).unwrap();
    assert_eq!(
        value, expected,
        "the dead-letter record carries the whole value"
    );
    assert_eq!(big.key.as_deref(), Some("order-1"));

    let topic = find(bad_topic);
    assert!(topic
        .header("walrelay.reason")
        .unwrap()
        .contains("not a legal Kafka topic name"));
    let value: serde_json::Value = serde_json::from_str(topic.value.as_deref().unwrap()).unwrap();
    assert_eq!(
        value,
        serde_json::json!({"kept": true}),
        "the original value is kept"
    );

    assert!(find(null_route)
        .header("walrelay.reason")
        .unwrap()
        .contains("NULL"));

    eventually(WAIT, "the slot to pass every event", || async {
        (confirmed_flush_lsn(&client, "walrelay").await >= end - 1024).then_some(())
    })
    .await;
    assert_eq!(relay.metric("walrelay_dead_letter_events_total"), Some(3.0));
    let fired = promtool::firing_since(relay.metrics_port, &healthy);
    assert!(fired.contains("WalrelayDeadLettering"), "{fired:?}");
    assert_eq!(
        broker
            .topic_config("walrelay.dead-letter", "max.message.bytes")
            .await
            .as_deref(),
        Some("8388608"),
        "walrelay creates the dead-letter topic with --dead-letter-max-message-bytes"
    );
    assert!(relay
        .log()
        .contains("poison event sent to the dead-letter topic"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_ascii_timestamp_in_a_row_is_dead_lettered_instead_of_crashing_walrelay() {
    let stack = Stack::start_on(
        &[OUTBOX_SQL, "ALTER TABLE outbox ADD COLUMN happened_at text"].concat(),
        &[
            "--on-poison",
            "dead-letter",
            "--field-timestamp",
            "happened_at",
        ],
    )
    .await;

    let insert = |id: &'static str, at: &'static str| {
        let client = &stack.client;
        async move {
            client
                .execute(
                    "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, happened_at) \
                     VALUES ($1::text::uuid, 'order', 'order-1', 'Fine', '{}', $2)",
                    &[&id, &at],
                )
                .await
                .unwrap();
            current_lsn(client).await
        }
    };
    // A multi-byte character where the milliseconds are cut used to panic.
    let bad = "00000000-0000-0000-0000-0000000000e1";
    insert(bad, "2026-11-29 22:10:00.12é+00").await;
    let end = insert(
        "00000000-0000-0000-0000-0000000000e2",
        "2026-11-29 22:10:00.123+00",
    )
    .await;

    let reader = stack.broker.consumer();
    reader.subscribe(&["outbox.event.Fine", "walrelay.dead-letter"]);
    let got = reader.read(2, WAIT);
    assert_eq!(got.len(), 2, "{got:?}\n{}", stack.relay.log());
    let dead = got
        .iter()
        .find(|m| m.topic == "walrelay.dead-letter")
        .expect("the bad row is dead-lettered");
    assert_eq!(dead.header("id"), Some(bad));
    assert!(dead
        .header("walrelay.reason")
        .unwrap()
        .contains("timestamp column"));
    let fine = got.iter().find(|m| m.topic == "outbox.event.Fine").unwrap();
    assert_eq!(fine.timestamp, Some(1_795_990_200_123));
    eventually(WAIT, "the slot to pass every event", || async {
        (confirmed_flush_lsn(&stack.client, "walrelay").await >= end - 1024).then_some(())
    })
    .await;
    assert!(
        !stack.relay.log().contains("panicked"),
        "{}",
        stack.relay.log()
    );
}
