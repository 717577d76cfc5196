//! Golden tests: for outbox rows and router options, walrelay's messages
//! equal, byte for byte, what Debezium's outbox event router produces for the
//! same rows and options with Kafka Connect's StringConverter (or
//! JsonConverter without schemas for envelopes). The expected messages come
//! from debezium/debezium
//! documentation/modules/ROOT/pages/transformations/outbox-event-router.adoc
//! and debezium-connect-plugins/.../transforms/outbox/EventRouterDelegate.java
//! (`apply`): topic from route.by.field through route.topic.regex/replacement
//! (a value the regex does not match is the topic itself), key from
//! table.field.event.key, the header `id` and no other unless placed
//! ("# Kafka Message Headers: "id=4d47e190-…"" in the documented example),
//! additional placements in headers, an envelope `{"payload":…,alias:…}` in
//! configuration order or the partition, the timestamp column as the Kafka
//! timestamp, and tombstones for empty payloads when asked.
//! Each difference has its own module under debezium_router/.

mod support;

#[path = "debezium_router/binary.rs"]
mod binary;
#[path = "debezium_router/cloudevents.rs"]
mod cloudevents;
#[path = "debezium_router/converters.rs"]
mod converters;
#[path = "debezium_router/event_type.rs"]
mod event_type;
#[path = "debezium_router/extended_headers.rs"]
mod extended_headers;
#[path = "debezium_router/missing_and_tombstones.rs"]
mod missing_and_tombstones;
#[path = "debezium_router/on_update.rs"]
mod on_update;
#[path = "debezium_router/partitioning.rs"]
mod partitioning;
#[path = "debezium_router/schemas.rs"]
mod schemas;
#[path = "debezium_router/trace_context.rs"]
mod trace_context;
#[path = "debezium_router/typed_columns.rs"]
mod typed_columns;

use std::time::Duration;

use support::kafka::Received;
use support::Stack;

const WAIT: Duration = Duration::from_secs(60);

/// A Debezium-style outbox table, as users migrating bring it.
const TABLE: &str = "CREATE TABLE outbox (
    id uuid PRIMARY KEY,
    aggregatetype text,
    aggregateid text,
    type text,
    payload jsonb,
    payload_text text,
    tenant text,
    shard int,
    ts timestamptz
)";

const DEBEZIUM_COLUMNS: &[&str] = &[
    "--field-event-key",
    "aggregateid",
    "--field-event-type",
    "",
    "--route-by-field",
    "aggregatetype",
];

struct Expected {
    id: &'static str,
    topic: &'static str,
    key: Option<&'static str>,
    /// Every header besides `id`.
    headers: &'static [(&'static str, &'static str)],
    /// The value's exact text.
    value: Option<&'static str>,
    partition: Option<i32>,
    timestamp: Option<i64>,
}

/// Runs walrelay with `flags` over the rows `inserts` writes; returns what Kafka holds.
async fn relay_rows(flags: &[&str], inserts: &str, topics: &[&str], count: usize) -> Vec<Received> {
    relay_rows_and_log(flags, inserts, topics, count).await.0
}

/// `relay_rows`, and walrelay's log once the messages arrived.
async fn relay_rows_and_log(
    flags: &[&str],
    inserts: &str,
    topics: &[&str],
    count: usize,
) -> (Vec<Received>, String) {
    relay_rows_in(TABLE, flags, inserts, topics, count).await
}

/// As `relay_rows_and_log`, with the outbox table `table` creates.
async fn relay_rows_in(
    table: &str,
    flags: &[&str],
    inserts: &str,
    topics: &[&str],
    count: usize,
) -> (Vec<Received>, String) {
    let mut args = DEBEZIUM_COLUMNS.to_vec();
    args.extend_from_slice(flags);
    let stack = Stack::start_on(table, &args).await;
    stack.client.batch_execute(inserts).await.unwrap();
    let reader = stack.broker.consumer();
    reader.subscribe(topics);
    let got = reader.read(count, WAIT);
    assert_eq!(got.len(), count, "got {got:?}\nlog:\n{}", stack.relay.log());
    (got, stack.relay.log())
}

fn check(got: &[Received], expected: &[Expected]) {
    for e in expected {
        let m = got
            .iter()
            .find(|m| m.header("id") == Some(e.id))
            .unwrap_or_else(|| panic!("no message for {}: {got:?}", e.id));
        assert_eq!(m.topic, e.topic, "topic of {}", e.id);
        assert_eq!(m.key.as_deref(), e.key, "key of {}", e.id);
        for (name, value) in e.headers {
            assert_eq!(m.header(name), Some(*value), "header {name} of {}", e.id);
        }
        let mut names: Vec<&str> = m.headers.keys().map(String::as_str).collect();
        names.sort_unstable();
        let mut expected: Vec<&str> = e.headers.iter().map(|(n, _)| *n).collect();
        expected.push("id");
        expected.sort_unstable();
        assert_eq!(names, expected, "header names of {}", e.id);
        assert_eq!(m.value.as_deref(), e.value, "value of {}", e.id);
        if let Some(p) = e.partition {
            assert_eq!(m.partition, p, "partition of {}", e.id);
        }
        if let Some(ts) = e.timestamp {
            assert_eq!(m.timestamp, Some(ts), "timestamp of {}", e.id);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_router_options_route_by_aggregate_type() {
    let got = relay_rows(
        &[],
        "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES
           ('00000000-0000-0000-0000-0000000000a1', 'order', 'o-1', 'OrderCreated', '{\"total\": 10}'),
           ('00000000-0000-0000-0000-0000000000a2', 'customer', 'c-1', 'CustomerMoved', '{\"city\": \"Oslo\"}'),
           ('00000000-0000-0000-0000-0000000000a3', 'order', 'o-2', 'OrderCreated', NULL);",
        &["outbox.event.order", "outbox.event.customer"],
        3,
    )
    .await;
    check(
        &got,
        &[
            Expected {
                id: "00000000-0000-0000-0000-0000000000a1",
                topic: "outbox.event.order",
                key: Some("o-1"),
                // Debezium reads no event-type column and adds no such header.
                headers: &[],
                value: Some(r#"{"total": 10}"#),
                partition: None,
                timestamp: None,
            },
            Expected {
                id: "00000000-0000-0000-0000-0000000000a2",
                topic: "outbox.event.customer",
                key: Some("c-1"),
                headers: &[],
                value: Some(r#"{"city": "Oslo"}"#),
                partition: None,
                timestamp: None,
            },
            // A NULL payload without the tombstone option is a null value all the same.
            Expected {
                id: "00000000-0000-0000-0000-0000000000a3",
                topic: "outbox.event.order",
                key: Some("o-2"),
                headers: &[],
                value: None,
                partition: None,
                timestamp: None,
            },
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_regex_groups_shape_the_topic_and_unmatched_values_pass_through() {
    let got = relay_rows(
        &[
            "--topic-regex",
            "(?<domain>[a-z]+)_(?<kind>[a-z]+)",
            "--topic-replacement",
            "${domain}.events.$2",
        ],
        "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES
           ('00000000-0000-0000-0000-0000000000b1', 'billing_invoice', 'i-1', 'Issued', '{}'),
           ('00000000-0000-0000-0000-0000000000b2', 'Misc', 'm-1', 'Other', '{}');",
        &["billing.events.invoice", "Misc"],
        2,
    )
    .await;
    check(
        &got,
        &[
            Expected {
                id: "00000000-0000-0000-0000-0000000000b1",
                topic: "billing.events.invoice",
                key: Some("i-1"),
                headers: &[],
                value: Some("{}"),
                partition: None,
                timestamp: None,
            },
            Expected {
                id: "00000000-0000-0000-0000-0000000000b2",
                topic: "Misc",
                key: Some("m-1"),
                headers: &[],
                value: Some("{}"),
                partition: None,
                timestamp: None,
            },
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn additional_placements_fill_headers_envelope_partition_and_timestamp() {
    let got = relay_rows(
        &[
            "--fields-additional-placement",
            "type:header:eventType,tenant:envelope:tenantId,shard:partition,aggregatetype:envelope,shard:envelope",
            "--field-timestamp", "ts",
        ],
        "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, tenant, shard, ts) VALUES
           ('00000000-0000-0000-0000-0000000000c1', 'order', 'o-1', 'OrderCreated', '{\"total\": 10}', 't-7', 2, '2026-11-29 10:00:00.250+00'),
           ('00000000-0000-0000-0000-0000000000c2', 'order', 'o-2', 'OrderPaid', '[1, 2]', NULL, 0, '2026-11-29 12:30:00+02');",
        &["outbox.event.order"],
        2,
    )
    .await;
    check(
        &got,
        &[
            Expected {
                id: "00000000-0000-0000-0000-0000000000c1",
                topic: "outbox.event.order",
                key: Some("o-1"),
                headers: &[("eventType", "OrderCreated")],
                // jsonb is io.debezium.data.Json, a string, in the envelope;
                // fields follow the configuration (getSchemaBuilder).
                value: Some(
                    r#"{"payload":"{\"total\": 10}","tenantId":"t-7","aggregatetype":"order","shard":2}"#,
                ),
                partition: Some(2),
                timestamp: Some(1_795_946_400_250),
            },
            Expected {
                id: "00000000-0000-0000-0000-0000000000c2",
                topic: "outbox.event.order",
                key: Some("o-2"),
                headers: &[("eventType", "OrderPaid")],
                value: Some(
                    r#"{"payload":"[1, 2]","tenantId":null,"aggregatetype":"order","shard":0}"#,
                ),
                partition: Some(0),
                timestamp: Some(1_795_948_200_000),
            },
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_payloads_expand_into_the_envelope_and_empty_ones_become_tombstones() {
    let got = relay_rows(
        &[
            "--field-payload",
            "payload_text",
            "--fields-additional-placement",
            "tenant:envelope",
            "--expand-json-payload",
            "--tombstone-on-empty-payload",
        ],
        "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload_text, tenant) VALUES
           ('00000000-0000-0000-0000-0000000000d1', 'doc', 'd-1', 'Saved', '{\"x\": 1}', 't-1'),
           ('00000000-0000-0000-0000-0000000000d2', 'doc', 'd-2', 'Deleted', '', 't-1'),
           ('00000000-0000-0000-0000-0000000000d3', 'doc', 'd-3', 'Deleted', NULL, 't-1'),
           ('00000000-0000-0000-0000-0000000000d4', 'doc', 'd-4', 'Noted', 'not json', 't-1');",
        &["outbox.event.doc"],
        4,
    )
    .await;
    let doc = |id, key, value| Expected {
        id,
        topic: "outbox.event.doc",
        key: Some(key),
        headers: &[],
        value,
        partition: None,
        timestamp: None,
    };
    check(
        &got,
        &[
            doc(
                "00000000-0000-0000-0000-0000000000d1",
                "d-1",
                Some(r#"{"payload":{"x":1},"tenant":"t-1"}"#),
            ),
            doc("00000000-0000-0000-0000-0000000000d2", "d-2", None),
            doc("00000000-0000-0000-0000-0000000000d3", "d-3", None),
            // Text that is not JSON stays a string, as Debezium leaves it.
            doc(
                "00000000-0000-0000-0000-0000000000d4",
                "d-4",
                Some(r#"{"payload":"not json","tenant":"t-1"}"#),
            ),
        ],
    );
}
