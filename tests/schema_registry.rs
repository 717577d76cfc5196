//! Avro, JSON Schema and Protobuf with a schema registry (`--value-format
//! avro`, `json-schema`, `protobuf`), beside the real thing: Postgres, a
//! Kafka-protocol broker and Apicurio Registry 3.3.3's Confluent-compatible
//! API, read back by Python confluent-kafka's AvroDeserializer,
//! JSONDeserializer and ProtobufDeserializer, consumers registry users
//! already run.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::oidc::{IdentityProvider, ISSUER};
use support::outbox::events;
use support::pg::confirmed_flush_lsn;
use support::registry::{
    read_with_confluent_kafka, read_with_deserializer, read_with_protobuf, SchemaRegistry,
};
use support::{eventually, promtool, Stack};
use walrelay::registry::connect_schema::Connect;
use walrelay::registry::names::NameAdjustment;
use walrelay::registry::protobuf;

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

/// `--value-format json-schema` as Confluent's JSONDeserializer, a
/// consumer in use, reads it: the writer's schema fetched by the id in
/// each record and every value validated against it. The columns are
/// placed in the envelope, a struct whose schema has `properties`:
/// Apicurio's Confluent-compatible API takes a JSON Schema only with
/// `$schema` or `properties` (its JsonSchemaContentAccepter), so the
/// top-level `oneOf` that JsonSchemaData gives an optional payload, or the
/// `{"type":"string"}` of a text key, is refused there (the next test pins
/// that this stops walrelay). Keys are written as StringConverter does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluent_kafkas_json_deserializer_reads_every_record_walrelay_writes_as_json_schema() {
    let registry = SchemaRegistry::start();
    let url = registry.url();
    let stack = two_orders_as(
        &url,
        &["--value-format", "json-schema"],
        "JsonSchemaPlaced",
        5,
    )
    .await;
    let topic = "outbox.event.JsonSchemaPlaced";
    let read = read_with_deserializer("json", &stack.broker.brokers(), &url, topic, 2, false);
    let rows = read.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{read:?}\nlog:\n{}", stack.relay.log());
    let (first, second) = (&rows[0], &rows[1]);
    assert_eq!(first["key"], "o-1", "{read}");
    assert_eq!(second["key"], "o-2", "{read}");
    let (first, second) = (&first["value"], &second["value"]);
    assert_eq!(first["payload"], first_order_payload(), "{read}");
    assert_eq!(second["payload"]["total_cents"], 5, "{read}");
    // A Decimal is JsonConverter's Base64 of the unscaled two's-complement
    // value (decimal.format BASE64, the default): 1234 is 0x04D2, -5 0xFB.
    assert_eq!(first["amount"], "BNI=", "{read}");
    assert_eq!(second["amount"], "+w==", "{read}");
    assert_uuid_and_instant_read_back(first, second, &read);

    // Registered as JSON (schemaType): an object whose fields carry their
    // connect.index, an optional one as a oneOf with null, a named one its
    // Connect name as title, as JsonSchemaData writes them.
    let (status, latest) = registry.get(&format!("/subjects/{topic}-value/versions/latest"));
    assert_eq!(status, 200, "{latest}");
    let latest: Value = serde_json::from_str(&latest).unwrap();
    assert_eq!(latest["schemaType"], "JSON", "{latest}");
    let schema: Value = serde_json::from_str(latest["schema"].as_str().unwrap()).unwrap();
    assert_eq!(schema["type"], "object", "{schema}");
    let amount = &schema["properties"]["amount"]["oneOf"];
    assert_eq!(amount[0]["type"], "null", "{schema}");
    assert_eq!(amount[1]["connect.type"], "bytes", "{schema}");
    assert_eq!(
        amount[1]["title"], "org.apache.kafka.connect.data.Decimal",
        "{schema}"
    );
    let payload = &schema["properties"]["payload"]["oneOf"][1];
    assert_eq!(
        payload["properties"]["total_cents"]["oneOf"][1]["connect.type"], "int32",
        "{schema}"
    );

    // The wire format: magic byte 0, the id, then the value's JSON text.
    let reader = stack.broker.consumer();
    reader.subscribe(&[topic]);
    let raw = reader.read(2, WAIT);
    let id = latest["id"].as_i64().unwrap() as i32;
    for record in &raw {
        let value = record.raw_value.as_ref().unwrap();
        assert_eq!(value[0], 0, "the magic byte");
        assert_eq!(i32::from_be_bytes(value[1..5].try_into().unwrap()), id);
        let body: Value = serde_json::from_slice(&value[5..]).expect("JSON text after the id");
        assert!(body["payload"].is_object(), "{body}");
    }
    let (_, versions) = registry.get(&format!("/subjects/{topic}-value/versions"));
    assert_eq!(versions.trim(), "[1]");
}

/// `--key-format`/`--value-format protobuf` as a Protobuf consumer in use
/// reads it (tests/fixtures/protobuf_oracle.py): its class compiled by
/// protoc from the schema walrelay registered, each value read by
/// confluent-kafka's ProtobufDeserializer (magic byte, id, message indexes,
/// the writer's schema fetched by id). The payload is expanded, and a
/// numeric, a timestamptz and a uuid are placed in the envelope. The
/// expected values are the rows' own; proto3 holds no null, so a NULL
/// column reads back as the type's default, as from Confluent's converter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protobuf_consumer_reads_every_record_walrelay_writes_as_protobuf() {
    let registry = SchemaRegistry::start();
    let url = registry.url();
    let formats = ["--value-format", "protobuf", "--key-format", "protobuf"];
    let stack = two_orders_as(&url, &formats, "ProtoPlaced", 0).await;
    let topic = "outbox.event.ProtoPlaced";
    // The envelope's Connect name, as Debezium's TableSchemaBuilder gives it
    // under topic.prefix shop, is the message's full name.
    let message = "shop.public.outbox.ProtoPlaced.Value";
    let read = read_with_protobuf(
        &stack.broker.brokers(),
        &url,
        topic,
        2,
        message,
        Some("google.protobuf.StringValue"),
    );
    let rows = read.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{read:?}\nlog:\n{}", stack.relay.log());
    let (first, second) = (&rows[0], &rows[1]);
    // A text key is google.protobuf.StringValue, the eighth message of
    // wrappers.proto: message indexes [7].
    assert_eq!(first["key"], json!({"value": "o-1"}), "{read}");
    assert_eq!(first["key_indexes"], json!([7]), "{read}");
    assert_eq!(second["key"], json!({"value": "o-2"}), "{read}");
    let (first, second) = (&first["value"], &second["value"]);
    // MessageToDict writes an int32 as a number, a double as one.
    assert_eq!(first["payload"], first_order_payload(), "{read}");
    assert_eq!(
        second["payload"],
        json!({"order_id": "o-2", "total_cents": 0, "tags": ["new"],
               "customer": {"id": "c-7", "vip": false}, "ratio": 1.25}),
        "{read}"
    );
    // confluent.type.Decimal: the unscaled two's-complement bytes (1234 is
    // 0x04D2, -5 0xFB), BigDecimal's precision of the value, the scale.
    assert_eq!(
        first["amount"],
        json!({"value": "BNI=", "precision": 4, "scale": 2}),
        "{read}"
    );
    assert_eq!(
        second["amount"],
        json!({"value": "+w==", "precision": 1, "scale": 2}),
        "{read}"
    );
    assert_eq!(first["ref"], "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11");
    let placed = first["placed_at"].as_str().expect("a string");
    assert_eq!(
        humantime::parse_rfc3339(placed).ok(),
        Some(humantime::parse_rfc3339("2026-12-06T09:15:30.123456Z").unwrap()),
        "the same instant, in UTC: {placed}"
    );
    assert_eq!(
        (&second["placed_at"], &second["ref"]),
        (&json!(""), &json!(""))
    );

    // Registered as PROTOBUF, once per subject, the message in the package
    // its Connect name gives, the decimal's file imported.
    for subject in [format!("{topic}-value"), format!("{topic}-key")] {
        let (_, versions) = registry.get(&format!("/subjects/{subject}/versions"));
        assert_eq!(versions.trim(), "[1]", "{subject}");
    }
    let (status, latest) = registry.get(&format!("/subjects/{topic}-value/versions/latest"));
    assert_eq!(status, 200, "{latest}");
    let latest: Value = serde_json::from_str(&latest).unwrap();
    assert_eq!(latest["schemaType"], "PROTOBUF", "{latest}");
    let text = latest["schema"].as_str().unwrap();
    assert!(
        text.starts_with(
            "syntax = \"proto3\";\npackage shop.public.outbox.ProtoPlaced;\n\n\
             import \"confluent/type/decimal.proto\";\n\nmessage Value {\n"
        ),
        "{text}"
    );

    // The wire format: magic byte 0, the id, the message indexes (the first
    // message: one 0), then the message.
    let (_, key_latest) = registry.get(&format!("/subjects/{topic}-key/versions/latest"));
    let key_latest: Value = serde_json::from_str(&key_latest).unwrap();
    let (id, key_id) = (
        latest["id"].as_i64().unwrap() as i32,
        key_latest["id"].as_i64().unwrap() as i32,
    );
    let reader = stack.broker.consumer();
    reader.subscribe(&[topic]);
    for record in reader.read(2, WAIT) {
        let value = record.raw_value.as_ref().unwrap();
        assert_eq!(value[0], 0, "the magic byte");
        assert_eq!(i32::from_be_bytes(value[1..5].try_into().unwrap()), id);
        assert_eq!(value[5], 0, "message indexes [0]");
        let key = record.raw_key.as_ref().unwrap();
        let aggregate = &key[key.len() - 3..];
        let mut expected = vec![0];
        expected.extend_from_slice(&key_id.to_be_bytes());
        // [7], then StringValue's field 1: 0a, the length, the text.
        expected.extend_from_slice(&[0x02, 0x0e, 0x0a, 0x03]);
        expected.extend_from_slice(aggregate);
        assert_eq!(key, &expected);
    }
}

/// `walrelay check` speaks PROTOBUF to the registry for `--value-format
/// protobuf`: the payload column's schema (a jsonb's Connect string, so
/// wrappers.proto's StringValue) passes beside the same schema and fails
/// beside a message whose field 1 is no string, under BACKWARD; with
/// `--schema-registry-use-latest-version` it passes while the latest
/// version is that schema and fails once it is another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walrelay_check_dry_runs_the_protobuf_schema_and_the_latest_version_against_the_subject() {
    let registry = SchemaRegistry::start();
    let pg = support::Postgres::start();
    let broker = support::Broker::start();
    pg.client_with_outbox().await;
    let args: Vec<String> = [
        "--pg-url",
        &pg.url(),
        "--kafka-brokers",
        &broker.brokers(),
        "--value-format",
        "protobuf",
        "--schema-registry-url",
        &registry.url(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let subject = "outbox.event.WalrelayCheck-value";
    let compatibility = |level: &str| {
        let body = json!({ "compatibility": level }).to_string();
        let (status, answer) = registry.send("PUT", &format!("/config/{subject}"), &body);
        assert_eq!(status, 200, "{answer}");
    };
    compatibility("BACKWARD");
    // A first version whose first message (DoubleValue's place) holds a
    // string where walrelay's wrappers.proto holds a double.
    let other = "syntax = \"proto3\";\npackage google.protobuf;\n\n\
                 message DoubleValue {\n  string value = 1;\n}\n";
    let body = json!({ "schemaType": "PROTOBUF", "schema": other }).to_string();
    let (status, answer) = registry.send("POST", &format!("/subjects/{subject}/versions"), &body);
    assert_eq!(status, 200, "{answer}");
    let (ok, doc, out) = support::check_json(&args);
    assert!(!ok, "{out}");
    let dry_run = support::check_entry(&doc, "registry.compatibility");
    assert_eq!(dry_run["status"], "fail", "{out}");

    // The subject's latest version made what walrelay would register: a pass.
    compatibility("NONE");
    let payload = Connect::parse(
        r#"{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1}"#,
    )
    .unwrap();
    let ours = protobuf::schema(&payload, NameAdjustment::None)
        .unwrap()
        .text;
    let ours = json!({ "schemaType": "PROTOBUF", "schema": ours }).to_string();
    let (status, answer) = registry.send("POST", &format!("/subjects/{subject}/versions"), &ours);
    assert_eq!(status, 200, "{answer}");
    compatibility("BACKWARD");
    let (_, doc, out) = support::check_json(&args);
    let dry_run = support::check_entry(&doc, "registry.compatibility");
    assert_eq!(dry_run["status"], "pass", "{out}");
    // Nothing was registered by the dry runs.
    let (_, versions) = registry.get(&format!("/subjects/{subject}/versions"));
    assert_eq!(versions.trim(), "[1,2]");

    // With use.latest.version the dry run asks whether the latest version
    // is walrelay's schema: it is (version 2), then it is not (version 3).
    let mut latest_args = args.clone();
    latest_args.extend(
        [
            "--schema-registry-auto-register",
            "false",
            "--schema-registry-use-latest-version",
        ]
        .map(String::from),
    );
    let (_, doc, out) = support::check_json(&latest_args);
    let dry_run = support::check_entry(&doc, "registry.compatibility");
    assert_eq!(dry_run["status"], "pass", "{out}");
    compatibility("NONE");
    let third = "syntax = \"proto3\";\npackage google.protobuf;\n\n\
                 message StringValue {\n  string value = 1;\n  int64 more = 2;\n}\n";
    let third = json!({ "schemaType": "PROTOBUF", "schema": third }).to_string();
    let (status, answer) = registry.send("POST", &format!("/subjects/{subject}/versions"), &third);
    assert_eq!(status, 200, "{answer}");
    let (ok, doc, out) = support::check_json(&latest_args);
    assert!(!ok, "{out}");
    let dry_run = support::check_entry(&doc, "registry.compatibility");
    assert_eq!(dry_run["status"], "fail", "{out}");
    assert!(
        dry_run["fix"]
            .as_str()
            .unwrap()
            .contains("--schema-registry-use-latest-version"),
        "{out}"
    );
}

/// JsonSchemaData gives a text key `{"type":"string"}`, which Apicurio's
/// Confluent-compatible API refuses (it takes a JSON Schema only with
/// `$schema` or `properties`). That refusal stops walrelay before the
/// event, with the registry's words, and the slot stays before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_schema_the_registry_refuses_stops_walrelay_before_the_event() {
    let registry = SchemaRegistry::start();
    let stack = Stack::start(&[
        "--value-format",
        "json-schema",
        "--key-format",
        "json-schema",
        "--expand-json-payload",
        "--schema-registry-url",
        &registry.url(),
    ])
    .await;
    let lsn = events("JsonSchemaKeyed", 1).insert(&stack.client).await;
    let mut relay = stack.relay;
    let status = relay.wait(WAIT).expect("walrelay stops");
    assert!(!status.success(), "log:\n{}", relay.log());
    let log = relay.log();
    assert!(log.contains("not from type: JSON"), "{log}");
    assert!(log.contains("JsonSchemaKeyed-key"), "{log}");
    let confirmed = confirmed_flush_lsn(&stack.client, "walrelay").await;
    assert!(confirmed < lsn, "confirmed {confirmed} past {lsn}");
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
    let quiet = promtool::firing_for(stack.relay.metrics_port, Duration::from_secs(2)).await;
    assert!(quiet.is_empty(), "healthy, yet {quiet:?} fire");
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
    let fired = promtool::firing_for(stack.relay.metrics_port, Duration::from_secs(2)).await;
    assert!(
        fired.contains("WalrelaySchemaRegistryUnreachable"),
        "{fired:?}"
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

/// Debezium 3.6.1's outbox router in Kafka Connect with Apicurio's
/// AvroConverter (io.apicurio:apicurio-registry-utils-converter:2.6.13.Final,
/// its own copy of Confluent's AvroData) set to Confluent's wire format
/// (`apicurio.registry.id-handler=…Legacy4ByteIdHandler`, ids as
/// `contentId`, which is the id Apicurio's Confluent-compatible API gives,
/// and in the value: `headers.enabled=false`),
/// and walrelay run with the command `migrate-from-debezium` prints for
/// the same file, on the same rows into the same registry: the same datum
/// decoded, the same record schema registered (with the one difference
/// named below), both framed as Confluent's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debeziums_apicurio_avro_converter_and_walrelay_agree_record_for_record() {
    use support::debezium::{Connect, Properties};
    let registry = SchemaRegistry::start();
    let pg = support::Postgres::start();
    let broker = support::Broker::apache();
    let client = pg.client().await;
    client
        .batch_execute(
            "CREATE TABLE public.avro_outbox (id uuid PRIMARY KEY, aggregatetype text NOT NULL, \
             aggregateid text NOT NULL, type text NOT NULL, payload jsonb)",
        )
        .await
        .unwrap();
    let dir = support::TempDir::new("avro-oracle");
    let file = |name: &str, prefix: &str| {
        let mut p = Properties::outbox_connector(&pg, name, "public.avro_outbox", 1);
        p.set(
            "transforms.outbox.route.topic.replacement",
            &format!("{prefix}.${{routedByValue}}"),
        )
        .set("transforms.outbox.table.expand.json.payload", "true")
        .set(
            "key.converter",
            "org.apache.kafka.connect.storage.StringConverter",
        )
        .set(
            "value.converter",
            "io.apicurio.registry.utils.converter.AvroConverter",
        )
        .set(
            "value.converter.apicurio.registry.url",
            &format!("http://127.0.0.1:{}/apis/registry/v2", registry.port),
        )
        .set("value.converter.apicurio.registry.auto-register", "true")
        // as-confluent=true alone is overridden by the converter's default
        // id handler ("Duplicate id-handler configuration" in its log, and
        // 8-byte ids): the 4-byte handler is named instead.
        .set(
            "value.converter.apicurio.registry.id-handler",
            "io.apicurio.registry.serde.Legacy4ByteIdHandler",
        )
        .set("value.converter.apicurio.registry.use-id", "contentId")
        // The id in the value, not in a header (the converter's default).
        .set("value.converter.apicurio.registry.headers.enabled", "false");
        let path = dir.0.join(format!("{name}.properties"));
        p.write(&path);
        path
    };
    let dbz = file("dbz", "dbz");
    let wr = file("wr", "wr");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_walrelay"))
        .args(["migrate-from-debezium", "--reuse-slot"])
        .arg(&wr)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (command, notes) = text.split_once("\n\n").unwrap_or((&text, ""));
    assert!(command.contains("--value-format avro"), "{text}");
    assert!(command.contains("/apis/ccompat/v7"), "{text}");
    assert!(!notes.contains("8-byte id"), "{notes}");

    let home = std::process::Command::new("scripts/apicurio.sh")
        .arg("converter")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        home.status.success(),
        "{}",
        String::from_utf8_lossy(&home.stderr)
    );
    let home = String::from_utf8(home.stdout).unwrap().trim().to_string();
    let connect = Connect::start_in(Some(std::path::Path::new(&home)), &broker, &[dbz]);
    let relay =
        support::Relay::start_shell(command.trim(), &[("KAFKA_BROKERS", &broker.brokers())]);
    relay.wait_ready(WAIT);
    eventually(WAIT, "Debezium's slot active", || async {
        let active: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'dbz' AND active",
                &[],
            )
            .await
            .ok()?
            .get(0);
        (active == 1).then_some(())
    })
    .await;

    let payloads = [
        json!({"version": 1, "order_id": "o-1", "total_cents": 1999, "tags": ["new", "gift"],
               "customer": {"id": "c-42", "vip": true}, "ratio": 0.5}),
        json!({"version": 1, "order_id": "o-2", "total_cents": 5, "tags": ["new"],
               "customer": {"id": "c-7", "vip": false}, "ratio": 1.25}),
    ];
    for (i, payload) in payloads.iter().enumerate() {
        client
            .execute(
                "INSERT INTO avro_outbox VALUES (gen_random_uuid(), 'order', $1, 'Placed', $2::text::jsonb)",
                &[&format!("o-{}", i + 1), &payload.to_string()],
            )
            .await
            .unwrap();
    }
    let brokers = broker.brokers();
    let url = registry.url();
    let theirs = read_with_confluent_kafka(&brokers, &url, "dbz.order", 2, false);
    let ours = read_with_confluent_kafka(&brokers, &url, "wr.order", 2, false);
    assert_eq!(
        ours,
        theirs,
        "decoded records differ\nConnect's log:\n{}\nwalrelay's log:\n{}",
        connect.log(),
        relay.log()
    );
    assert_eq!(theirs[0]["value"], payloads[0]);

    // The registered schemas, and the ids in the records.
    let schema = |subject: &str| -> Value {
        let (status, body) = registry.get(&format!("/subjects/{subject}/versions/latest"));
        assert_eq!(status, 200, "{subject}: {body}");
        let latest: Value = serde_json::from_str(&body).unwrap();
        serde_json::from_str(latest["schema"].as_str().unwrap()).unwrap()
    };
    // One deliberate difference: the expanded payload's Connect schema is
    // optional, and Confluent's AvroConverter registers what
    // AvroData.fromConnectSchema gives for it, ["null", record]
    // (AvroConverter.fromConnectData: `new AvroSchema(avroSchema)`), which
    // walrelay follows; Apicurio's converter registers the datum's own
    // schema, the record. The record itself is the same, property for
    // property, so each side's consumers decode the other's records alike
    // (above), and under BACKWARD the union may follow the record.
    let dbz_schema = schema("dbz.order-value");
    assert_eq!(schema("wr.order-value"), json!(["null", dbz_schema]));
    let reader = broker.consumer();
    reader.subscribe(&["dbz.order", "wr.order"]);
    let records = reader.read(4, WAIT);
    assert_eq!(records.len(), 4);
    for record in &records {
        // Both in Confluent's framing: magic byte 0, then a 4-byte id.
        assert_eq!(record.raw_value.as_ref().unwrap()[0], 0, "{}", record.topic);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_registration_locked_down_walrelay_looks_schemas_up_and_an_unregistered_one_is_poison()
{
    let registry = SchemaRegistry::start();
    // The jsonb payload column's Connect schema (io.debezium.data.Json, a
    // string) as AvroData writes it, registered ahead as an operator would.
    let avro = r#"{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Json"}"#;
    let body = json!({ "schema": avro }).to_string();
    let (status, answer) = registry.send(
        "POST",
        "/subjects/outbox.event.AvroLocked-value/versions",
        &body,
    );
    assert_eq!(status, 200, "{answer}");
    let id = serde_json::from_str::<Value>(&answer).unwrap()["id"]
        .as_i64()
        .unwrap() as i32;
    let url = registry.url();
    let stack = Stack::start(&[
        "--value-format",
        "avro",
        "--schema-registry-url",
        &url,
        "--schema-registry-auto-register",
        "false",
        "--on-poison",
        "dead-letter",
    ])
    .await;
    events("AvroLocked", 1)
        .payload(r#"{"locked": true}"#)
        .insert(&stack.client)
        .await;
    events("AvroUnregistered", 1)
        .id("00000000-0000-0000-0000-0000000000d1")
        .insert(&stack.client)
        .await;

    let read = read_with_confluent_kafka(
        &stack.broker.brokers(),
        &url,
        "outbox.event.AvroLocked",
        1,
        false,
    );
    // io.debezium.data.Json is the JSON text, as Debezium writes it.
    assert_eq!(read[0]["value"], json!(r#"{"locked": true}"#));
    let reader = stack.broker.consumer();
    reader.subscribe(&["outbox.event.AvroLocked"]);
    let raw = reader.read(1, WAIT);
    let value = raw[0].raw_value.as_ref().unwrap();
    assert_eq!(i32::from_be_bytes(value[1..5].try_into().unwrap()), id);

    let dead = stack.broker.consumer();
    dead.subscribe(&["walrelay.dead-letter"]);
    let dead = dead.read(1, WAIT);
    assert_eq!(dead.len(), 1, "log:\n{}", stack.relay.log());
    let reason = dead[0].header("walrelay.reason").unwrap();
    assert!(reason.contains("auto-registration is off"), "{reason}");
    // Nothing was registered.
    let (status, _) = registry.get("/subjects/outbox.event.AvroUnregistered-value/versions");
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_use_latest_version_walrelay_writes_under_the_latest_id_only_when_it_is_its_schema() {
    let registry = SchemaRegistry::start();
    let subject = "/subjects/outbox.event.AvroLatest-value/versions";
    let register = |avro: &str| {
        let (status, answer) =
            registry.send("POST", subject, &json!({ "schema": avro }).to_string());
        assert_eq!(status, 200, "{answer}");
        serde_json::from_str::<Value>(&answer).unwrap()["id"]
            .as_i64()
            .unwrap() as i32
    };
    register(r#""string""#);
    let latest =
        register(r#"{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Json"}"#);
    // Another subject whose latest version is a record: walrelay's string
    // bytes under its id would be read as that record, wrongly.
    let (status, answer) = registry.send(
        "POST",
        "/subjects/outbox.event.AvroNotLatest-value/versions",
        &json!({ "schema": r#"{"type":"record","name":"Old","fields":[{"name":"a","type":"int"}]}"# })
            .to_string(),
    );
    assert_eq!(status, 200, "{answer}");
    let url = registry.url();
    let stack = Stack::start(&[
        "--value-format",
        "avro",
        "--schema-registry-url",
        &url,
        "--schema-registry-auto-register",
        "false",
        "--schema-registry-use-latest-version",
        "--on-poison",
        "dead-letter",
    ])
    .await;
    events("AvroLatest", 2).insert(&stack.client).await;
    events("AvroNotLatest", 1).insert(&stack.client).await;
    let reader = stack.broker.consumer();
    reader.subscribe(&["outbox.event.AvroLatest"]);
    for record in reader.read(2, WAIT) {
        let value = record.raw_value.unwrap();
        assert_eq!(i32::from_be_bytes(value[1..5].try_into().unwrap()), latest);
    }
    let (_, versions) = registry.get(subject);
    assert_eq!(versions.trim(), "[1,2]", "nothing registered");
    // The event of the other subject is not written under the record's id:
    // it is poison, with the reason and the fix.
    let dead = stack.broker.consumer();
    dead.subscribe(&["walrelay.dead-letter"]);
    let dead = dead.read(1, WAIT);
    assert_eq!(dead.len(), 1, "log:\n{}", stack.relay.log());
    let reason = dead[0].header("walrelay.reason").unwrap();
    assert!(
        reason.contains("is not the schema walrelay writes by"),
        "{reason}"
    );
    let other = stack.broker.consumer();
    other.subscribe(&["outbox.event.AvroNotLatest"]);
    assert!(other.read(1, Duration::from_secs(3)).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_over_tls_is_used_with_its_ca_file_and_refused_without_it() {
    let registry = SchemaRegistry::start_tls();
    let ca = registry.ca.clone().unwrap();
    let url = registry.url();
    let pg = support::Postgres::start();
    let broker = support::Broker::start();
    pg.client_with_outbox().await;
    let check = |ca: Option<&str>| {
        let mut args: Vec<String> = [
            "--pg-url",
            &pg.url(),
            "--kafka-brokers",
            &broker.brokers(),
            "--value-format",
            "avro",
            "--schema-registry-url",
            &url,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if let Some(ca) = ca {
            args.extend(["--schema-registry-ca-file".to_string(), ca.to_string()]);
        }
        let (_, doc, out) = support::check_json(&args);
        (
            support::check_entry(&doc, "registry.reachable").clone(),
            out,
        )
    };
    let (reachable, out) = check(None);
    assert_eq!(reachable["status"], "fail", "{out}");
    assert!(
        reachable["detail"].as_str().unwrap().contains("TLS"),
        "{out}"
    );
    let (reachable, out) = check(Some(ca.to_str().unwrap()));
    assert_eq!(reachable["status"], "pass", "{out}");

    let relay = support::Relay::start_with(
        &pg,
        &broker,
        &[
            "--value-format",
            "avro",
            "--schema-registry-url",
            &url,
            "--schema-registry-ca-file",
            ca.to_str().unwrap(),
        ],
    );
    relay.wait_ready(WAIT);
    let client = pg.client().await;
    events("AvroTls", 1).insert(&client).await;
    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.AvroTls"]);
    let got = reader.read(1, WAIT);
    assert_eq!(got.len(), 1, "log:\n{}", relay.log());
    assert_eq!(got[0].raw_value.as_ref().unwrap()[0], 0);
    assert_eq!(
        relay.metric("walrelay_schema_registry_reachable"),
        Some(1.0)
    );
}

/// A URL that misses the registry's API path answers every request with a
/// 404 of its web server's own, not a registry's "subject not found": that
/// is no event's fault, so walrelay stops naming the URL instead of
/// dead-lettering the whole stream, and the event waits in the slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_without_the_registrys_api_path_stops_walrelay_rather_than_dead_letter_every_event() {
    let registry = SchemaRegistry::start();
    let root = registry.url().replace("/apis/ccompat/v7", "");
    let stack = Stack::start(&[
        "--value-format",
        "avro",
        "--schema-registry-url",
        &root,
        "--on-poison",
        "dead-letter",
    ])
    .await;
    let lsn = events("AvroNowhere", 2).insert(&stack.client).await;
    let mut relay = stack.relay;
    let status = relay.wait(WAIT).expect("walrelay stops");
    assert_eq!(status.code(), Some(1), "log:\n{}", relay.log());
    let log = relay.log();
    assert!(log.contains("--schema-registry-url"), "{log}");
    assert!(log.contains("/apis/ccompat/v7"), "{log}");
    let dead = stack.broker.consumer();
    assert!(
        !dead.has_topic("walrelay.dead-letter"),
        "events were dead-lettered for the URL's fault"
    );
    let confirmed = confirmed_flush_lsn(&stack.client, "walrelay").await;
    assert!(confirmed < lsn, "confirmed {confirmed} past {lsn}");
}

/// Apicurio behind an identity provider (Quarkus OIDC checking every call's
/// bearer token against the provider's key set): walrelay logs in with
/// client credentials, asks for a token once and reuses it, and what it
/// writes is read by confluent-kafka's own OAUTHBEARER client against the
/// same provider. A wrong secret fails `walrelay check`'s login check and
/// stops `run` before the slot moves, without the secret in any output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_behind_oidc_is_used_with_client_credentials_and_a_wrong_secret_is_refused() {
    const SECRET: &str = "registry-client-s3cret";
    let idp = IdentityProvider::start("walrelay-registry", SECRET);
    let registry = SchemaRegistry::start_oidc(&idp.jwks_url(), ISSUER);
    // The set-up is real: without a token the registry refuses.
    let (status, body) = registry.get("/subjects");
    assert_eq!(status, 401, "{body}");

    let login = |secret: &str| -> Vec<String> {
        [
            "--schema-registry-oauth-token-url",
            &idp.token_url(),
            "--schema-registry-oauth-client-id",
            "walrelay-registry",
            "--schema-registry-oauth-client-secret",
            secret,
            "--schema-registry-oauth-scope",
            "schema_registry",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let good = login(SECRET);
    let good: Vec<&str> = good.iter().map(String::as_str).collect();
    let stack = stack_with(&registry, &good).await;
    events("AvroOidc", 3)
        .payload(r#"{"signed": true}"#)
        .insert(&stack.client)
        .await;
    // confluent-kafka's SchemaRegistryClient fetches its own token from the
    // same provider (bearer.auth.credentials.source=OAUTHBEARER).
    let reader = json!({
        "url": registry.url(),
        "bearer.auth.credentials.source": "OAUTHBEARER",
        "bearer.auth.issuer.endpoint.url": idp.token_url(),
        "bearer.auth.client.id": "walrelay-registry",
        "bearer.auth.client.secret": SECRET,
        "bearer.auth.scope": "schema_registry",
        "bearer.auth.logical.cluster": "lsrc-test",
    });
    let read = read_with_confluent_kafka(
        &stack.broker.brokers(),
        &reader.to_string(),
        "outbox.event.AvroOidc",
        3,
        true,
    );
    assert_eq!(read.as_array().unwrap().len(), 3, "{read}");
    assert!(read
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["value"] == json!({"signed": true})));
    // RFC 6749 section 4.4 with section 2.3.1's Basic credentials; one
    // token for walrelay's three events, its key and value subjects.
    let asked: Vec<_> = idp
        .requests()
        .into_iter()
        .filter(|r| r.form.get("scope").map(String::as_str) == Some("schema_registry"))
        .collect();
    assert!(!asked.is_empty());
    for request in &asked {
        assert_eq!(
            request.credentials,
            Some(("walrelay-registry".to_string(), SECRET.to_string()))
        );
        assert_eq!(request.form["grant_type"], "client_credentials");
    }
    let log = stack.relay.log();
    assert!(!log.contains(SECRET), "{log}");
    for token in idp.issued() {
        assert!(!log.contains(&token), "a token in the log");
    }
    // Two readers asked (walrelay and the Python one): walrelay once.
    assert!(asked.len() <= 2, "{} token requests", asked.len());

    // A wrong secret: check names the login flags; run stops before the
    // slot moves past an event it cannot write.
    let mut args = vec![
        "--pg-url".to_string(),
        stack.pg.url(),
        "--kafka-brokers".to_string(),
        stack.broker.brokers(),
        "--value-format".to_string(),
        "avro".to_string(),
        "--schema-registry-url".to_string(),
        registry.url(),
    ];
    args.extend(login("not-the-secret"));
    let (ok, doc, out) = support::check_json(&args);
    assert!(!ok, "{out}");
    let credentials = support::check_entry(&doc, "registry.credentials");
    assert_eq!(credentials["status"], "fail", "{out}");
    let detail = credentials["detail"].as_str().unwrap();
    assert!(detail.contains("invalid_client"), "{out}");
    assert!(
        credentials["fix"]
            .as_str()
            .unwrap()
            .contains("--schema-registry-oauth"),
        "{out}"
    );
    assert!(!out.contains("not-the-secret"), "{out}");
    // A bearer token the registry itself refuses (HTTP 401) fails the
    // same check, without the token in the output.
    let mut refused = args[..8].to_vec();
    refused.extend([
        "--schema-registry-bearer-token".to_string(),
        "not-a-token".to_string(),
    ]);
    let (ok, doc, out) = support::check_json(&refused);
    assert!(!ok, "{out}");
    let credentials = support::check_entry(&doc, "registry.credentials");
    assert_eq!(credentials["status"], "fail", "{out}");
    assert!(
        credentials["detail"].as_str().unwrap().contains("401"),
        "{out}"
    );
    assert!(!out.contains("not-a-token"), "{out}");

    let mut relay = stack.relay;
    assert!(relay.terminate(WAIT).success());
    let lsn = events("AvroRefused", 1).insert(&stack.client).await;
    let mut wrong = vec!["--value-format", "avro", "--schema-registry-url"];
    let url = registry.url();
    wrong.push(&url);
    let bad = login("not-the-secret");
    wrong.extend(bad.iter().map(String::as_str));
    let mut relay = support::Relay::start_with(&stack.pg, &stack.broker, &wrong);
    let status = relay.wait(WAIT).expect("walrelay stops");
    assert!(!status.success());
    let log = relay.log();
    assert!(log.contains("invalid_client"), "{log}");
    assert!(!log.contains("not-the-secret"), "{log}");
    let confirmed = confirmed_flush_lsn(&stack.client, "walrelay").await;
    assert!(confirmed < lsn, "confirmed {confirmed} past {lsn}");
}

/// Columns placed in the envelope keep their Postgres values through Avro
/// as a consumer in use decodes them: a numeric(10,2) as Avro's decimal
/// logical type (confluent-kafka gives a Decimal), a timestamptz as
/// Debezium's ZonedTimestamp string, a uuid as Debezium's Uuid string, a
/// NULL as the union's null. The expected values are the rows' own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envelope_columns_of_odd_types_decode_to_their_postgres_values_in_avro() {
    let registry = SchemaRegistry::start();
    let flags = avro_flags(&registry);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let stack = stack_with_odd_envelope_columns(&flags).await;
    stack
        .client
        .batch_execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, amount, \
               placed_at, ref) VALUES \
             ('00000000-0000-0000-0000-00000000d001', 'order', 'o-1', 'AvroTypes', '{\"n\": 1}', \
              12.34, '2026-12-06 10:15:30.123456+01', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'), \
             ('00000000-0000-0000-0000-00000000d002', 'order', 'o-2', 'AvroTypes', '{\"n\": 2}', \
              -0.05, NULL, NULL)",
        )
        .await
        .unwrap();
    let read = read_with_confluent_kafka(
        &stack.broker.brokers(),
        &registry.url(),
        "outbox.event.AvroTypes",
        2,
        true,
    );
    let rows = read.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{read}");
    let (first, second) = (&rows[0]["value"], &rows[1]["value"]);
    assert_eq!(first["payload"], json!({"n": 1}), "{read}");
    assert_eq!(first["amount"], "12.34", "a Decimal of scale 2: {read}");
    assert_eq!(second["amount"], "-0.05", "{read}");
    assert_uuid_and_instant_read_back(first, second, &read);
}

/// A stack of `stack_with_odd_envelope_columns` writing in `formats` with
/// the registry at `url`, the payload expanded, and two orders of
/// `event_type` in its outbox: an expanded payload with a nested object and
/// an array, a numeric (12.34, -0.05), a timestamptz and a uuid (the
/// second's NULL); the second order's total is `second_total`.
async fn two_orders_as(url: &str, formats: &[&str], event_type: &str, second_total: i64) -> Stack {
    let mut flags = formats.to_vec();
    flags.extend(["--expand-json-payload", "--schema-registry-url", url]);
    let stack = stack_with_odd_envelope_columns(&flags).await;
    let statement = "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, \
           amount, placed_at, ref) VALUES \
         (gen_random_uuid(), 'order', 'o-1', $1, $2::text::jsonb, 12.34, \
          '2026-12-06 10:15:30.123456+01', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'), \
         (gen_random_uuid(), 'order', 'o-2', $1, $3::text::jsonb, -0.05, NULL, NULL)";
    let first = first_order_payload().to_string();
    let second = json!({"order_id": "o-2", "total_cents": second_total, "tags": ["new"],
                        "customer": {"id": "c-7", "vip": false}, "ratio": 1.25})
    .to_string();
    stack
        .client
        .execute(statement, &[&event_type, &first, &second])
        .await
        .unwrap();
    stack
}

/// The payload of the first order `two_orders_as` writes.
fn first_order_payload() -> Value {
    json!({"order_id": "o-1", "total_cents": 1999, "tags": ["new", "gift"],
           "customer": {"id": "c-42", "vip": true}, "ratio": 0.5})
}

/// A stack beside `flags` whose outbox has a numeric(10,2), a timestamptz
/// and a uuid column, placed in the envelope (named under the prefix
/// `shop`).
async fn stack_with_odd_envelope_columns(flags: &[&str]) -> Stack {
    let sql = format!(
        "{}\nALTER TABLE public.outbox ADD COLUMN amount numeric(10,2), \
         ADD COLUMN placed_at timestamptz, ADD COLUMN ref uuid;",
        support::OUTBOX_SQL
    );
    let mut flags = flags.to_vec();
    flags.extend([
        "--fields-additional-placement",
        "amount:envelope,placed_at:envelope,ref:envelope",
        "--schema-topic-prefix",
        "shop",
    ]);
    Stack::start_on(&sql, &flags).await
}

/// The envelope's uuid and timestamptz of the two rows those tests insert
/// (the second's NULL), as a consumer reads them: Debezium's Uuid string
/// and the same instant as a ZonedTimestamp string.
fn assert_uuid_and_instant_read_back(first: &Value, second: &Value, read: &Value) {
    assert_eq!(first["ref"], "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11");
    let placed = first["placed_at"].as_str().expect("a string");
    let expected = humantime::parse_rfc3339("2026-12-06T09:15:30.123456Z").unwrap();
    assert_eq!(
        humantime::parse_rfc3339(placed).ok(),
        Some(expected),
        "the same instant, in UTC: {placed}"
    );
    assert!(
        second["placed_at"].is_null() && second["ref"].is_null(),
        "{read}"
    );
}
