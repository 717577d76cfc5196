//! The whole path with real parts: Postgres, walrelay and a Kafka-protocol broker.

mod support;

use std::time::Duration;

use support::outbox::{current_lsn, events};
use support::pg::confirmed_flush_lsn;
use support::{eventually, Broker, Postgres, Relay, Stack};

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_routed_keyed_and_headed_by_their_columns() {
    let stack = Stack::start(&[]).await;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_transaction_produces_nothing() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let mut client = pg.client_with_outbox().await;
    let relay = Relay::start(&pg, &broker);
    relay.wait_ready(WAIT);

    let txn = client.transaction().await.unwrap();
    txn.execute(
        "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
         VALUES (gen_random_uuid(), 'order', 'o-9', 'Ghost', '{}')",
        &[],
    )
    .await
    .unwrap();
    txn.rollback().await.unwrap();
    // A committed marker in the same topic proves the relay got past the rollback.
    events("Ghost", 1)
        .id("00000000-0000-0000-0000-00000000000a")
        .aggregate("o-9")
        .payload(r#"{"committed": true}"#)
        .insert(&client)
        .await;

    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.Ghost"]);
    let mut got = reader.read(1, WAIT);
    got.extend(reader.read_for(Duration::from_secs(2)));
    assert_eq!(got.len(), 1, "only the committed event: {got:?}");
    assert_eq!(
        got[0].header("id"),
        Some("00000000-0000-0000-0000-00000000000a")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_row_insert_and_copy_deliver_every_row() {
    let stack = Stack::start(&[]).await;

    stack
        .client
        .batch_execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             SELECT gen_random_uuid(), 'order', 'multi-' || i, 'Multi', jsonb_build_object('i', i) \
             FROM generate_series(1, 100) i",
        )
        .await
        .unwrap();
    let sink = stack
        .client
        .copy_in("COPY outbox (id, aggregate_type, aggregate_id, event_type, payload) FROM STDIN")
        .await
        .unwrap();
    let mut rows = String::new();
    for i in 1..=100 {
        rows.push_str(&format!(
            "{}\torder\tcopy-{i}\tCopied\t{{\"i\": {i}}}\n",
            uuid_for(i)
        ));
    }
    use futures_util::SinkExt;
    let mut sink = Box::pin(sink);
    sink.send(bytes::Bytes::from(rows)).await.unwrap();
    sink.as_mut().finish().await.unwrap();

    let reader = stack.broker.consumer();
    reader.subscribe(&["outbox.event.Multi", "outbox.event.Copied"]);
    let got = reader.read(200, WAIT);
    let multi = got
        .iter()
        .filter(|m| m.topic == "outbox.event.Multi")
        .count();
    let copied = got
        .iter()
        .filter(|m| m.topic == "outbox.event.Copied")
        .count();
    assert_eq!((multi, copied), (100, 100), "log:\n{}", stack.relay.log());
    let ids: std::collections::HashSet<_> = got
        .iter()
        .map(|m| m.header("id").unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 200, "every event id is distinct");

    // Both transactions are confirmed in full: the slot reaches the last commit.
    let lsn_after: u64 = current_lsn(&stack.client).await;
    eventually(WAIT, "the slot to confirm both transactions", || async {
        (confirmed_flush_lsn(&stack.client, "walrelay").await >= lsn_after - 1024).then_some(())
    })
    .await;
}

fn uuid_for(i: u32) -> String {
    format!("00000000-0000-0000-0001-{i:012}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_order_follows_commit_order_not_start_order() {
    let pg = Postgres::start();
    let broker = Broker::start();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_confirms_and_exits_zero() {
    let mut stack = Stack::start(&[]).await;

    events("Bye", 1)
        .id("00000000-0000-0000-0000-0000000000b1")
        .aggregate("k")
        .payload("{}")
        .insert(&stack.client)
        .await;
    let reader = stack.broker.consumer();
    reader.subscribe(&["outbox.event.Bye"]);
    assert_eq!(reader.read(1, WAIT).len(), 1);
    let lsn_after: i64 = current_lsn(&stack.client).await as i64;

    let status = stack.relay.terminate(Duration::from_secs(30));
    assert!(
        status.success(),
        "exit status {status:?}; log:\n{}",
        stack.relay.log()
    );
    assert!(stack.relay.log().contains("final status update sent"));
    assert!(
        confirmed_flush_lsn(&stack.client, "walrelay").await as i64 >= lsn_after - 1024,
        "the final status update confirmed the delivered event"
    );
}
