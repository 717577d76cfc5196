//! `--key-format json` and `--value-format json` write what Kafka Connect's
//! JsonConverter with schemas.enable=false writes (apache/kafka
//! connect/json/.../JsonConverter.java `convertToJson`, serialized by
//! JsonSerializer's default ObjectMapper: compact). The documented examples
//! are outbox-event-router.adoc's "Expanding escaped JSON String as JSON":
//! key `"1"`, value the payload as an escaped JSON string, or, with
//! table.expand.json.payload=true, the JSON itself.

use std::time::Duration;

use crate::support::kafka::Received;
use crate::support::Stack;
use crate::DEBEZIUM_COLUMNS;

const TABLE: &str = "CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype text, \
                     aggregateid text, type text, payload jsonb)";

/// walrelay on TABLE with Debezium's column names, JSON keys and values and `extra`.
async fn start_json(extra: &[&str]) -> Stack {
    let mut args = DEBEZIUM_COLUMNS.to_vec();
    args.extend_from_slice(&["--key-format", "json", "--value-format", "json"]);
    args.extend_from_slice(extra);
    Stack::start_on(TABLE, &args).await
}

async fn relay_json(extra: &[&str], inserts: &str, count: usize) -> Vec<Received> {
    let stack = start_json(extra).await;
    stack.client.batch_execute(inserts).await.unwrap();
    let reader = stack.broker.consumer();
    reader.subscribe(&["outbox.event.order"]);
    let mut got = reader.read(count, Duration::from_secs(60));
    assert_eq!(got.len(), count, "log:\n{}", stack.relay.log());
    got.sort_by(|a, b| a.header("id").cmp(&b.header("id")));
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_converter_without_schemas_quotes_keys_and_payload_strings() {
    let got = relay_json(
        &[],
        "INSERT INTO outbox VALUES \
           ('00000000-0000-0000-0000-000000000071', 'order', '1', 'OrderCreated', \
            '{\"id\": 1, \"customerId\": 123}'), \
           ('00000000-0000-0000-0000-000000000072', 'order', '2', 'OrderCreated', NULL);",
        2,
    )
    .await;
    assert_eq!(got[0].key.as_deref(), Some("\"1\""));
    // jsonb is io.debezium.data.Json, a string: the value is its JSON string literal.
    assert_eq!(
        got[0].value.as_deref(),
        Some(r#""{\"id\": 1, \"customerId\": 123}""#)
    );
    // A NULL payload of an optional schema is JSON null (a NullNode, which
    // JsonSerializer writes as the text null), not a Kafka null.
    assert_eq!(got[1].key.as_deref(), Some("\"2\""));
    assert_eq!(got[1].value.as_deref(), Some("null"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expanded_payloads_are_compact_json_without_null_fields_or_empty_arrays() {
    let got = relay_json(
        &["--expand-json-payload"],
        "INSERT INTO outbox VALUES \
           ('00000000-0000-0000-0000-000000000081', 'order', '1', 'OrderCreated', \
            '{\"id\": 1, \"lineItems\": [{\"id\": 1, \"totalPrice\": 39.98}], \"note\": null, \"tags\": []}'), \
           ('00000000-0000-0000-0000-000000000082', 'order', '2', 'OrderCreated', \
            '{\"mixed\": [1, \"a\"]}');",
        2,
    )
    .await;
    // JsonSchemaData.toConnectSchema leaves out null fields and empty arrays
    // under the default `ignore` behaviours.
    assert_eq!(
        got[0].value.as_deref(),
        Some(r#"{"id":1,"lineItems":[{"id":1,"totalPrice":39.98}]}"#)
    );
    // "Field is not a homogenous array": expansion fails, the string stays.
    assert_eq!(
        got[1].value.as_deref(),
        Some(r#""{\"mixed\": [1, \"a\"]}""#)
    );
}

/// A payload whose JSON gets a schema its value does not fit: Debezium's
/// router (EventRouterDelegate.apply) keeps the string but takes the new
/// schema (JsonSchemaData.toConnectData threw after toConnectSchema
/// succeeded), and JsonConverter then fails its task. walrelay stops on it
/// too, naming the event, before publishing anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expanded_payload_debezium_cannot_write_stops_walrelay_naming_the_event() {
    let mut stack = start_json(&["--expand-json-payload"]).await;
    stack
        .client
        .batch_execute(
            "INSERT INTO outbox VALUES ('00000000-0000-0000-0000-000000000091', 'order', '1', \
             'T', '{\"big\": 12345678901234567890}');",
        )
        .await
        .unwrap();
    let status = stack.relay.wait(Duration::from_secs(60));
    assert!(
        status.is_some_and(|s| !s.success()),
        "{}",
        stack.relay.log()
    );
    let log = stack.relay.log();
    assert!(
        log.contains("00000000-0000-0000-0000-000000000091"),
        "{log}"
    );
    assert!(log.contains("an integer beyond a long"), "{log}");
    assert!(!stack.broker.consumer().has_topic("outbox.event.order"));
}
