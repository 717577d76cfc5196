//! Avro with a schema registry (`--value-format avro`), beside the real
//! thing: Postgres, a Kafka-protocol broker and Apicurio Registry 3.3.3's
//! Confluent-compatible API, read back by Python confluent-kafka's
//! AvroDeserializer, a consumer Avro users already run.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::outbox::events;
use support::pg::confirmed_flush_lsn;
use support::registry::{read_with_confluent_kafka, SchemaRegistry};
use support::{eventually, Stack};

const WAIT: Duration = Duration::from_secs(60);

fn avro_flags(registry: &SchemaRegistry) -> Vec<String> {
    [
        "--value-format",
        "avro",
        "--key-format",
        "avro",
        "--expand-json-payload",
        "--schema-registry-url",
        &registry.url(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

async fn stack_with(registry: &SchemaRegistry, more: &[&str]) -> Stack {
    let mut flags = avro_flags(registry);
    flags.extend(more.iter().map(|s| s.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    Stack::start(&flags).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluent_kafkas_avro_deserializer_reads_every_record_walrelay_writes() {
    let registry = SchemaRegistry::start();
    let stack = stack_with(&registry, &[]).await;
    let payloads = [
        json!({"version": 1, "order_id": "o-1", "total_cents": 1999, "tags": ["new", "gift"],
               "customer": {"id": "c-42", "vip": true}, "ratio": 0.5}),
        json!({"version": 1, "order_id": "o-2", "total_cents": 5, "tags": ["new"],
               "customer": {"id": "c-7", "vip": false}, "ratio": 1.25}),
        json!({"version": 1, "order_id": "o-3", "total_cents": 0, "tags": ["x"],
               "customer": {"id": "c-9", "vip": false}, "ratio": 2.0}),
    ];
    for (i, payload) in payloads.iter().enumerate() {
        events("AvroPlaced", 1)
            .aggregate(&format!("o-{}", i + 1))
            .payload(&payload.to_string())
            .insert(&stack.client)
            .await;
    }
    let topic = "outbox.event.AvroPlaced";
    let read = read_with_confluent_kafka(&stack.broker.brokers(), &registry.url(), topic, 3, true);
    let read = read.as_array().unwrap();
    assert_eq!(read.len(), 3, "{read:?}\nlog:\n{}", stack.relay.log());
    for (i, (record, payload)) in read.iter().zip(&payloads).enumerate() {
        assert_eq!(record["key"], json!(format!("o-{}", i + 1)));
        assert_eq!(&record["value"], payload, "record {i}");
    }

    // The wire format: magic byte 0, then the id the registry gave the
    // subject's one version (TopicNameStrategy).
    let reader = stack.broker.consumer();
    reader.subscribe(&[topic]);
    let raw = reader.read(3, WAIT);
    let (status, latest) = registry.get(&format!("/subjects/{topic}-value/versions/latest"));
    assert_eq!(status, 200, "{latest}");
    let latest: Value = serde_json::from_str(&latest).unwrap();
    let id = latest["id"].as_i64().unwrap() as i32;
    for record in &raw {
        let value = record.raw_value.as_ref().unwrap();
        assert_eq!(value[0], 0, "the magic byte");
        assert_eq!(i32::from_be_bytes(value[1..5].try_into().unwrap()), id);
    }
    // One schema, registered once for three events.
    let (_, versions) = registry.get(&format!("/subjects/{topic}-value/versions"));
    assert_eq!(versions.trim(), "[1]");
    let (_, subjects) = registry.get("/subjects");
    assert!(subjects.contains(&format!("{topic}-key")), "{subjects}");
    assert_eq!(
        stack.relay.metric("walrelay_schema_registry_reachable"),
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_the_registry_refuses_as_incompatible_is_dead_lettered_with_its_reason() {
    let registry = SchemaRegistry::start();
    let stack = stack_with(&registry, &["--on-poison", "dead-letter"]).await;
    let topic = "outbox.event.AvroChanged";
    let (status, body) = registry.send(
        "PUT",
        &format!("/config/{topic}-value"),
        r#"{"compatibility":"BACKWARD"}"#,
    );
    assert_eq!(status, 200, "{body}");
    events("AvroChanged", 1)
        .payload(r#"{"amount": 1}"#)
        .insert(&stack.client)
        .await;
    // amount turns from an int into a string: BACKWARD refuses it (409).
    events("AvroChanged", 1)
        .id("00000000-0000-0000-0000-0000000000c2")
        .payload(r#"{"amount": "one"}"#)
        .insert(&stack.client)
        .await;
    events("AvroChanged", 1)
        .payload(r#"{"amount": 3}"#)
        .insert(&stack.client)
        .await;

    let dead = stack.broker.consumer();
    dead.subscribe(&["walrelay.dead-letter"]);
    let dead = dead.read(1, WAIT);
    assert_eq!(dead.len(), 1, "log:\n{}", stack.relay.log());
    assert_eq!(
        dead[0].header("walrelay.event-id"),
        Some("00000000-0000-0000-0000-0000000000c2")
    );
    let reason = dead[0].header("walrelay.reason").unwrap();
    assert!(reason.contains("incompatible"), "{reason}");
    assert!(reason.contains(&format!("{topic}-value")), "{reason}");
    // The copy is the record as JsonConverter wrote it: readable as it is.
    assert!(dead[0].value.as_deref().unwrap().contains("\"one\""));
    // The events around it went on, in Avro.
    let read = read_with_confluent_kafka(&stack.broker.brokers(), &registry.url(), topic, 2, true);
    let amounts: Vec<&Value> = read
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["value"]["amount"])
        .collect();
    assert_eq!(amounts, [&json!(1), &json!(3)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_that_does_not_answer_holds_the_events_and_readyz_says_so() {
    let mut registry = SchemaRegistry::start();
    let stack = stack_with(&registry, &["--reconnect-max-backoff", "2s"]).await;
    events("AvroFirst", 1).insert(&stack.client).await;
    read_with_confluent_kafka(
        &stack.broker.brokers(),
        &registry.url(),
        "outbox.event.AvroFirst",
        1,
        true,
    );
    registry.kill();
    let lsn = events("AvroHeld", 1)
        .payload(r#"{"held": true}"#)
        .insert(&stack.client)
        .await;
    eventually(
        WAIT,
        "/readyz says the registry does not answer",
        || async {
            let (status, body) = stack.relay.http_get("/readyz")?;
            (status == 503 && body.contains("schema registry")).then_some(())
        },
    )
    .await;
    assert_eq!(
        stack.relay.metric("walrelay_schema_registry_reachable"),
        Some(0.0)
    );
    // The slot is not confirmed past the event that waits.
    let confirmed = confirmed_flush_lsn(&stack.client, "walrelay").await;
    assert!(confirmed < lsn, "confirmed {confirmed} past {lsn}");

    registry.restart();
    let read = read_with_confluent_kafka(
        &stack.broker.brokers(),
        &registry.url(),
        "outbox.event.AvroHeld",
        1,
        true,
    );
    assert_eq!(read[0]["value"], json!({"held": true}));
    eventually(WAIT, "/readyz is ready again", || async {
        let (status, _) = stack.relay.http_get("/readyz")?;
        (status == 200).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walrelay_check_tests_the_registry_and_a_dry_run_of_the_payload_schema() {
    let mut registry = SchemaRegistry::start();
    let pg = support::Postgres::start();
    let broker = support::Broker::start();
    pg.client_with_outbox().await;
    let args = |registry: &SchemaRegistry| -> Vec<String> {
        [
            "--pg-url",
            &pg.url(),
            "--kafka-brokers",
            &broker.brokers(),
            "--value-format",
            "avro",
            "--schema-registry-url",
            &registry.url(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let topic = "outbox.event.WalrelayCheck";
    // A subject whose latest version is a record: the jsonb payload column's
    // schema (a string) is refused under BACKWARD.
    registry.send(
        "PUT",
        &format!("/config/{topic}-value"),
        r#"{"compatibility":"BACKWARD"}"#,
    );
    let record = r#"{"type":"record","name":"Old","fields":[{"name":"a","type":"int"}]}"#;
    let body = json!({ "schema": record }).to_string();
    let (status, answer) =
        registry.send("POST", &format!("/subjects/{topic}-value/versions"), &body);
    assert_eq!(status, 200, "{answer}");

    let (ok, doc, out) = support::check_json(&args(&registry));
    assert!(!ok, "{out}");
    for name in ["registry.reachable", "registry.credentials"] {
        assert_eq!(
            support::check_entry(&doc, name)["status"],
            "pass",
            "{name}: {out}"
        );
    }
    let level = support::check_entry(&doc, "registry.compatibility_level");
    assert_eq!(level["status"], "pass", "{out}");
    assert!(
        level["detail"].as_str().unwrap().contains("BACKWARD"),
        "{out}"
    );
    let dry_run = support::check_entry(&doc, "registry.compatibility");
    assert_eq!(dry_run["status"], "fail", "{out}");
    // Nothing was registered by the dry run.
    let (_, versions) = registry.get(&format!("/subjects/{topic}-value/versions"));
    assert_eq!(versions.trim(), "[1]");

    registry.kill();
    let (ok, doc, out) = support::check_json(&args(&registry));
    assert!(!ok, "{out}");
    let reachable = support::check_entry(&doc, "registry.reachable");
    assert_eq!(reachable["status"], "fail", "{out}");
    assert!(reachable["fix"]
        .as_str()
        .unwrap()
        .contains("--schema-registry-url"));
}
