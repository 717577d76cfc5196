//! The whole path with real parts: Postgres, walrelay and a Kafka-protocol broker.

mod support;

use std::time::Duration;

use support::outbox::{current_lsn, events};
use support::pg::confirmed_flush_lsn;
use support::{eventually, guarantees, Broker, BrokerKind, Postgres, Relay, Stack};

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_routed_keyed_and_headed_by_their_columns() {
    guarantees::events_are_routed_keyed_and_headed_by_their_columns(BrokerKind::from_env()).await;
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
    guarantees::kafka_order_follows_commit_order_not_start_order(BrokerKind::from_env()).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_is_ignored_with_a_log_line_and_walrelay_streams_on() {
    let mut stack = Stack::start(&[]).await;
    stack.relay.hangup();
    eventually(WAIT, "walrelay to say it ignores SIGHUP", || async {
        stack
            .relay
            .log()
            .contains("SIGHUP received and ignored")
            .then_some(())
    })
    .await;
    events("AfterHangup", 1).insert(&stack.client).await;
    let reader = stack.broker.consumer();
    reader.subscribe(&["outbox.event.AfterHangup"]);
    assert_eq!(reader.read(1, WAIT).len(), 1, "{}", stack.relay.log());
    assert!(
        stack.relay.terminate(WAIT).success(),
        "{}",
        stack.relay.log()
    );
}

/// Commits one `event_type` event and waits for it in Kafka.
async fn one_event_through(stack: &Stack, event_type: &str) {
    events(event_type, 1).insert(&stack.client).await;
    let reader = stack.broker.consumer();
    reader.subscribe(&[&format!("outbox.event.{event_type}")]);
    assert_eq!(reader.read(1, WAIT).len(), 1, "{}", stack.relay.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbox_described_again_without_a_change_is_not_logged_as_a_schema_change() {
    let stack = Stack::start(&[]).await;
    one_event_through(&stack, "First").await;
    // Postgres describes the table again after this, though no column changed.
    stack
        .client
        .batch_execute("ALTER TABLE outbox SET (autovacuum_enabled = false)")
        .await
        .unwrap();
    one_event_through(&stack, "Second").await;
    assert!(
        !stack.relay.log().contains("schema changed"),
        "{}",
        stack.relay.log()
    );
    stack
        .client
        .batch_execute("ALTER TABLE outbox ADD COLUMN note text")
        .await
        .unwrap();
    one_event_through(&stack, "Third").await;
    assert!(
        stack.relay.log().contains("outbox table schema changed"),
        "{}",
        stack.relay.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_reads_deliver_every_paced_transaction_in_commit_order_and_confirm_them() {
    // --read-batch-window: reads pause once the socket is empty, so the
    // transactions committed meanwhile arrive together; none may be lost,
    // reordered or left unconfirmed.
    let stack = Stack::start(&["--read-batch-window", "20ms"]).await;
    for i in 1..=60u32 {
        stack
            .client
            .batch_execute(&format!(
                "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
                 VALUES ('{}', 'order', 'paced', 'Paced', '{{\"i\": {i}}}')",
                uuid_for(i)
            ))
            .await
            .unwrap();
        if i % 3 == 0 {
            tokio::time::sleep(Duration::from_millis(7)).await;
        }
    }
    let reader = stack.broker.consumer();
    reader.subscribe(&["outbox.event.Paced"]);
    let got = reader.read(60, WAIT);
    let ids: Vec<String> = got
        .iter()
        .map(|m| m.header("id").unwrap().to_string())
        .collect();
    let expected: Vec<String> = (1..=60).map(uuid_for).collect();
    assert_eq!(ids, expected, "one key, one partition: commit order");
    let lsn_after: u64 = current_lsn(&stack.client).await;
    eventually(WAIT, "the slot to confirm every transaction", || async {
        (confirmed_flush_lsn(&stack.client, "walrelay").await >= lsn_after - 1024).then_some(())
    })
    .await;
}

/// A JSON payload of exactly `size` bytes as Postgres prints a jsonb (at
/// least 20), its own for event `i`: a payload that reached another
/// event's record would not match.
fn sized_payload(i: usize, size: usize) -> String {
    let frame = format!(r#"{{"i": {i}, "pad": ""}}"#);
    let pad: String = (0..size.saturating_sub(frame.len()))
        .map(|k| char::from(b'a' + ((i * 7 + k) % 26) as u8))
        .collect();
    format!(r#"{{"i": {i}, "pad": "{pad}"}}"#)
}

// Payloads larger than 4 KiB go into the produce request by reference to
// the record's copy (message.copy.max.bytes=4096), on a topic handle
// (kafka::producer::handles): each must arrive byte for byte, under its own
// event, on either side of that limit, and when librdkafka queued it while
// the broker was down and sends it after it comes back. The broker is
// Apache Kafka, which keeps what it acknowledged across kill -9.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_payloads_sent_by_reference_arrive_whole_across_a_broker_restart() {
    let pg = Postgres::start();
    let mut broker = Broker::start_durable();
    let client = pg.client_with_outbox().await;
    let relay = Relay::start(&pg, &broker);
    relay.wait_ready(WAIT);

    let sizes = [20, 4_095, 4_096, 4_097, 8_192, 100_000];
    let mut sent = Vec::new();
    for round in 0..3 {
        if round == 1 {
            broker.kill();
        }
        for (n, size) in sizes.iter().enumerate() {
            let i = round * sizes.len() + n;
            let id = uuid_for(i as u32);
            let payload = sized_payload(i, *size);
            assert_eq!(payload.len(), *size);
            events("Large", 1)
                .id(&id)
                .payload(&payload)
                .insert(&client)
                .await;
            sent.push((id, payload));
        }
        if round == 1 {
            tokio::time::sleep(Duration::from_secs(2)).await;
            broker.restart_after_kill();
        }
    }

    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.Large"]);
    // A restart may bring duplicates: read until every event is in.
    let mut got = reader.read(sent.len(), WAIT);
    let started = std::time::Instant::now();
    while started.elapsed() < WAIT
        && !sent
            .iter()
            .all(|(id, _)| got.iter().any(|r| r.header("id") == Some(id)))
    {
        got.extend(reader.read_for(Duration::from_secs(1)));
    }
    for (id, payload) in &sent {
        let copies: Vec<_> = got.iter().filter(|r| r.header("id") == Some(id)).collect();
        assert!(!copies.is_empty(), "event {id} is missing: {}", relay.log());
        for copy in copies {
            assert!(
                copy.value.as_deref() == Some(payload.as_str()),
                "event {id} arrived changed ({} bytes sent)",
                payload.len()
            );
        }
    }
}
