//! The mapping of rows to events, column by column.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::error::Error;
use crate::outbox::timestamp::parse_pg_timestamp_ms;
use crate::postgres::names::TableName;
use crate::postgres::pgoutput::{Column, Datum, Relation, Tuple};

fn relation(columns: &[(&str, u32)]) -> Relation {
    Relation {
        oid: 1,
        namespace: "public".into(),
        name: "outbox".into(),
        replica_identity: b'd',
        columns: columns
            .iter()
            .map(|(n, t)| Column {
                is_key: false,
                name: n.to_string(),
                type_oid: *t,
                type_modifier: -1,
            })
            .collect(),
    }
}

fn text(s: &str) -> Datum {
    Datum::Text(Bytes::copy_from_slice(s.as_bytes()))
}

fn table() -> TableName {
    "public.outbox".parse().unwrap()
}

/// The relation placed with no NOT NULL columns and no defaults.
fn place(rel: &Relation, config: &MappingConfig) -> Result<OutboxSchema, Error> {
    OutboxSchema::from_relation(rel, config, &table(), &BTreeSet::new(), &BTreeMap::new())
}

#[test]
fn columns_are_found_by_name_in_any_order() {
    let rel = relation(&[
        ("payload", 3802),
        ("extra", 25),
        ("event_type", 25),
        ("aggregate_id", 25),
        ("id", 2950),
    ]);
    let schema = place(&rel, &MappingConfig::defaults()).unwrap();
    let event = schema
        .row_event(vec![
            text("{}"),
            Datum::Null,
            text("OrderPlaced"),
            text("42"),
            text("e-1"),
        ])
        .unwrap();
    assert_eq!(event.id.as_deref(), Some(&b"e-1"[..]));
    assert_eq!(event.key.as_deref(), Some(&b"42"[..]));
    assert_eq!(event.route_value.as_deref(), Some(&b"OrderPlaced"[..]));
    assert_eq!(event.payload.as_deref(), Some(&b"{}"[..]));
}

#[test]
fn a_missing_column_is_named_in_the_error() {
    let rel = relation(&[
        ("id", 2950),
        ("aggregate_id", 25),
        ("kind", 25),
        ("payload", 3802),
    ]);
    let err = place(&rel, &MappingConfig::defaults()).unwrap_err();
    assert!(err.to_string().contains("\"event_type\""), "{err}");
}

#[test]
fn a_bad_partition_value_names_the_event() {
    let mut config = MappingConfig::defaults();
    config.placements.push("shard:partition".parse().unwrap());
    let rel = relation(&[
        ("id", 25),
        ("aggregate_id", 25),
        ("event_type", 25),
        ("payload", 3802),
        ("shard", 25),
    ]);
    let schema = place(&rel, &config).unwrap();
    let err = schema
        .row_event(vec![
            text("e-9"),
            text("k"),
            text("T"),
            text("{}"),
            text("west"),
        ])
        .unwrap_err();
    assert_eq!(err.event.id_text(), "e-9");
    assert!(err.reason.contains("not a partition number"));
}

mod arbitrary_rows {
    //! Whatever text a writer puts into any mapped column, mapping gives
    //! an event or a reason, never a panic.
    use super::*;
    use proptest::prelude::*;

    /// Text that looks like what the parsers expect, and anything at all.
    fn column_text() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            "[0-9 :.+T-]{0,40}".prop_map(String::into_bytes),
            "[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9é]{0,8}[+-][0-9é:]{0,6}"
                .prop_map(String::into_bytes),
            "-?[0-9]{1,25}".prop_map(String::into_bytes),
            any::<String>().prop_map(String::into_bytes),
            proptest::collection::vec(any::<u8>(), 0..64),
        ]
    }

    fn datum() -> impl Strategy<Value = Datum> {
        prop_oneof![
            8 => column_text().prop_map(|t| Datum::Text(Bytes::from(t))),
            1 => Just(Datum::Null),
            1 => Just(Datum::UnchangedToast),
        ]
    }

    fn schema(timestamp_oid: u32, payload_oid: u32) -> OutboxSchema {
        let rel = relation(&[
            ("id", 25),
            ("aggregate_id", 25),
            ("event_type", 25),
            ("payload", payload_oid),
            ("ts", timestamp_oid),
            ("shard", 23),
            ("tenant", 25),
            ("amount", 701),
            ("flag", 16),
        ]);
        let mut config = MappingConfig::defaults();
        config.timestamp = Some("ts".into());
        config.placements = [
            "shard:partition",
            "tenant:header",
            "amount:envelope",
            "flag:envelope:f",
        ]
        .iter()
        .map(|p| p.parse().unwrap())
        .collect();
        place(&rel, &config).unwrap()
    }

    proptest! {
        #[test]
        fn any_column_text_maps_to_an_event_or_a_reason(
            row in proptest::collection::vec(datum(), 7..11),
            timestamp_oid in prop_oneof![Just(1184u32), Just(1114), Just(20), Just(25)],
            payload_oid in prop_oneof![Just(3802u32), Just(114), Just(25)],
        ) {
            match schema(timestamp_oid, payload_oid).row_event(row) {
                Ok(event) => prop_assert!(event.partition.is_none_or(|p| p >= 0)),
                Err(e) => prop_assert!(!e.reason.is_empty()),
            }
        }

        #[test]
        fn any_timestamp_text_parses_or_is_refused(text in "\\PC{0,40}") {
            let _ = parse_pg_timestamp_ms(&text);
        }

        #[test]
        fn any_message_content_maps_to_an_event_or_a_reason(
            content in column_text(),
            route_by in "[a-z_]{1,12}",
        ) {
            let _ = crate::outbox::message::event_from_message(&content, &route_by, Some("tracingspancontext"));
        }

        #[test]
        fn any_route_by_value_gives_a_topic_or_a_reason(value in any::<String>()) {
            let router = crate::outbox::routing::Router::new(
                crate::outbox::routing::DEFAULT_REGEX,
                "outbox.event.${routedByValue}",
            ).unwrap();
            if let Ok(topic) = router.topic(&value) {
                prop_assert!(crate::outbox::routing::validate_topic(&topic).is_ok());
            }
        }
    }
}

/// The router's column names: key aggregateid, route-by aggregatetype, no event type.
fn debezium_config() -> MappingConfig {
    let mut c = MappingConfig::defaults();
    c.key = "aggregateid".into();
    c.route_by = "aggregatetype".into();
    c.event_type = None;
    c
}

/// Debezium's documented outbox table: id, aggregatetype, aggregateid, type, payload.
fn debezium(config: impl FnOnce(&mut MappingConfig)) -> OutboxSchema {
    let mut c = debezium_config();
    config(&mut c);
    let rel = relation(&[
        ("id", 2950),
        ("aggregatetype", 25),
        ("aggregateid", 25),
        ("type", 25),
        ("payload", 3802),
    ]);
    place(&rel, &c).unwrap()
}

fn row(payload: Option<&str>) -> Tuple {
    vec![
        text("e-1"),
        text("order"),
        text("1"),
        text("OrderCreated"),
        payload.map_or(Datum::Null, text),
    ]
}

#[test]
fn without_an_event_type_column_the_event_has_no_type() {
    let event = debezium(|_| {}).row_event(row(Some("{}"))).unwrap();
    assert_eq!(event.header("event_type"), None);
    assert_eq!(event.key.as_deref(), Some(&b"1"[..]));
}

#[test]
fn json_formats_quote_the_key_and_the_payload_string() {
    let schema = debezium(|c| {
        c.key_format = Format::Json;
        c.value_format = Format::Json;
    });
    let event = schema.row_event(row(Some(r#"{"a": 1}"#))).unwrap();
    assert_eq!(event.key.as_deref(), Some(&b"\"1\""[..]));
    assert_eq!(event.payload.as_deref(), Some(&br#""{\"a\": 1}""#[..]));
    let null = schema.row_event(row(None)).unwrap();
    assert_eq!(null.payload.as_deref(), Some(&b"null"[..]));
}

#[test]
fn json_with_schema_wraps_key_and_value_in_the_columns_schemas() {
    let mut c = debezium_config();
    c.key_format = Format::JsonWithSchema;
    c.value_format = Format::JsonWithSchema;
    let rel = relation(&[
        ("id", 2950),
        ("aggregatetype", 25),
        ("aggregateid", 25),
        ("type", 25),
        ("payload", 3802),
    ]);
    let not_null: BTreeSet<String> = ["aggregateid".to_string()].into();
    let schema =
        OutboxSchema::from_relation(&rel, &c, &table(), &not_null, &BTreeMap::new()).unwrap();
    let event = schema.row_event(row(Some(r#"{"a": 1}"#))).unwrap();
    assert_eq!(
        event.key.as_deref(),
        Some(&br#"{"schema":{"type":"string","optional":false},"payload":"1"}"#[..])
    );
    assert_eq!(
        event.payload.as_deref(),
        Some(
            &br#"{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"payload":"{\"a\": 1}"}"#[..]
        )
    );

    c.placements
        .push("type:envelope:eventType".parse().unwrap());
    c.schema_topic_prefix = Some("dbserver1".into());
    let schema =
        OutboxSchema::from_relation(&rel, &c, &table(), &not_null, &BTreeMap::new()).unwrap();
    let event = schema.row_event(row(None)).unwrap();
    assert_eq!(
        std::str::from_utf8(event.payload.as_deref().unwrap()).unwrap(),
        "{\"schema\":{\"type\":\"struct\",\"fields\":[{\"type\":\"string\",\"optional\":true,\
         \"name\":\"io.debezium.data.Json\",\"version\":1,\"field\":\"payload\"},\
         {\"type\":\"string\",\"optional\":true,\"field\":\"eventType\"}],\"optional\":false,\
         \"name\":\"dbserver1.public.outbox.order.Value\"},\
         \"payload\":{\"payload\":null,\"eventType\":\"OrderCreated\"}}"
    );
}

#[test]
fn json_with_schema_refuses_a_column_type_it_cannot_describe() {
    let mut c = MappingConfig::defaults();
    c.value_format = Format::JsonWithSchema;
    c.payload = "body".into();
    let rel = relation(&[
        ("id", 25),
        ("aggregate_id", 25),
        ("event_type", 25),
        ("body", 142),
    ]);
    let err = place(&rel, &c).unwrap_err();
    assert!(err.to_string().contains("\"body\""), "{err}");
}

#[test]
fn an_envelope_placement_of_a_missing_column_still_makes_an_envelope() {
    let schema = debezium(|c| {
        c.placements.push("region:envelope".parse().unwrap());
        c.ignore_missing_placements = true;
    });
    let event = schema.row_event(row(Some("{}"))).unwrap();
    assert_eq!(event.payload.as_deref(), Some(&br#"{"payload":"{}"}"#[..]));
}

#[test]
fn bytea_keys_and_payloads_are_decoded_and_bad_hex_names_the_event() {
    let mut c = MappingConfig::defaults();
    c.event_type = None;
    let rel = relation(&[
        ("id", 25),
        ("aggregate_id", 17),
        ("event_type", 25),
        ("payload", 17),
    ]);
    let schema = place(&rel, &c).unwrap();
    let event = schema
        .row_event(vec![text("e-1"), text("\\x00ff"), text("T"), text("\\x5c")])
        .unwrap();
    assert_eq!(event.key.as_deref(), Some(&[0x00, 0xff][..]));
    assert_eq!(event.payload.as_deref(), Some(&b"\\"[..]));
    let err = schema
        .row_event(vec![text("e-2"), text("\\x0"), text("T"), text("\\x")])
        .unwrap_err();
    assert_eq!(err.event.id_text(), "e-2");
    assert!(err.reason.contains("key column"), "{}", err.reason);
}

#[test]
fn the_trace_context_column_becomes_the_first_headers_and_is_optional() {
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let rel = relation(&[
        ("id", 25),
        ("aggregate_id", 25),
        ("event_type", 25),
        ("payload", 3802),
        ("tracingspancontext", 1043),
    ]);
    let schema = place(&rel, &MappingConfig::defaults()).unwrap();
    let row = |context: Datum| vec![text("e-1"), text("k"), text("T"), text("{}"), context];
    let event = schema
        .row_event(row(text(&format!(
            "#Mon Nov 30 2026\ntraceparent={parent}\n"
        ))))
        .unwrap();
    let names: Vec<&str> = event.headers.iter().map(|(n, _)| n.as_ref()).collect();
    assert_eq!(names, ["traceparent", "id", "event_type"]);
    assert_eq!(event.header("traceparent"), Some(parent.as_bytes()));
    assert_eq!(
        event.payload.as_deref(),
        Some(&b"{}"[..]),
        "not in the value"
    );
    // NULL, or malformed: the same event, without trace headers.
    for context in [Datum::Null, text("traceparent=00-zz"), text("")] {
        let event = schema.row_event(row(context)).unwrap();
        assert_eq!(event.header("traceparent"), None);
        assert_eq!(event.id_text(), "e-1");
    }
    // Turned off: the column is not read.
    let mut off = MappingConfig::defaults();
    off.tracing_span_context = None;
    let schema = place(&rel, &off).unwrap();
    let event = schema
        .row_event(row(text(&format!("traceparent={parent}"))))
        .unwrap();
    assert_eq!(event.header("traceparent"), None);
}

#[test]
fn a_table_without_the_trace_context_column_maps_without_trace_headers() {
    let event = debezium(|c| c.tracing_span_context = Some("tracingspancontext".into()))
        .row_event(row(Some("{}")))
        .unwrap();
    assert_eq!(event.header("traceparent"), None);
    assert_eq!(event.headers.len(), 1, "only id: {:?}", event.headers);
}

#[test]
fn extended_headers_come_before_the_trace_context_and_the_routers_headers() {
    // EventDispatcher puts them on the change record; ActivateTracingSpan
    // then adds the trace headers and EventRouterDelegate.apply `id` and the
    // placed headers after them.
    let rel = relation(&[
        ("id", 25),
        ("aggregatetype", 25),
        ("aggregateid", 25),
        ("payload", 3802),
        ("tracingspancontext", 1043),
        ("type", 25),
    ]);
    let mut c = debezium_config();
    c.placements.push("type:header:eventType".parse().unwrap());
    c.extended_headers = Some(ExtendedHeaders::new("dbserver1", "run-1"));
    let schema = place(&rel, &c).unwrap();
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let event = schema
        .row_event(vec![
            text("e-1"),
            text("order"),
            text("1"),
            text("{}"),
            text(&format!("traceparent={parent}")),
            text("Created"),
        ])
        .unwrap();
    let names: Vec<&str> = event.headers.iter().map(|(n, _)| n.as_ref()).collect();
    assert_eq!(
        names,
        [
            "__debezium.context.connectorLogicalName",
            "__debezium.context.taskId",
            "__debezium.context.connectorName",
            "__debezium.context.runId",
            "traceparent",
            "id",
            "eventType"
        ]
    );
    assert_eq!(
        event.header("__debezium.context.connectorLogicalName"),
        Some(&b"dbserver1"[..])
    );
}

#[test]
fn a_null_column_with_a_default_reads_as_the_default_where_struct_get_reads_it() {
    // Kafka Connect's Struct.get(field) returns the schema's default for a
    // null value; EventRouterDelegate reads id, key, payload and placed
    // fields with it, the route-by value with getString (no default).
    let rel = relation(&[
        ("id", 25),
        ("aggregatetype", 25),
        ("aggregateid", 25),
        ("payload", 3802),
        ("region", 25),
        ("n", 23),
    ]);
    let mut c = debezium_config();
    c.placements.push("region:header".parse().unwrap());
    c.placements.push("n:envelope".parse().unwrap());
    c.value_format = Format::JsonWithSchema;
    c.schema_topic_prefix = Some("p".into());
    let defaults: BTreeMap<String, String> = [
        ("aggregateid", "'k0'::text"),
        ("aggregatetype", "'order'::text"),
        ("payload", "'{}'::jsonb"),
        ("region", "'eu'::text"),
        ("n", "7"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let schema =
        OutboxSchema::from_relation(&rel, &c, &table(), &BTreeSet::new(), &defaults).unwrap();
    let event = schema
        .row_event(vec![
            text("e-1"),
            Datum::Null,
            Datum::Null,
            Datum::Null,
            Datum::Null,
            Datum::Null,
        ])
        .unwrap();
    assert_eq!(event.key.as_deref(), Some(&b"k0"[..]));
    assert_eq!(event.header("region"), Some(&b"eu"[..]));
    assert_eq!(event.route_value, None, "getString gives no default");
    let value = String::from_utf8(event.payload.unwrap().to_vec()).unwrap();
    assert!(
        value.ends_with(r#""payload":{"payload":"{}","n":7}}"#),
        "{value}"
    );
    // TableSchemaBuilder puts the default into the field's schema; asJsonSchema writes it last.
    assert!(
        value.contains(
            r#"{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"default":"{}","field":"payload"}"#
        ),
        "{value}"
    );
    assert!(
        value.contains(r#"{"type":"int32","optional":true,"default":7,"field":"n"}"#),
        "{value}"
    );
}

#[test]
fn the_schema_version_column_versions_the_envelope_schema() {
    // EventRouterDelegate.getValueSchema(…, getInt32(version field), …):
    // SchemaBuilder.version, which asJsonSchema writes after the name; a
    // NULL is no version.
    let rel = relation(&[
        ("id", 25),
        ("aggregatetype", 25),
        ("aggregateid", 25),
        ("payload", 3802),
        ("v", 23),
    ]);
    let mut c = debezium_config();
    c.placements.push("v:envelope".parse().unwrap());
    c.value_format = Format::JsonWithSchema;
    c.schema_topic_prefix = Some("p".into());
    c.schema_version = Some("v".into());
    let schema = place(&rel, &c).unwrap();
    let value = |v: Datum| {
        let row = vec![text("e-1"), text("order"), text("1"), text("{}"), v];
        String::from_utf8(schema.row_event(row).unwrap().payload.unwrap().to_vec()).unwrap()
    };
    assert!(
        value(text("3"))
            .contains(r#""optional":false,"name":"p.public.outbox.order.Value","version":3}"#),
        "{}",
        value(text("3"))
    );
    assert!(value(Datum::Null).contains(r#""name":"p.public.outbox.order.Value"},"#));
    // Another type is refused when the relation is placed.
    let rel = relation(&[
        ("id", 25),
        ("aggregatetype", 25),
        ("aggregateid", 25),
        ("payload", 3802),
        ("v", 20),
    ]);
    let err = place(&rel, &c).unwrap_err();
    assert!(err.to_string().contains("INT32"), "{err}");
}
