//! The table-less outbox: transactional pg_logical_emit_message events,
//! routed like table rows; rollbacks produce nothing; non-transactional
//! messages are refused.

mod support;

use std::time::Duration;

use support::{Broker, Postgres, Relay};

const WAIT: Duration = Duration::from_secs(60);
const FLAGS: &[&str] = &["--source", "messages", "--message-prefix", "walrelay"];

async fn client_with_helper(pg: &Postgres) -> tokio_postgres::Client {
    let client = pg.client().await;
    client
        .batch_execute(include_str!("../sql/outbox_messages.sql"))
        .await
        .unwrap();
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_messages_are_published_and_rolled_back_ones_are_not() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let mut client = client_with_helper(&pg).await;
    let relay = Relay::start_with(&pg, &broker, FLAGS);
    relay.wait_ready(WAIT);

    let txn = client.transaction().await.unwrap();
    txn.batch_execute(
        "SELECT walrelay_emit('order', 'o-1', 'OrderPlaced', '{\"version\": 1, \"total\": 10}', \
                              '00000000-0000-0000-0000-0000000000e1')",
    )
    .await
    .unwrap();
    txn.commit().await.unwrap();
    let txn = client.transaction().await.unwrap();
    txn.batch_execute("SELECT walrelay_emit('order', 'o-2', 'OrderPlaced', '{\"ghost\": true}')")
        .await
        .unwrap();
    txn.rollback().await.unwrap();
    // Another application's messages are none of walrelay's business.
    client
        .batch_execute("SELECT pg_logical_emit_message(true, 'other-app', 'hello')")
        .await
        .unwrap();
    client
        .batch_execute(
            "SELECT walrelay_emit('order', 'o-3', 'OrderPlaced', '[]', '00000000-0000-0000-0000-0000000000e3')",
        )
        .await
        .unwrap();

    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.OrderPlaced"]);
    let mut got = reader.read(2, WAIT);
    got.extend(reader.read_for(Duration::from_secs(2)));
    assert_eq!(
        got.len(),
        2,
        "only the committed events: {got:?}\n{}",
        relay.log()
    );
    let first = got
        .iter()
        .find(|m| m.key.as_deref() == Some("o-1"))
        .unwrap();
    assert_eq!(
        first.header("id"),
        Some("00000000-0000-0000-0000-0000000000e1")
    );
    assert_eq!(first.header("event_type"), Some("OrderPlaced"));
    let value: serde_json::Value = serde_json::from_str(first.value.as_deref().unwrap()).unwrap();
    assert_eq!(value, serde_json::json!({"version": 1, "total": 10}));
    assert!(got
        .iter()
        .any(|m| m.header("id") == Some("00000000-0000-0000-0000-0000000000e3")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_transactional_message_is_refused_with_the_fix() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = client_with_helper(&pg).await;
    let mut relay = Relay::start_with(&pg, &broker, FLAGS);
    relay.wait_ready(WAIT);
    client
        .batch_execute(
            "SELECT pg_logical_emit_message(false, 'walrelay', \
             '{\"id\": \"00000000-0000-0000-0000-0000000000f9\", \"aggregate_id\": \"x\", \"event_type\": \"T\", \"payload\": {}}')",
        )
        .await
        .unwrap();
    let status = relay.wait(WAIT).expect("walrelay refuses the message");
    assert!(!status.success());
    let log = relay.log();
    assert!(
        log.contains("non-transactional") && log.contains("pg_logical_emit_message(true"),
        "{log}"
    );
    assert!(
        log.contains("00000000-0000-0000-0000-0000000000f9"),
        "the event is named: {log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_of_a_mistyped_prefix_are_counted_and_warned_about() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = client_with_helper(&pg).await;
    // The writer says "walrelay.", walrelay listens for "walrelay".
    let relay = Relay::start_with(&pg, &broker, FLAGS);
    relay.wait_ready(WAIT);
    for n in 0..3 {
        client
            .batch_execute(&format!(
                "SELECT pg_logical_emit_message(true, 'walrelay.', '{{\"n\": {n}}}')"
            ))
            .await
            .unwrap();
    }
    support::eventually(WAIT, "the ignored messages to be counted", || async {
        let (_, metrics) = relay.http_get("/metrics")?;
        metrics
            .contains("walrelay_ignored_messages_total{prefix=\"walrelay.\"} 3")
            .then_some(())
    })
    .await;
    let log = relay.log();
    assert!(
        log.contains("none with --message-prefix has arrived yet") && log.contains("walrelay."),
        "{log}"
    );
    assert_eq!(
        log.matches("none with --message-prefix has arrived yet")
            .count(),
        1,
        "said once per prefix"
    );
}
