//! `--key-format` / `--value-format json-with-schema` write what Kafka
//! Connect's JsonConverter writes with schemas.enable=true (its default) for
//! the records Debezium's outbox router makes. Sources, read for each value:
//! - apache/kafka connect/json/src/main/java/org/apache/kafka/connect/json/JsonConverter.java:
//!   `fromConnectData` (no schema and no value: a null Kafka value, the
//!   tombstone), `convertToJsonWithEnvelope` and JsonSchema.java `envelope`
//!   (`{"schema":…,"payload":…}`), `asJsonSchema` ("type"; a struct's
//!   "fields", each field's schema followed by "field"; then "optional",
//!   "name", "version"), written by Jackson without spaces; bytes are Base64.
//! - debezium/debezium debezium-core/.../transforms/outbox/EventRouterDelegate.java:
//!   the key's schema is the table.field.event.key column's
//!   (`defineRecordKeySchema`); without envelope placements the value's is
//!   the payload column's; with them a struct (`getSchemaBuilder`: not
//!   optional, `payload` then the placements in configuration order) named
//!   by `getSchemaName`: the row's value schema name
//!   `<topic.prefix>.<schema>.<table>.Value` (TableSchemaBuilder) with the
//!   route-by value before `.Value`.
//! - debezium-core/.../data/Json.java (io.debezium.data.Json: string,
//!   version 1) for jsonb; .../time/ZonedTimestamp.java (string, version 1)
//!   for timestamptz; PostgresValueConverter `schemaBuilder` (int4 INT32,
//!   text STRING, bytea BYTES); TableSchemaBuilder.addField: a nullable
//!   column's schema is optional, a NOT NULL one's is not.

use super::{check, relay_rows, relay_rows_in, Expected};

const WITH_SCHEMAS: &[&str] = &[
    "--key-format",
    "json-with-schema",
    "--value-format",
    "json-with-schema",
];

fn order(id: &'static str, key: Option<&'static str>, value: Option<&'static str>) -> Expected {
    Expected {
        id,
        topic: "outbox.event.order",
        key,
        headers: &[],
        value,
        partition: None,
        timestamp: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nullable_jsonb_payloads_and_text_keys_carry_optional_schemas() {
    let got = relay_rows(
        WITH_SCHEMAS,
        "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES
           ('00000000-0000-0000-0000-000000000501', 'order', 'o-1', 'OrderCreated', '{\"total\": 10}'),
           ('00000000-0000-0000-0000-000000000502', 'order', 'o-2', 'OrderCreated', NULL);",
        &["outbox.event.order"],
        2,
    )
    .await;
    check(
        &got,
        &[
            order(
                "00000000-0000-0000-0000-000000000501",
                Some(r#"{"schema":{"type":"string","optional":true},"payload":"o-1"}"#),
                Some(
                    r#"{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"payload":"{\"total\": 10}"}"#,
                ),
            ),
            // A NULL payload has a schema: JsonConverter writes the envelope
            // with a null payload (convertToJson of an optional schema).
            order(
                "00000000-0000-0000-0000-000000000502",
                Some(r#"{"schema":{"type":"string","optional":true},"payload":"o-2"}"#),
                Some(
                    r#"{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"payload":null}"#,
                ),
            ),
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_null_columns_carry_required_schemas() {
    let got = relay_rows_in(
        "CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype text NOT NULL, \
         aggregateid text NOT NULL, type text, payload jsonb NOT NULL)",
        WITH_SCHEMAS,
        "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES
           ('00000000-0000-0000-0000-000000000511', 'order', 'o-1', 'OrderCreated', '[1, 2]');",
        &["outbox.event.order"],
        1,
    )
    .await
    .0;
    check(
        &got,
        &[order(
            "00000000-0000-0000-0000-000000000511",
            Some(r#"{"schema":{"type":"string","optional":false},"payload":"o-1"}"#),
            Some(
                r#"{"schema":{"type":"string","optional":false,"name":"io.debezium.data.Json","version":1},"payload":"[1, 2]"}"#,
            ),
        )],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytea_payloads_are_bytes_schemas_with_base64_payloads() {
    let got = relay_rows_in(
        "CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype text, aggregateid text, \
         type text, payload bytea)",
        &["--value-format", "json-with-schema"],
        "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES
           ('00000000-0000-0000-0000-000000000521', 'order', 'o-1', 'Stored', '\\x00ff5c');",
        &["outbox.event.order"],
        1,
    )
    .await
    .0;
    // Bytes 00 ff 5c in Base64 (RFC 4648): "AP9c". The key stays StringConverter's.
    check(
        &got,
        &[order(
            "00000000-0000-0000-0000-000000000521",
            Some("o-1"),
            Some(r#"{"schema":{"type":"bytes","optional":true},"payload":"AP9c"}"#),
        )],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envelopes_are_named_structs_with_typed_fields_in_configuration_order() {
    let got = relay_rows(
        &[
            "--value-format",
            "json-with-schema",
            "--fields-additional-placement",
            "shard:envelope,ts:envelope:occurredAt",
            "--schema-topic-prefix",
            "dbserver1",
            "--tombstone-on-empty-payload",
        ],
        "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, shard, ts) VALUES
           ('00000000-0000-0000-0000-000000000531', 'order', 'o-1', 'OrderCreated', '{\"total\": 10}', 2, '2026-11-29 12:00:00.25+02'),
           ('00000000-0000-0000-0000-000000000532', 'order', 'o-2', 'OrderDeleted', NULL, 2, '2026-11-29 12:00:00+02');",
        &["outbox.event.order"],
        2,
    )
    .await;
    check(
        &got,
        &[
            // The name holds the route-by value "order" (getSchemaName's
            // routedTopic is eventStruct.getString(routeByField)), not the topic.
            order(
                "00000000-0000-0000-0000-000000000531",
                Some("o-1"),
                Some(concat!(
                    r#"{"schema":{"type":"struct","fields":["#,
                    r#"{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"payload"},"#,
                    r#"{"type":"int32","optional":true,"field":"shard"},"#,
                    r#"{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1,"field":"occurredAt"}"#,
                    r#"],"optional":false,"name":"dbserver1.public.outbox.order.Value"},"#,
                    r#""payload":{"payload":"{\"total\": 10}","shard":2,"occurredAt":"2026-11-29T10:00:00.250000Z"}}"#,
                )),
            ),
            // A tombstone has neither schema nor value: fromConnectData returns null.
            order("00000000-0000-0000-0000-000000000532", Some("o-2"), None),
        ],
    );
}

/// The schemas of expanded payloads: debezium/debezium v3.6.1.Final
/// JsonSchemaData.toConnectSchema (an optional struct named after the
/// payload column, optional fields in the document's order, int as int32)
/// and EventRouterTest.canExpandJsonPayloadWithAdditionalFieldInEnvelope
/// (the envelope's `payload` field is that struct); a top-level `[]` has no
/// schema, so JsonConverter writes `"schema":null` around the string
/// (convertToJsonWithEnvelope of a null schema).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expanded_payloads_carry_the_schema_debezium_infers_from_their_json() {
    let got = relay_rows(
        &["--value-format", "json-with-schema", "--expand-json-payload"],
        "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES
           ('00000000-0000-0000-0000-000000000541', 'order', 'o-1', 'UserCreated', '{\"fullName\": \"John Doe\", \"age\": 42}'),
           ('00000000-0000-0000-0000-000000000542', 'order', 'o-2', 'UserCreated', '[]');",
        &["outbox.event.order"],
        2,
    )
    .await;
    check(
        &got,
        &[
            order(
                "00000000-0000-0000-0000-000000000541",
                Some("o-1"),
                // jsonb keeps keys shortest first (then bytewise): the
                // document's order, which the fields follow, is age, fullName.
                Some(concat!(
                    r#"{"schema":{"type":"struct","fields":["#,
                    r#"{"type":"int32","optional":true,"field":"age"},"#,
                    r#"{"type":"string","optional":true,"field":"fullName"}"#,
                    r#"],"optional":true,"name":"payload"},"#,
                    r#""payload":{"age":42,"fullName":"John Doe"}}"#,
                )),
            ),
            order(
                "00000000-0000-0000-0000-000000000542",
                Some("o-2"),
                Some(r#"{"schema":null,"payload":"[]"}"#),
            ),
        ],
    );
    let got = relay_rows(
        &[
            "--value-format",
            "json-with-schema",
            "--expand-json-payload",
            "--fields-additional-placement",
            "type:envelope",
            "--schema-topic-prefix",
            "dbserver1",
        ],
        "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES
           ('00000000-0000-0000-0000-000000000543', 'order', 'o-1', 'UserCreated', '{\"fullName\": \"John Doe\"}');",
        &["outbox.event.order"],
        1,
    )
    .await;
    check(
        &got,
        &[order(
            "00000000-0000-0000-0000-000000000543",
            Some("o-1"),
            Some(concat!(
                r#"{"schema":{"type":"struct","fields":["#,
                r#"{"type":"struct","fields":[{"type":"string","optional":true,"field":"fullName"}],"#,
                r#""optional":true,"name":"payload","field":"payload"},"#,
                r#"{"type":"string","optional":true,"field":"type"}"#,
                r#"],"optional":false,"name":"dbserver1.public.outbox.order.Value"},"#,
                r#""payload":{"payload":{"fullName":"John Doe"},"type":"UserCreated"}}"#,
            )),
        )],
    );
}

/// Column defaults and the schema version, from debezium/debezium
/// v3.6.1.Final: PostgresDefaultValueConverter.java (a quoted literal's
/// first quoted part; `now()` a function, so the placeholder 1970-01-01;
/// an int as it is), TableSchemaBuilder.addField (the default in the
/// field's schema), Kafka Connect's Struct.get (a null field reads as its
/// default) and JsonConverter.asJsonSchema ("default" after the name and
/// version); EventRouterDelegate.getValueSchema with
/// table.field.event.schema.version (the envelope's "version" is the row's
/// int).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn column_defaults_fill_schemas_and_nulls_and_the_version_column_versions_envelopes() {
    let got = relay_rows_in(
        "CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype text, aggregateid text, \
         type text, payload jsonb, region text DEFAULT 'eu', at timestamptz DEFAULT now(), \
         v int)",
        &[
            "--value-format",
            "json-with-schema",
            "--fields-additional-placement",
            "region:envelope,at:envelope",
            "--schema-topic-prefix",
            "dbserver1",
            "--field-schema-version",
            "v",
        ],
        "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, region, at, v) VALUES
           ('00000000-0000-0000-0000-000000000551', 'order', 'o-1', 'T', '{}', NULL, NULL, 2);",
        &["outbox.event.order"],
        1,
    )
    .await
    .0;
    check(
        &got,
        &[order(
            "00000000-0000-0000-0000-000000000551",
            Some("o-1"),
            Some(concat!(
                r#"{"schema":{"type":"struct","fields":["#,
                r#"{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"payload"},"#,
                r#"{"type":"string","optional":true,"default":"eu","field":"region"},"#,
                r#"{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1,"default":"1970-01-01T00:00:00.000000Z","field":"at"}"#,
                r#"],"optional":false,"name":"dbserver1.public.outbox.order.Value","version":2},"#,
                r#""payload":{"payload":"{}","region":"eu","at":"1970-01-01T00:00:00.000000Z"}}"#,
            )),
        )],
    );
}
