//! Typed columns placed in headers and in the envelope are written as
//! Debezium's PostgreSQL connector (time.precision.mode=adaptive,
//! decimal.handling.mode=precise, binary.handling.mode=bytes) and Kafka
//! Connect's converters write them. Sources, all read for these values:
//! - debezium-connector-postgres/.../PostgresValueConverter.java `schemaBuilder`
//!   and debezium-connector-common/.../jdbc/JdbcValueConverters.java: bool is
//!   BOOLEAN, int2/4/8 INT16/32/64, float4/8 FLOAT32/64, numeric(p,s) a
//!   Decimal, unconstrained numeric VariableScaleDecimal `{scale, value}`,
//!   date io.debezium.time.Date (days), timestamp MicroTimestamp (µs),
//!   timestamptz ZonedTimestamp (ISO_OFFSET_DATE_TIME in UTC, per
//!   ZonedTimestamp.java and convertTimestampWithZone), json/jsonb and uuid
//!   strings, bytea bytes.
//! - apache/kafka connect/api/.../storage/SimpleHeaderConverter.java
//!   (`Values.convertToString`; Values.append writes byte[] in Base64) for
//!   headers; connect/json/.../JsonConverter.java (decimal.format=BASE64 by
//!   default, JsonConverterConfig.java) for the envelope.

use std::time::Duration;

use crate::support::Stack;

const TABLE: &str = "CREATE TABLE outbox (
    id uuid PRIMARY KEY, aggregatetype text, aggregateid text, payload jsonb,
    b bool, i2 int2, i8 int8, f4 float4, f8 float8, big float8,
    dec numeric(10, 2), var numeric, t text, u uuid, d date,
    ts timestamp, tstz timestamptz, bin bytea, j json, jb jsonb
)";

const ROW: &str = "INSERT INTO outbox VALUES (
    '00000000-0000-0000-0000-0000000000f1', 'typed', 'k-1', '{}',
    true, -7, 9007199254740993, 1.5, 0.1, 1e10,
    12.50, 12.50, 'héllo', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '2026-11-29',
    '2026-11-29 10:00:00.25', '2026-11-29 12:00:00.25+02', '\\x00ff',
    '{\"a\": 1}', '{\"a\": 1}'
)";

/// (column, header text, envelope JSON text)
const EXPECTED: &[(&str, &str, &str)] = &[
    ("b", "true", "true"),
    ("i2", "-7", "-7"),
    ("i8", "9007199254740993", "9007199254740993"),
    // Float.toString / Double.toString: "1.5", "0.1", and 1.0E10 beyond 10^7.
    ("f4", "1.5", "1.5"),
    ("f8", "0.1", "0.1"),
    ("big", "1.0E10", "1.0E10"),
    // BigDecimal.toString "12.50"; JsonConverter: Base64 of 1250 = 0x04E2.
    ("dec", "12.50", "\"BOI=\""),
    // Unconstrained: 12.50 without its trailing zero (PostgresValueConverter
    // strips them), 125 = 0x7D at scale 1.
    (
        "var",
        "{\"scale\":1,\"value\":\"fQ==\"}",
        "{\"scale\":1,\"value\":\"fQ==\"}",
    ),
    ("t", "héllo", "\"héllo\""),
    (
        "u",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "\"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11\"",
    ),
    // 2026-11-29 is 1795910400 s after the epoch: day 20786.
    ("d", "20786", "20786"),
    ("ts", "1795946400250000", "1795946400250000"),
    (
        "tstz",
        "2026-11-29T10:00:00.250000Z",
        "\"2026-11-29T10:00:00.250000Z\"",
    ),
    // Base64 of 0x00 0xff.
    ("bin", "AP8=", "\"AP8=\""),
    ("j", "{\"a\": 1}", "\"{\\\"a\\\": 1}\""),
    ("jb", "{\"a\": 1}", "\"{\\\"a\\\": 1}\""),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_columns_in_headers_and_envelope_are_written_as_by_debezium() {
    let placement: Vec<String> = EXPECTED
        .iter()
        .flat_map(|(c, _, _)| [format!("{c}:header"), format!("{c}:envelope")])
        .collect();
    let placement = placement.join(",");
    let stack = Stack::start_on(
        TABLE,
        &[
            "--field-event-key",
            "aggregateid",
            "--field-event-type",
            "",
            "--route-by-field",
            "aggregatetype",
            "--fields-additional-placement",
            &placement,
        ],
    )
    .await;
    stack.client.batch_execute(ROW).await.unwrap();
    let reader = stack.broker.consumer();
    reader.subscribe(&["outbox.event.typed"]);
    let got = reader.read(1, Duration::from_secs(60));
    assert_eq!(got.len(), 1, "log:\n{}", stack.relay.log());
    let m = &got[0];
    for (column, header, _) in EXPECTED {
        assert_eq!(m.header(column), Some(*header), "header {column}");
    }
    // The envelope: payload first (jsonb is a string), then the fields in
    // configuration order (EventRouterDelegate.getSchemaBuilder).
    let mut envelope = String::from(r#"{"payload":"{}""#);
    for (column, _, json) in EXPECTED {
        envelope.push_str(&format!(",\"{column}\":{json}"));
    }
    envelope.push('}');
    assert_eq!(m.value.as_deref(), Some(envelope.as_str()));
}
