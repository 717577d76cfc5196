//! Bad routing input does not flood the cluster with topics: creation can be
//! turned off, limited to an allow-list, and capped per minute; what falls
//! outside goes to the poison policy, on a real broker.

mod support;

use std::time::Duration;

use support::outbox::current_lsn;
use support::pg::confirmed_flush_lsn;
use support::{eventually, promtool, Stack};

const WAIT: Duration = Duration::from_secs(60);
const DLQ: &str = "walrelay.dead-letter";

async fn insert(client: &tokio_postgres::Client, id: &str, event_type: &str) -> u64 {
    client
        .execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES ($1::text::uuid, 'order', 'order-1', $2, '{\"kept\": true}')",
            &[&id, &event_type],
        )
        .await
        .unwrap();
    current_lsn(client).await
}

fn uuid(n: u32) -> String {
    format!("00000000-0000-0000-0000-{n:012}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_topic_creation_off_an_event_for_a_missing_topic_is_dead_lettered_and_no_topic_is_created(
) {
    let stack = Stack::start(&["--topic-create", "false", "--on-poison", "dead-letter"]).await;
    // Made by the operator before walrelay needs them.
    stack.broker.create_topic("outbox.event.OrderPlaced", 1);
    stack.broker.create_topic(DLQ, 1);
    let client = &stack.client;

    insert(client, &uuid(1), "OrderPlaced").await;
    insert(client, &uuid(2), "OrderPlaced-123").await;
    let end = insert(client, &uuid(3), "OrderPlaced").await;

    let reader = stack.broker.consumer();
    reader.subscribe(&["outbox.event.OrderPlaced", DLQ]);
    let got = reader.read(3, WAIT);
    let dead: Vec<_> = got.iter().filter(|m| m.topic == DLQ).collect();
    assert_eq!(got.len(), 3, "{got:?}\n{}", stack.relay.log());
    assert_eq!(dead.len(), 1, "{got:?}");
    assert_eq!(dead[0].header("id"), Some(uuid(2).as_str()));
    let reason = dead[0].header("walrelay.reason").unwrap();
    assert!(
        reason.contains("outbox.event.OrderPlaced-123 does not exist")
            && reason.contains("--topic-create"),
        "{reason}"
    );
    assert!(!reader.has_topic("outbox.event.OrderPlaced-123"));
    eventually(WAIT, "the slot to pass every event", || async {
        (confirmed_flush_lsn(client, "walrelay").await >= end - 1024).then_some(())
    })
    .await;
    assert_eq!(
        stack.relay.metric("walrelay_topics_created_total"),
        Some(0.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routed_topic_outside_the_allow_list_halts_the_relay_without_creating_it() {
    let mut stack = Stack::start(&[
        "--topic-allow-regex",
        r"outbox\.event\.(Order|Payment)[A-Za-z]+",
    ])
    .await;
    let before = insert(&stack.client, &uuid(1), "OrderPlaced").await;
    insert(&stack.client, &uuid(2), "OrderPlaced-123").await;

    let status = stack
        .relay
        .wait(WAIT)
        .expect("walrelay halts on a poison event");
    assert!(!status.success());
    let log = stack.relay.log();
    assert!(
        log.contains(&uuid(2)) && log.contains("does not match --topic-allow-regex"),
        "{log}"
    );
    let reader = stack.broker.consumer();
    assert!(reader.has_topic("outbox.event.OrderPlaced"));
    assert!(!reader.has_topic("outbox.event.OrderPlaced-123"));
    assert!(confirmed_flush_lsn(&stack.client, "walrelay").await <= before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_past_the_per_minute_cap_are_not_created_and_their_events_are_dead_lettered() {
    let stack = Stack::start(&[
        "--topic-create-max-per-minute",
        "3",
        "--on-poison",
        "dead-letter",
    ])
    .await;
    let healthy = promtool::scrape(stack.relay.metrics_port);
    // A writer bug: an id in the event type, a new topic per row.
    let mut end = 0;
    for n in 1..=6 {
        end = insert(&stack.client, &uuid(n), &format!("OrderPlaced-{n}")).await;
    }

    let reader = stack.broker.consumer();
    reader.subscribe(&[DLQ]);
    let dead = reader.read(3, WAIT);
    assert_eq!(dead.len(), 3, "{dead:?}\n{}", stack.relay.log());
    for record in &dead {
        let reason = record.header("walrelay.reason").unwrap();
        assert!(
            reason.contains("--topic-create-max-per-minute (3)"),
            "{reason}"
        );
    }
    let created = (1..=6)
        .filter(|n| reader.has_topic(&format!("outbox.event.OrderPlaced-{n}")))
        .count();
    assert_eq!(created, 3);
    eventually(WAIT, "the slot to pass every event", || async {
        (confirmed_flush_lsn(&stack.client, "walrelay").await >= end - 1024).then_some(())
    })
    .await;
    // Three routed topics and the dead-letter topic.
    assert_eq!(
        stack.relay.metric("walrelay_topics_created_total"),
        Some(4.0)
    );
    // Topics made as fast as that (and events dead-lettered), kept up,
    // are what the shipped rules watch for.
    let fired = promtool::firing_since(stack.relay.metrics_port, &healthy);
    assert!(
        fired.contains("WalrelayCreatingManyTopics") && fired.contains("WalrelayDeadLettering"),
        "{fired:?}"
    );
}
