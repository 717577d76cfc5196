//! Each refusal by Kafka goes where it belongs: record-specific ones to the
//! poison policy, permission ones to a halt, retriable ones to a retry.
//! Partitions run on a real broker; produce errors a real broker cannot be
//! made to return come from librdkafka's mock cluster.

mod support;

use std::time::Duration;

use rdkafka::mocking::MockCluster;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use support::kafka::KafkaReader;
use support::outbox::{current_lsn, events};
use support::pg::{confirmed_flush_lsn, slot_still_holds};
use support::{eventually, Postgres, Relay, Stack, OUTBOX_SQL};

const WAIT: Duration = Duration::from_secs(60);
const DLQ: &str = "walrelay.dead-letter";

/// An outbox with a partition column, and a relay placing events by it.
async fn partitioned(policy: &str) -> Stack {
    let sql = [OUTBOX_SQL, "ALTER TABLE outbox ADD COLUMN shard int"].concat();
    let flags = [
        "--on-poison",
        policy,
        "--topic-partitions",
        "2",
        "--fields-additional-placement",
        "shard:partition",
    ];
    Stack::start_on(&sql, &flags).await
}

async fn insert_on_shard(client: &tokio_postgres::Client, id: &str, shard: i32) -> u64 {
    client
        .execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, shard) \
             VALUES ($1::text::uuid, 'order', 'order-1', 'Sharded', '{\"n\": 1}', $2)",
            &[&id, &shard],
        )
        .await
        .unwrap();
    current_lsn(client).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_beyond_the_topic_is_dead_lettered_instead_of_retried_forever() {
    let stack = partitioned("dead-letter").await;

    // librdkafka refuses a partition beyond the topic in the delivery report
    // while it does not know the topic yet, at send time once it does.
    let first = "00000000-0000-0000-0000-0000000000f1";
    let second = "00000000-0000-0000-0000-0000000000f2";
    insert_on_shard(&stack.client, first, 7).await;
    insert_on_shard(&stack.client, "00000000-0000-0000-0000-0000000000a1", 1).await;
    let reader = stack.broker.consumer();
    reader.subscribe(&["outbox.event.Sharded", DLQ]);
    let mut got = reader.read(2, WAIT);
    insert_on_shard(&stack.client, second, 9).await;
    let end = insert_on_shard(&stack.client, "00000000-0000-0000-0000-0000000000a2", 0).await;
    got.extend(reader.read(2, WAIT));
    let dead: Vec<_> = got.iter().filter(|m| m.topic == DLQ).collect();
    let good: Vec<_> = got.iter().filter(|m| m.topic != DLQ).collect();
    assert_eq!(good.len(), 2, "{got:?}\n{}", stack.relay.log());
    assert_eq!(dead.len(), 2, "{got:?}\n{}", stack.relay.log());
    for (id, partition) in [(first, 7), (second, 9)] {
        let record = dead.iter().find(|m| m.header("id") == Some(id)).unwrap();
        let reason = record.header("walrelay.reason").unwrap();
        assert!(
            reason.contains(&format!("partition {partition}")) && reason.contains("2 partitions"),
            "{reason}"
        );
        assert_eq!(record.value.as_deref(), Some(r#"{"n": 1}"#));
    }
    eventually(WAIT, "the slot to pass every event", || async {
        (confirmed_flush_lsn(&stack.client, "walrelay").await >= end - 1024).then_some(())
    })
    .await;
    // Which path refuses the first one (the delivery report or the send)
    // depends on whether librdkafka already knew the topic: both are poison.
    let (_, metrics) = stack.relay.http_get("/metrics").unwrap();
    assert!(
        metrics.contains("walrelay_dead_letter_events_total 2"),
        "{metrics}"
    );
    assert!(
        !stack.relay.log().contains("session ended; reconnecting"),
        "{}",
        stack.relay.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_beyond_the_topic_halts_the_relay_and_names_the_event() {
    let mut stack = partitioned("halt").await;
    insert_on_shard(&stack.client, "00000000-0000-0000-0000-0000000000a1", 0).await;
    let id = "00000000-0000-0000-0000-0000000000f3";
    insert_on_shard(&stack.client, id, 5).await;

    let status = stack
        .relay
        .wait(WAIT)
        .expect("walrelay halts on a poison event");
    assert!(!status.success());
    let log = stack.relay.log();
    assert!(
        log.contains(id) && log.contains("partition 5") && log.contains("2 partitions"),
        "{log}"
    );
    assert!(slot_still_holds(&stack.client, "walrelay", id).await);
}

/// A mock cluster with the event's topic and the dead-letter topic, and a
/// relay that must not create topics (the mock cannot).
async fn on_mock_cluster(
    policy: &str,
    extra: &[&str],
) -> (
    MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
    Postgres,
    tokio_postgres::Client,
    Relay,
) {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("outbox.event.Placed", 1, 1).unwrap();
    cluster.create_topic(DLQ, 1, 1).unwrap();
    let pg = Postgres::start();
    let client = pg.client_with_outbox().await;
    let mut flags = vec!["--on-poison", policy, "--topic-create", "false"];
    flags.extend_from_slice(extra);
    let relay = Relay::start_raw(&pg.url(), &cluster.bootstrap_servers(), &flags);
    relay.wait_ready(WAIT);
    (cluster, pg, client, relay)
}

/// One event of type Placed with id `id`; the LSN after its commit.
async fn placed(client: &tokio_postgres::Client, id: &str) -> u64 {
    events("Placed", 1)
        .id(id)
        .aggregate("order-1")
        .payload("{}")
        .insert(client)
        .await
}

/// Waits until the slot has moved past `end` (an LSN after the commit).
async fn slot_passes(client: &tokio_postgres::Client, end: u64) {
    eventually(WAIT, "the slot to pass the event", || async {
        (confirmed_flush_lsn(client, "walrelay").await >= end - 1024).then_some(())
    })
    .await;
}

/// Kafka refuses one event once with `error`: it is dead-lettered with a
/// reason that says `reason`, and the slot moves past it without a new
/// session.
async fn a_refusal_is_dead_lettered(error: RDKafkaRespErr, id: &str, reason: &str) {
    let (cluster, _pg, client, relay) = on_mock_cluster("dead-letter", &[]).await;
    cluster.request_errors(RDKafkaApiKey::Produce, &[error]);
    let end = placed(&client, id).await;

    let reader = KafkaReader::connect(&cluster.bootstrap_servers());
    reader.subscribe(&[DLQ]);
    let got = reader.read(1, WAIT);
    assert_eq!(got.len(), 1, "{}", relay.log());
    assert_eq!(got[0].header("id"), Some(id));
    let why = got[0].header("walrelay.reason").unwrap();
    assert!(why.contains(reason), "{why}");
    slot_passes(&client, end).await;
    assert!(
        !relay.log().contains("session ended; reconnecting"),
        "{}",
        relay.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timestamp_the_broker_rejects_is_dead_lettered() {
    a_refusal_is_dead_lettered(
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP,
        "00000000-0000-0000-0000-0000000000c1",
        "timestamp",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_authorization_failure_halts_even_in_dead_letter_mode() {
    let (cluster, _pg, client, mut relay) = on_mock_cluster("dead-letter", &[]).await;
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED],
    );
    let id = "00000000-0000-0000-0000-0000000000c2";
    placed(&client, id).await;

    let status = relay
        .wait(WAIT)
        .expect("walrelay halts on a permission error");
    assert!(!status.success());
    let log = relay.log();
    assert!(
        log.contains(id) && log.contains("grant walrelay's principal WRITE"),
        "{log}"
    );
    assert!(
        !log.contains("poison event sent to the dead-letter topic"),
        "{log}"
    );
    assert!(slot_still_holds(&client, "walrelay", id).await);
    let reader = KafkaReader::connect(&cluster.bootstrap_servers());
    reader.subscribe(&[DLQ]);
    assert!(reader.read_for(Duration::from_secs(2)).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retriable_failure_of_a_dead_letter_record_is_retried_not_a_halt() {
    // Delivery gives up after 2 s, so the dead-letter copy's retriable
    // errors surface instead of being retried inside librdkafka.
    let (cluster, _pg, client, relay) =
        on_mock_cluster("dead-letter", &["-X", "message.timeout.ms=2000"]).await;
    let mut errors = vec![RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP];
    errors.extend([RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS; 500]);
    cluster.request_errors(RDKafkaApiKey::Produce, &errors);
    let id = "00000000-0000-0000-0000-0000000000c3";
    let end = placed(&client, id).await;

    eventually(WAIT, "the dead-letter copy to fail retriably", || async {
        relay
            .log()
            .contains("session ended; reconnecting")
            .then_some(())
    })
    .await;
    // The next session reads the event again: now Kafka refuses it only once.
    cluster.clear_request_errors(RDKafkaApiKey::Produce);
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP],
    );

    let reader = KafkaReader::connect(&cluster.bootstrap_servers());
    reader.subscribe(&[DLQ]);
    let got = reader.read(1, WAIT);
    assert_eq!(got.len(), 1, "{}", relay.log());
    assert_eq!(got[0].header("id"), Some(id));
    slot_passes(&client, end).await;
    assert!(!relay.log().contains("walrelay stopped"), "{}", relay.log());
}

fn big_payload() -> String {
    format!(r#"{{"blob": "{}"}}"#, "x".repeat(50_000))
}

async fn insert_big(client: &tokio_postgres::Client, id: &str) -> u64 {
    client
        .execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES ($1::text::uuid, 'order', 'order-1', 'Placed', $2::text::jsonb)",
            &[&id, &big_payload()],
        )
        .await
        .unwrap();
    current_lsn(client).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_too_large_for_its_topic_keeps_its_payload_in_the_dead_letter_record() {
    let (cluster, _pg, client, relay) = on_mock_cluster("dead-letter", &[]).await;
    // The first refusal could be its batch's; refused again when sent
    // alone, the event itself is too large.
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE; 2],
    );
    let id = "00000000-0000-0000-0000-0000000000d1";
    let end = insert_big(&client, id).await;

    let reader = KafkaReader::connect(&cluster.bootstrap_servers());
    reader.subscribe(&[DLQ]);
    let got = reader.read(1, WAIT);
    assert_eq!(got.len(), 1, "{}", relay.log());
    let record = &got[0];
    assert_eq!(record.header("id"), Some(id));
    assert_eq!(
        record.header("walrelay.original-topic"),
        Some("outbox.event.Placed")
    );
    assert!(record.header("walrelay.value-omitted").is_none());
    let value: serde_json::Value = serde_json::from_str(record.value.as_deref().unwrap()).unwrap();
    let expected: serde_json::Value = serde_json::from_str(&big_payload()).unwrap();
    assert_eq!(
        value, expected,
        "the dead-letter record carries the whole value"
    );
    slot_passes(&client, end).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_too_large_even_for_the_dead_letter_topic_halts_the_relay() {
    let (cluster, _pg, client, mut relay) =
        on_mock_cluster("dead-letter", &["--dead-letter-max-message-bytes", "30000"]).await;
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE; 2],
    );
    let id = "00000000-0000-0000-0000-0000000000d2";
    insert_big(&client, id).await;

    let status = relay
        .wait(WAIT)
        .expect("walrelay halts rather than drop the value");
    assert!(!status.success());
    let log = relay.log();
    assert!(
        log.contains(id) && log.contains("--dead-letter-max-message-bytes"),
        "{log}"
    );
    assert!(slot_still_holds(&client, "walrelay", id).await);
    let reader = KafkaReader::connect(&cluster.bootstrap_servers());
    reader.subscribe(&[DLQ]);
    assert!(reader.read_for(Duration::from_secs(2)).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_walrelay_may_not_describe_halts_instead_of_passing_for_a_missing_one() {
    // With --topic-create false a missing topic is poison; one walrelay may
    // not see is a permission problem, and would dead-letter every event.
    let (cluster, _pg, client, mut relay) = on_mock_cluster("dead-letter", &[]).await;
    cluster
        .topic_error(
            "outbox.event.Placed",
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
        )
        .unwrap();
    let id = "00000000-0000-0000-0000-0000000000e1";
    placed(&client, id).await;

    let log = relay.wait_for_failure(WAIT);
    assert!(
        log.contains("may not describe topic outbox.event.Placed")
            && log.contains("DESCRIBE and WRITE"),
        "{log}"
    );
    assert!(
        !log.contains("poison event sent to the dead-letter topic"),
        "{log}"
    );
    assert!(slot_still_holds(&client, "walrelay", id).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_violation_is_dead_lettered_instead_of_retried_forever() {
    a_refusal_is_dead_lettered(
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_POLICY_VIOLATION,
        "00000000-0000-0000-0000-0000000000e2",
        "olicy violation",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_refused_once_for_its_size_is_delivered_when_sent_again_alone() {
    // One refusal, then none: it was the batch (or a neighbour), not the event.
    let (cluster, _pg, client, relay) = on_mock_cluster("dead-letter", &[]).await;
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE],
    );
    let id = "00000000-0000-0000-0000-0000000000d3";
    let end = placed(&client, id).await;
    let reader = KafkaReader::connect(&cluster.bootstrap_servers());
    reader.subscribe(&["outbox.event.Placed", DLQ]);
    let got = reader.read(1, WAIT);
    assert_eq!(got.len(), 1, "{}", relay.log());
    assert_eq!(
        (got[0].topic.as_str(), got[0].header("id")),
        ("outbox.event.Placed", Some(id))
    );
    slot_passes(&client, end).await;
    assert!(reader.read_for(Duration::from_secs(1)).is_empty());
}
