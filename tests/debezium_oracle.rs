//! Debezium side by side, as the oracle: for each case, one connector
//! .properties file (Debezium's PostgreSQL connector with the outbox
//! EventRouter, as a user writes it) configures both Debezium, in one Kafka
//! Connect worker, and walrelay, through the command
//! `walrelay migrate-from-debezium` prints for it, run as printed. Both read
//! the same outbox rows of one Postgres and publish to one Apache Kafka
//! broker; every record walrelay writes must equal Debezium's byte for
//! byte: topic (modulo the `dbz.`/`wr.` prefix), partition, offset, key,
//! headers in order, value, and the timestamp when a column gives it.
//! Where walrelay differs on purpose the case names the difference and its
//! reason, and asserts it.
//!
//! The two files of a case differ only where two publishers beside each
//! other must: the topic prefix in `route.topic.replacement`, the connector
//! name, the slot and the publication (migrated with `--reuse-slot`, so
//! walrelay takes `slot.name` and `publication.name` from its file).
//!
//! One worker runs every connector, so the JVM starts once.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use support::debezium::{Connect, Properties};
use support::kafka::Received;
use support::{Broker, Postgres, Relay, TempDir};

const WAIT: Duration = Duration::from_secs(90);
const PARTITIONS: u32 = 3;
const JSON: &str = "org.apache.kafka.connect.json.JsonConverter";
const STRING: &str = "org.apache.kafka.connect.storage.StringConverter";
const BINARY: &str = "io.debezium.converters.BinaryDataConverter";

const DEBEZIUM_CONTEXT: &str = "__debezium.context.";
/// DebeziumHeaderProducer.contextHeaders, in order (debezium/debezium
/// v3.6.1.Final debezium-connector-common/.../connector/common/).
const DEBEZIUM_CONTEXT_HEADERS: [&str; 4] = [
    "__debezium.context.connectorLogicalName",
    "__debezium.context.taskId",
    "__debezium.context.connectorName",
    "__debezium.context.runId",
];

/// A Debezium-style outbox (the router's default column names).
const COLUMNS: &str = "id uuid PRIMARY KEY, aggregatetype text, aggregateid text, \
                       type text, payload jsonb";

/// How walrelay's records must relate to Debezium's.
#[derive(Clone, Copy)]
enum Expect {
    /// Byte for byte the same.
    Same,
    /// The same but for the envelope schema's name: Debezium's is that of
    /// the route value `first` for every record, walrelay's that of the
    /// record's own route value (why: the case's comment).
    EnvelopeNamedAfterFirstRoute { first: &'static str },
    /// The same but for walrelay's `traceparent` (and `tracestate`) headers,
    /// `parent` wherever the row holds a context (why: the case's comment).
    WalrelayAddsTraceHeaders { parent: &'static str },
    /// Debezium's task fails with `error` and publishes nothing; walrelay
    /// publishes each row stamped `timestamp` (why: the case's comment).
    DebeziumTaskFails { error: &'static str, timestamp: i64 },
    /// The rows' records the same; Debezium also publishes the case's
    /// `pg_logical_emit_message`s of prefix `prefix` to
    /// `<topic.prefix>.message`, `messages` (transactional?, content) in
    /// order, unrouted, and walrelay none of them (why: the case's comment).
    DebeziumAlsoPublishesMessages {
        prefix: &'static str,
        messages: &'static [(bool, &'static str)],
    },
    /// Debezium's task fails with `debezium` and walrelay stops with
    /// `walrelay` in its log; neither publishes anything.
    BothFail {
        debezium: &'static str,
        walrelay: &'static str,
    },
}

struct Case {
    /// What the case shows, as a sentence.
    what: &'static str,
    /// Names its table (`public.outbox_ID`), connectors and topics.
    id: &'static str,
    columns: &'static str,
    /// Connector options beyond `Properties::outbox_connector`'s; `{side}`
    /// is `dbz.ID` or `wr.ID`, so each side and case has its own topics.
    options: &'static [(&'static str, &'static str)],
    /// Run once the case's table exists, before anyone starts: `{table}`
    /// is the case's table.
    setup: &'static str,
    /// `{table}` is the case's table.
    inserts: &'static str,
    /// The topics' names after the `dbz.ID.`/`wr.ID.` prefix.
    topics: &'static [&'static str],
    count: usize,
    expect: Expect,
}

const DEFAULT_ROUTE: (&str, &str) = (
    "transforms.outbox.route.topic.replacement",
    "{side}.outbox.event.${routedByValue}",
);

/// What most cases leave as it is.
const BASE: Case = Case {
    what: "",
    id: "",
    columns: COLUMNS,
    options: &[],
    setup: "",
    inserts: "",
    topics: &["outbox.event.order"],
    count: 0,
    expect: Expect::Same,
};

/// Expanded payloads under JsonConverter without schemas, string keys.
const EXPANDED_PLAIN: &[(&str, &str)] = &[
    DEFAULT_ROUTE,
    ("key.converter", STRING),
    ("value.converter", JSON),
    ("value.converter.schemas.enable", "false"),
    ("transforms.outbox.table.expand.json.payload", "true"),
];

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Numeric columns in the envelope and the headers under each
/// decimal.handling.mode.
const DECIMAL_COLUMNS: &str = "id uuid PRIMARY KEY, aggregatetype text, aggregateid text, \
                               type text, payload jsonb, amount numeric(10,2), var numeric";
const DECIMAL_ROWS: &str = "INSERT INTO {table} VALUES
   ('00000000-0000-0000-0000-000000000091', 'order', 'o-1', 'T', '{}', 12.50, 12.50),
   ('00000000-0000-0000-0000-000000000092', 'order', 'o-2', 'T', '{}', -0.01, 100),
   ('00000000-0000-0000-0000-000000000093', 'order', 'o-3', 'T', '{}', 99999999.99, 0.000001234),
   ('00000000-0000-0000-0000-000000000094', 'order', 'o-4', 'T', '{}', NULL, NULL);";
const DECIMAL_PLACEMENT: (&str, &str) = (
    "transforms.outbox.table.fields.additional.placement",
    "amount:envelope,var:envelope,amount:header,var:header",
);

/// Rows over two aggregate types and several keys (so all partitions),
/// with a NULL payload.
macro_rules! orders {
    () => {
        "INSERT INTO {table} (id, aggregatetype, aggregateid, type, payload) VALUES
   ('00000000-0000-0000-0000-000000000001', 'order', 'o-1', 'OrderCreated', '{\"total\": 10, \"lines\": [1, 2]}'),
   ('00000000-0000-0000-0000-000000000002', 'customer', 'c-1', 'CustomerMoved', '{\"city\": \"Oslo\"}'),
   ('00000000-0000-0000-0000-000000000003', 'order', 'o-2', 'OrderCreated', '{\"note\": \"caf\u{e9} \\\\ \\\"q\\\"\"}'),
   ('00000000-0000-0000-0000-000000000004', 'order', 'o-3', 'OrderPaid', NULL),
   ('00000000-0000-0000-0000-000000000005', 'order', 'o-1', 'OrderPaid', '[]'),
   ('00000000-0000-0000-0000-000000000006', 'customer', 'c-2', 'CustomerMoved', '\"just a string\"'),
   ('00000000-0000-0000-0000-000000000007', 'order', 'o-4', 'OrderShipped', '{\"n\": 1.50, \"big\": 12345678901234567890}');"
    };
}
const ORDERS: &str = orders!();

/// Debezium's documented CloudEvents set-up after the router
/// (documentation/modules/ROOT/pages/integrations/cloudevents.adoc,
/// "Obtaining record metadata"): HeaderFrom$Value copies source, op and
/// transaction into headers, which the converter reads back through
/// JsonConverter headers.
macro_rules! cloudevents_options {
    ($($extra:expr),* $(,)?) => {
        &[
            DEFAULT_ROUTE,
            ("tombstones.on.delete", "false"),
            ("transforms", "addMetadataHeaders,outbox"),
            (
                "transforms.addMetadataHeaders.type",
                "org.apache.kafka.connect.transforms.HeaderFrom$Value",
            ),
            ("transforms.addMetadataHeaders.fields", "source,op,transaction"),
            ("transforms.addMetadataHeaders.headers", "source,op,transaction"),
            ("transforms.addMetadataHeaders.operation", "copy"),
            ("transforms.addMetadataHeaders.predicate", "isHeartbeat"),
            ("transforms.addMetadataHeaders.negate", "true"),
            ("transforms.outbox.table.expand.json.payload", "true"),
            ("transforms.outbox.table.fields.additional.placement", "type:header"),
            ("predicates", "isHeartbeat"),
            (
                "predicates.isHeartbeat.type",
                "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
            ),
            ("predicates.isHeartbeat.pattern", "__debezium-heartbeat.*"),
            ("key.converter", STRING),
            ("value.converter", "io.debezium.converters.CloudEventsConverter"),
            ("value.converter.metadata.source", "header"),
            ("header.converter", JSON),
            ("header.converter.schemas.enable", "true"),
            // The router passes Debezium's own <prefix>.message records on
            // unrouted, without an id header, and the converter then fails
            // the task ("Header `id` was not provided") at the first
            // pg_logical_emit_message of any application in the database.
            ("message.prefix.exclude.list", ".*"),
            $($extra),*
        ]
    };
}

/// Rows whose payloads are JSON objects, in one transaction and alone, and
/// a NULL payload (a null value on both sides).
const CLOUDEVENTS_ROWS: &str = "BEGIN;
   INSERT INTO {table} VALUES
   ('59a42efd-b015-44a9-9dde-cb36d9002425', 'User', '10711fa5', 'UserCreated', '{\"someField1\": \"some value 1\", \"someField2\": 7005}'),
   ('00000000-0000-0000-0000-0000000001c2', 'order', 'o-1', 'OrderCreated', '{\"total\": 10, \"lines\": [1, 2], \"n\": null, \"nested\": {\"a\": 1.5, \"s\": \"caf\u{e9}\"}}');
   COMMIT;
   INSERT INTO {table} VALUES ('00000000-0000-0000-0000-0000000001c3', 'order', 'o-2', 'OrderPaid', '{}');
   INSERT INTO {table} VALUES ('00000000-0000-0000-0000-0000000001c4', 'order', 'o-3', 'OrderPaid', NULL);";

fn cases() -> Vec<Case> {
    vec![
        Case {
            what: "JsonConverter without schemas routes by aggregatetype and quotes keys and payloads",
            id: "json",
            columns: COLUMNS,
            options: &[
                DEFAULT_ROUTE,
                ("key.converter", JSON),
                ("key.converter.schemas.enable", "false"),
                ("value.converter", JSON),
                ("value.converter.schemas.enable", "false"),
            ],
            setup: "",
            // UPDATEs and DELETEs of outbox rows publish nothing on either
            // side (the router warns and drops them; walrelay's publication
            // carries inserts only).
            inserts: concat!(
                orders!(),
                "UPDATE {table} SET payload = '{}' WHERE aggregateid = 'o-1';",
                "DELETE FROM {table} WHERE aggregateid = 'c-1';"
            ),
            topics: &["outbox.event.order", "outbox.event.customer"],
            count: 7,
            expect: Expect::Same,
        },
        Case {
            what: "StringConverter sends the key and the jsonb payload as their text",
            id: "string",
            columns: COLUMNS,
            options: &[
                DEFAULT_ROUTE,
                ("key.converter", STRING),
                ("value.converter", STRING),
            ],
            setup: "",
            inserts: ORDERS,
            topics: &["outbox.event.order", "outbox.event.customer"],
            count: 7,
            expect: Expect::Same,
        },
        Case {
            what: "JsonConverter with its default schemas.enable=true writes the columns' schemas",
            id: "schemas",
            columns: "id uuid PRIMARY KEY, aggregatetype text, aggregateid text NOT NULL, \
                      type text, payload jsonb",
            options: &[
                DEFAULT_ROUTE,
                ("key.converter", JSON),
                ("value.converter", JSON),
            ],
            setup: "",
            inserts: ORDERS,
            topics: &["outbox.event.order", "outbox.event.customer"],
            count: 7,
            expect: Expect::Same,
        },
        Case {
            what: "additional placements fill headers, the envelope, the partition and the timestamp",
            id: "placement",
            columns: "id uuid PRIMARY KEY, aggregatetype text, aggregateid text, type text, \
                      payload jsonb, tenant text, shard int, ts timestamp(3)",
            options: &[
                DEFAULT_ROUTE,
                ("key.converter", STRING),
                ("value.converter", JSON),
                ("value.converter.schemas.enable", "false"),
                (
                    "transforms.outbox.table.fields.additional.placement",
                    "type:header:eventType,tenant:envelope:tenantId,shard:envelope,\
                     aggregatetype:header,shard:partition",
                ),
                ("transforms.outbox.table.field.event.timestamp", "ts"),
            ],
            setup: "",
            inserts: "INSERT INTO {table} VALUES
               ('00000000-0000-0000-0000-000000000011', 'order', 'o-1', 'OrderCreated', '{\"total\": 10}', 't-7', 2, '2026-11-29 10:00:00.250'),
               ('00000000-0000-0000-0000-000000000012', 'order', 'o-2', 'OrderPaid', '[1, 2]', NULL, 0, '2026-11-29 12:30:00'),
               ('00000000-0000-0000-0000-000000000013', 'order', 'o-3', 'OrderPaid', NULL, 't-8', 1, '2026-11-30 00:00:00.001');",
            topics: &["outbox.event.order"],
            count: 3,
            expect: Expect::Same,
        },
        Case {
            what: "empty and NULL text payloads become tombstones when asked",
            id: "tombstone",
            columns: "id uuid PRIMARY KEY, aggregatetype text, aggregateid text, type text, \
                      payload text",
            options: &[
                DEFAULT_ROUTE,
                ("key.converter", STRING),
                ("value.converter", STRING),
                ("transforms.outbox.route.tombstone.on.empty.payload", "true"),
            ],
            setup: "",
            inserts: "INSERT INTO {table} VALUES
               ('00000000-0000-0000-0000-000000000021', 'doc', 'd-1', 'Saved', 'plain text'),
               ('00000000-0000-0000-0000-000000000022', 'doc', 'd-2', 'Deleted', ''),
               ('00000000-0000-0000-0000-000000000023', 'doc', 'd-3', 'Deleted', NULL),
               ('00000000-0000-0000-0000-000000000024', 'doc', 'd-1', 'Saved', '{\"x\": 1}');",
            topics: &["outbox.event.doc"],
            count: 4,
            expect: Expect::Same,
        },
        Case {
            what: "another route-by column through route.topic.regex groups names the topics",
            id: "regex",
            columns: COLUMNS,
            options: &[
                ("transforms.outbox.route.by.field", "type"),
                (
                    "transforms.outbox.route.topic.regex",
                    "(?<domain>[a-z]+)\\.(?<kind>[a-z]+)",
                ),
                (
                    "transforms.outbox.route.topic.replacement",
                    "{side}.regex.${domain}.$2",
                ),
                ("key.converter", STRING),
                ("value.converter", STRING),
            ],
            setup: "",
            inserts: "INSERT INTO {table} (id, aggregatetype, aggregateid, type, payload) VALUES
               ('00000000-0000-0000-0000-000000000031', 'invoice', 'i-1', 'billing.issued', '{}'),
               ('00000000-0000-0000-0000-000000000032', 'invoice', 'i-2', 'billing.paid', '{\"a\": 1}'),
               ('00000000-0000-0000-0000-000000000033', 'order', 'o-1', 'shop.issued', '{}');",
            topics: &["regex.billing.issued", "regex.billing.paid", "regex.shop.issued"],
            count: 3,
            expect: Expect::Same,
        },
        Case {
            what: "expanded JSON payloads are compact JSON without null fields or empty arrays",
            id: "expand",
            columns: COLUMNS,
            options: &[
                DEFAULT_ROUTE,
                ("key.converter", JSON),
                ("key.converter.schemas.enable", "false"),
                ("value.converter", JSON),
                ("value.converter.schemas.enable", "false"),
                ("transforms.outbox.table.expand.json.payload", "true"),
            ],
            setup: "",
            inserts: "INSERT INTO {table} (id, aggregatetype, aggregateid, type, payload) VALUES
               ('00000000-0000-0000-0000-000000000041', 'order', '1', 'OrderCreated', '{\"id\": 1, \"lineItems\": [{\"id\": 1, \"totalPrice\": 39.98}], \"note\": null, \"tags\": []}'),
               ('00000000-0000-0000-0000-000000000042', 'order', '2', 'OrderCreated', '{\"mixed\": [1, \"a\"]}'),
               ('00000000-0000-0000-0000-000000000043', 'order', '3', 'OrderCreated', '{\"nested\": {\"deep\": {\"x\": true}}, \"n\": -7, \"f\": 1.5e3}'),
               ('00000000-0000-0000-0000-000000000044', 'order', '4', 'OrderCreated', NULL);",
            topics: &["outbox.event.order"],
            count: 4,
            expect: Expect::Same,
        },
        Case {
            what: "expanded JSON payloads under schemas.enable=true carry the schema JsonSchemaData infers",
            id: "expand_schemas",
            columns: COLUMNS,
            options: &[
                DEFAULT_ROUTE,
                ("key.converter", JSON),
                ("value.converter", JSON),
                ("transforms.outbox.table.expand.json.payload", "true"),
            ],
            setup: "",
            // Nested objects, arrays of numbers and of objects (one shape,
            // and shapes merged in an order Java's hash codes cannot change:
            // each later member only adds fields), nulls and empty arrays left
            // out, a mixed array (no schema: the string stays), a top-level
            // [] (no schema at all), and a NULL payload.
            inserts: "INSERT INTO {table} (id, aggregatetype, aggregateid, type, payload) VALUES
               ('00000000-0000-0000-0000-000000000051', 'order', '1', 'OrderCreated', '{\"id\": 1, \"items\": [{\"sku\": \"a\"}]}'),
               ('00000000-0000-0000-0000-000000000052', 'order', '2', 'OrderCreated', '{\"n\": {\"deep\": {\"x\": true, \"f\": 1.5e3}}, \"ns\": [null, 2, 3], \"l\": 3000000000, \"note\": null, \"tags\": []}'),
               ('00000000-0000-0000-0000-000000000053', 'order', '3', 'OrderCreated', '{\"xs\": [{\"a\": 1}, {\"a\": 2, \"b\": \"y\"}, {\"a\": 3, \"b\": null, \"c\": []}]}'),
               ('00000000-0000-0000-0000-000000000054', 'order', '4', 'OrderCreated', '{\"mixed\": [1, \"a\"]}'),
               ('00000000-0000-0000-0000-000000000055', 'order', '5', 'OrderCreated', '[]'),
               ('00000000-0000-0000-0000-000000000056', 'order', '6', 'OrderCreated', NULL);",
            topics: &["outbox.event.order"],
            count: 6,
            expect: Expect::Same,
        },
        Case {
            what: "an expanded payload in an envelope under schemas.enable=true is the envelope's payload struct",
            id: "expand_envelope",
            columns: "id uuid PRIMARY KEY, aggregatetype text, aggregateid text, type text, \
                      payload jsonb, shard int",
            options: &[
                DEFAULT_ROUTE,
                ("key.converter", STRING),
                ("value.converter", JSON),
                ("transforms.outbox.table.expand.json.payload", "true"),
                ("transforms.outbox.table.fields.additional.placement", "shard:envelope"),
            ],
            inserts: "INSERT INTO {table} VALUES
               ('00000000-0000-0000-0000-000000000151', 'order', 'o-1', 'T', '{\"id\": 1, \"lines\": [{\"q\": 2}]}', 1);",
            count: 1,
            ..BASE
        },
        Case {
            // A schema is inferred (an array) but the value is no struct:
            // the router pairs the string with it, and JsonConverter fails.
            what: "a top-level JSON array expanded fails Debezium's task and halts walrelay",
            id: "expand_array",
            options: EXPANDED_PLAIN,
            inserts: "INSERT INTO {table} (id, aggregatetype, aggregateid, type, payload) VALUES
               ('00000000-0000-0000-0000-000000000161', 'order', 'o-1', 'T', '[1, 2]');",
            count: 0,
            expect: Expect::BothFail {
                debezium: "DataException",
                walrelay: "a top-level array is no struct",
            },
            ..BASE
        },
        Case {
            // Jackson reads it as a BigIntegerNode: FLOAT64 in the schema, a
            // BigDecimal in the struct, which Struct.put refuses.
            what: "an integer beyond a long in an expanded payload fails Debezium's task and halts walrelay",
            id: "expand_big",
            options: EXPANDED_PLAIN,
            inserts: "INSERT INTO {table} (id, aggregatetype, aggregateid, type, payload) VALUES
               ('00000000-0000-0000-0000-000000000171', 'order', 'o-1', 'T', '{\"big\": 12345678901234567890}');",
            count: 0,
            expect: Expect::BothFail {
                debezium: "DataException",
                walrelay: "an integer beyond a long",
            },
            ..BASE
        },
        Case {
            what: "uuid keys, text payloads and typed header columns carry Debezium's schemas and header text",
            id: "types",
            columns: "id uuid PRIMARY KEY, aggregatetype text, aggregateid uuid NOT NULL, \
                      type text, payload text, flag boolean, small int2, amount numeric(10,2), \
                      at timestamptz, day date, blob bytea, doc jsonb, at3 timestamptz(3), \
                      at0 timestamptz(0), ts timestamp, f4 real, f8 double precision, \
                      var numeric, j json, n8 int8",
            options: &[
                DEFAULT_ROUTE,
                ("key.converter", JSON),
                ("value.converter", JSON),
                (
                    "transforms.outbox.table.fields.additional.placement",
                    "flag:header,small:header,amount:header,at:header,day:header,blob:header,\
                     doc:header,at3:header,at0:header,ts:header,f4:header,f8:header,var:header,\
                     j:header,n8:header",
                ),
            ],
            setup: "",
            inserts: "INSERT INTO {table} VALUES
               ('00000000-0000-0000-0000-000000000061', 'order', '6f1c2f4e-8a3b-4c5d-9e0f-112233445566', 'T', '{\"a\": 1}',
                true, -7, 12.50, '2026-11-29 10:00:00.25+00', '2026-11-29', '\\x00ff10', '{\"k\": [1, 2]}',
                '2026-11-29 12:00:00.25+02', '2026-11-29 10:00:00+00', '2026-11-29 10:00:00.25', 1.5, 0.1, 12.50, '{\"a\":  1}', 9007199254740993),
               ('00000000-0000-0000-0000-000000000062', 'order', '6f1c2f4e-8a3b-4c5d-9e0f-112233445567', 'T', 'not json',
                false, 32767, -0.01, '1969-12-31 23:59:59.999999+00', '1969-12-31', '\\x', '[]',
                '2026-11-29 10:00:00+00', '1969-12-31 23:59:59+00', '1969-12-31 23:59:59.5', 1e10, 1e-7, -0.5, 'null', -1);",
            topics: &["outbox.event.order"],
            count: 2,
            expect: Expect::Same,
        },
        Case {
            what: "bytea payloads under BinaryDataConverter arrive as their raw bytes",
            id: "binary",
            columns: "id uuid PRIMARY KEY, aggregatetype text, aggregateid text, type text, \
                      payload bytea",
            options: &[
                DEFAULT_ROUTE,
                ("key.converter", STRING),
                ("value.converter", BINARY),
            ],
            setup: "",
            inserts: "INSERT INTO {table} VALUES
               ('00000000-0000-0000-0000-000000000071', 'blob', 'b-1', 'Stored', '\\x00010203ff5c22'),
               ('00000000-0000-0000-0000-000000000072', 'blob', 'b-2', 'Stored', '\\x'),
               ('00000000-0000-0000-0000-000000000073', 'blob', 'b-3', 'Stored', NULL);",
            topics: &["outbox.event.blob"],
            count: 3,
            expect: Expect::Same,
        },
        Case {
            what: "json payload columns keep their text under JsonConverter with schemas",
            id: "json_column",
            columns: "id uuid PRIMARY KEY, aggregatetype text, aggregateid text, type text, \
                      payload json",
            options: &[DEFAULT_ROUTE, ("key.converter", JSON), ("value.converter", JSON)],
            inserts: ORDERS,
            topics: &["outbox.event.order", "outbox.event.customer"],
            count: 7,
            ..BASE
        },
        Case {
            what: "several outbox tables under one connector publish alike",
            id: "two_tables",
            options: &[
                DEFAULT_ROUTE,
                ("table.include.list", "public.outbox_two_tables,public.outbox_two_tables_b"),
                ("key.converter", STRING),
                ("value.converter", STRING),
            ],
            setup: "CREATE TABLE {table}_b (LIKE {table} INCLUDING ALL)",
            inserts: "INSERT INTO {table} VALUES
               ('00000000-0000-0000-0000-0000000000a1', 'order', 'o-1', 'T', '{\"t\": \"a\"}');
             INSERT INTO {table}_b VALUES
               ('00000000-0000-0000-0000-0000000000a2', 'order', 'o-1', 'T', '{\"t\": \"b\"}');
             INSERT INTO {table} VALUES
               ('00000000-0000-0000-0000-0000000000a3', 'order', 'o-2', 'T', '{\"t\": \"a\"}');",
            count: 3,
            ..BASE
        },
        Case {
            what: "tombstones under JsonConverter with schemas are null values without a schema",
            id: "tombstone_json",
            columns: "id uuid PRIMARY KEY, aggregatetype text, aggregateid text, type text, \
                      payload text",
            options: &[
                DEFAULT_ROUTE,
                ("key.converter", JSON),
                ("value.converter", JSON),
                ("transforms.outbox.route.tombstone.on.empty.payload", "true"),
            ],
            inserts: "INSERT INTO {table} VALUES
               ('00000000-0000-0000-0000-0000000000b1', 'order', 'o-1', 'T', 'x'),
               ('00000000-0000-0000-0000-0000000000b2', 'order', 'o-2', 'T', ''),
               ('00000000-0000-0000-0000-0000000000b3', 'order', 'o-3', 'T', NULL);",
            count: 3,
            ..BASE
        },
        Case {
            what: "an envelope under schemas.enable=true is a struct named after the route value",
            id: "envelope_schemas",
            columns: "id uuid PRIMARY KEY, aggregatetype text, aggregateid text, type text, \
                      payload jsonb, tenant text NOT NULL, shard int, at timestamptz",
            options: &[
                DEFAULT_ROUTE,
                ("key.converter", STRING),
                ("value.converter", JSON),
                (
                    "transforms.outbox.table.fields.additional.placement",
                    "tenant:envelope:tenantId,shard:envelope,at:envelope:occurredAt,type:header",
                ),
            ],
            inserts: "INSERT INTO {table} VALUES
               ('00000000-0000-0000-0000-0000000000c1', 'order', 'o-1', 'Created', '{\"a\": 1}', 't-1', 2, '2026-11-29 12:00:00.25+02'),
               ('00000000-0000-0000-0000-0000000000c2', 'order', 'o-2', 'Paid', NULL, 't-2', NULL, NULL);",
            count: 2,
            ..BASE
        },
        Case {
            // Documented: Debezium builds the envelope schema once per task
            // and names it after the route value of the first event it saw
            // (EventRouterDelegate's cached schema); walrelay names each
            // envelope after its own route value.
            what: "envelopes of a second route value keep Debezium's first name there and their own in walrelay",
            id: "envelope_names",
            columns: "id uuid PRIMARY KEY, aggregatetype text, aggregateid text, type text, \
                      payload jsonb, shard int",
            options: &[
                DEFAULT_ROUTE,
                ("key.converter", STRING),
                ("value.converter", JSON),
                ("transforms.outbox.table.fields.additional.placement", "shard:envelope"),
            ],
            inserts: "INSERT INTO {table} VALUES
               ('00000000-0000-0000-0000-0000000000d1', 'order', 'o-1', 'T', '{}', 1);
             INSERT INTO {table} VALUES
               ('00000000-0000-0000-0000-0000000000d2', 'customer', 'c-1', 'T', '{}', 2);",
            topics: &["outbox.event.order", "outbox.event.customer"],
            count: 2,
            expect: Expect::EnvelopeNamedAfterFirstRoute { first: "order" },
            ..BASE
        },
        Case {
            // Debezium puts a column's DEFAULT (as it parses the catalog's
            // expression: a function is a placeholder, a quoted literal its
            // first quoted part) into its schema, and Struct.get hands it
            // out for a NULL; the second row's NULLs show that.
            what: "column defaults are in the schemas and stand in for NULLs",
            id: "defaults",
            columns: "id uuid PRIMARY KEY DEFAULT gen_random_uuid(), aggregatetype text, \
                      aggregateid text DEFAULT 'k0', type text, payload jsonb DEFAULT '{}', \
                      region text DEFAULT 'eu', n int DEFAULT 7, amount numeric(10,2) DEFAULT 1, \
                      at timestamptz DEFAULT now(), flag boolean DEFAULT true, \
                      day date DEFAULT CURRENT_DATE, note text DEFAULT 'it''s', \
                      plain text, calc int DEFAULT (1 + 1)",
            options: &[
                DEFAULT_ROUTE,
                ("key.converter", JSON),
                ("value.converter", JSON),
                (
                    "transforms.outbox.table.fields.additional.placement",
                    "region:envelope,n:envelope,amount:envelope,at:envelope,day:envelope,\
                     note:envelope,plain:envelope,calc:envelope,flag:header,region:header:r",
                ),
            ],
            inserts: "INSERT INTO {table} (id, aggregatetype, type, at) VALUES
               ('00000000-0000-0000-0000-0000000000e1', 'order', 'T', '2026-11-29 10:00:00+00');
             INSERT INTO {table} (id, aggregatetype, aggregateid, type, payload, region, n, amount,
                                  at, flag, day, note, plain, calc) VALUES
               ('00000000-0000-0000-0000-0000000000e2', 'order', NULL, 'T', NULL, NULL, NULL, NULL,
                NULL, NULL, NULL, NULL, NULL, NULL);",
            count: 2,
            ..BASE
        },
        Case {
            // Documented: Debezium's router adds trace headers only with
            // OpenTelemetry in Connect (this one has none, as most); walrelay
            // passes the writer's traceparent and tracestate through always.
            what: "the writer's trace context becomes walrelay's traceparent header and none of Debezium's",
            id: "trace",
            columns: "id uuid PRIMARY KEY, aggregatetype text, aggregateid text, type text, \
                      payload jsonb, tracingspancontext varchar(256)",
            options: &[DEFAULT_ROUTE, ("key.converter", STRING), ("value.converter", STRING)],
            inserts: "INSERT INTO {table} VALUES
               ('00000000-0000-0000-0000-0000000000f1', 'order', 'o-1', 'T', '{}',
                E'#Mon Nov 30 13:50:37 UTC 2026\\ntraceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\\n'),
               ('00000000-0000-0000-0000-0000000000f2', 'order', 'o-2', 'T', '{}', NULL);",
            count: 2,
            expect: Expect::WalrelayAddsTraceHeaders { parent: PARENT },
            ..BASE
        },
        Case {
            what: "table.field.event.schema.version versions the envelope's schema from the row",
            id: "schema_version",
            columns: "id uuid PRIMARY KEY, aggregatetype text, aggregateid text, type text, \
                      payload jsonb, shard int, v int",
            options: &[
                DEFAULT_ROUTE,
                ("key.converter", STRING),
                ("value.converter", JSON),
                ("transforms.outbox.table.fields.additional.placement", "shard:envelope"),
                ("transforms.outbox.table.field.event.schema.version", "v"),
            ],
            inserts: "INSERT INTO {table} VALUES
               ('00000000-0000-0000-0000-000000000181', 'order', 'o-1', 'T', '{}', 1, 3),
               ('00000000-0000-0000-0000-000000000182', 'order', 'o-2', 'T', '{}', 2, NULL),
               ('00000000-0000-0000-0000-000000000183', 'order', 'o-3', 'T', '{}', 3, 3);",
            count: 3,
            ..BASE
        },
        Case {
            // The row was written before either started: only its UPDATE
            // streams, which the router throws on (handleUnexpectedOperation,
            // FATAL); walrelay's publication publishes UPDATEs for it.
            what: "table.op.invalid.behavior=fatal fails Debezium's task and stops walrelay on an UPDATE",
            id: "update_fatal",
            options: &[
                DEFAULT_ROUTE,
                ("key.converter", STRING),
                ("value.converter", STRING),
                ("transforms.outbox.table.op.invalid.behavior", "fatal"),
            ],
            setup: "INSERT INTO {table} VALUES
               ('00000000-0000-0000-0000-000000000191', 'order', 'o-1', 'T', '{}');",
            inserts: "UPDATE {table} SET payload = '{\"changed\": true}';",
            count: 0,
            expect: Expect::BothFail {
                debezium: "Unexpected update message received",
                walrelay: "--on-update is fatal",
            },
            ..BASE
        },
        Case {
            what: "numerics under decimal.handling.mode=precise are Base64 decimals and variable-scale structs",
            id: "dec_precise",
            columns: DECIMAL_COLUMNS,
            options: &[
                DEFAULT_ROUTE,
                ("key.converter", STRING),
                ("value.converter", JSON),
                ("value.converter.schemas.enable", "false"),
                DECIMAL_PLACEMENT,
            ],
            inserts: DECIMAL_ROWS,
            count: 4,
            ..BASE
        },
        Case {
            what: "numerics under decimal.handling.mode=string are their text",
            id: "dec_string",
            columns: DECIMAL_COLUMNS,
            options: &[
                DEFAULT_ROUTE,
                ("decimal.handling.mode", "string"),
                ("key.converter", STRING),
                ("value.converter", JSON),
                DECIMAL_PLACEMENT,
            ],
            inserts: DECIMAL_ROWS,
            count: 4,
            ..BASE
        },
        Case {
            what: "numerics under decimal.handling.mode=double are doubles",
            id: "dec_double",
            columns: DECIMAL_COLUMNS,
            options: &[
                DEFAULT_ROUTE,
                ("decimal.handling.mode", "double"),
                ("key.converter", STRING),
                ("value.converter", JSON),
                ("value.converter.schemas.enable", "false"),
                DECIMAL_PLACEMENT,
            ],
            inserts: DECIMAL_ROWS,
            count: 4,
            ..BASE
        },
        Case {
            what: "other column names for the id, key, payload, route and timestamp are read alike",
            id: "custom_columns",
            columns: "event_id uuid PRIMARY KEY, kind text, agg_key text, body jsonb, \
                      created timestamp",
            options: &[
                DEFAULT_ROUTE,
                ("key.converter", STRING),
                ("value.converter", STRING),
                ("transforms.outbox.table.field.event.id", "event_id"),
                ("transforms.outbox.table.field.event.key", "agg_key"),
                ("transforms.outbox.table.field.event.payload", "body"),
                ("transforms.outbox.route.by.field", "kind"),
                ("transforms.outbox.table.field.event.timestamp", "created"),
            ],
            inserts: "INSERT INTO {table} VALUES
               ('00000000-0000-0000-0000-000000000101', 'order', 'k-1', '{\"a\": 1}', '2026-11-29 10:00:00.123456'),
               ('00000000-0000-0000-0000-000000000102', 'order', 'k-2', '{}', '1970-01-01 00:00:01');",
            count: 2,
            ..BASE
        },
        Case {
            what: "expansion keeps null fields and empty arrays under the optional_bytes and optional_string behaviours",
            id: "expand_behaviors",
            options: &[
                DEFAULT_ROUTE,
                ("key.converter", STRING),
                ("value.converter", JSON),
                ("value.converter.schemas.enable", "false"),
                ("transforms.outbox.table.expand.json.payload", "true"),
                ("transforms.outbox.table.json.payload.null.behavior", "optional_bytes"),
                (
                    "transforms.outbox.table.json.payload.empty.array.behavior",
                    "optional_string",
                ),
            ],
            inserts: "INSERT INTO {table} (id, aggregatetype, aggregateid, type, payload) VALUES
               ('00000000-0000-0000-0000-000000000111', 'order', 'o-1', 'T', '{\"id\": 1, \"note\": null, \"tags\": [], \"deep\": {\"n\": null, \"e\": []}}');",
            count: 1,
            ..BASE
        },
        Case {
            what: "control characters, line separators and astral characters are escaped as JsonConverter escapes them",
            id: "escapes",
            columns: "id uuid PRIMARY KEY, aggregatetype text, aggregateid text, type text, \
                      payload text, note text",
            options: &[
                DEFAULT_ROUTE,
                ("key.converter", JSON),
                ("key.converter.schemas.enable", "false"),
                ("value.converter", JSON),
                ("value.converter.schemas.enable", "false"),
                ("transforms.outbox.table.fields.additional.placement", "note:header"),
            ],
            inserts: r#"INSERT INTO {table} VALUES
               ('00000000-0000-0000-0000-000000000121', 'order', E'k\x01"\\', 'T',
                E'a\x01b\x1fc\x7fd\u2028e\u2029 \u00e9 \U0001F600 \t\n\r\b\f "q" \\ / <>&='' ',
                E'h\x01\x1f\u00e9 \U0001F600'),
               ('00000000-0000-0000-0000-000000000122', 'order', 'k-2', 'T',
                '{"s": "\u001f\u2028\ud83d\ude00"}', NULL);"#,
            count: 2,
            ..BASE
        },
        Case {
            what: "the same escapes inside an envelope",
            id: "escapes_envelope",
            columns: "id uuid PRIMARY KEY, aggregatetype text, aggregateid text, type text, \
                      payload jsonb, note text",
            options: &[
                DEFAULT_ROUTE,
                ("key.converter", STRING),
                ("value.converter", JSON),
                ("value.converter.schemas.enable", "false"),
                ("transforms.outbox.table.fields.additional.placement", "note:envelope"),
            ],
            inserts: r#"INSERT INTO {table} VALUES
               ('00000000-0000-0000-0000-000000000131', 'order', 'o-1', 'T',
                '{"s": "\u001f\u2028\ud83d\ude00 \\ \" /"}',
                E'a\x01b\x1fc\x7fd\u2028e \U0001F600 \t\n "q" \\ /');"#,
            count: 1,
            ..BASE
        },
        Case {
            what: "a payload of 300 kB arrives whole",
            id: "large",
            columns: "id uuid PRIMARY KEY, aggregatetype text, aggregateid text, type text, \
                      payload text",
            options: &[DEFAULT_ROUTE, ("key.converter", STRING), ("value.converter", STRING)],
            inserts: "INSERT INTO {table} VALUES
               ('00000000-0000-0000-0000-000000000141', 'order', 'o-1', 'T', repeat('0123456789', 30000));",
            count: 1,
            ..BASE
        },
        Case {
            // Documented: Debezium's router reads the timestamp field as an
            // INT64 (io.debezium.time.Timestamp/MicroTimestamp), so a
            // timestamptz (ZonedTimestamp, a string) fails its task for good;
            // walrelay takes the instant it names.
            what: "a timestamptz column as table.field.event.timestamp fails Debezium's task and stamps walrelay's records",
            id: "tstz_field",
            columns: "id uuid PRIMARY KEY, aggregatetype text, aggregateid text, type text, \
                      payload jsonb, at timestamptz",
            options: &[
                DEFAULT_ROUTE,
                ("key.converter", STRING),
                ("value.converter", STRING),
                ("transforms.outbox.table.field.event.timestamp", "at"),
            ],
            inserts: "INSERT INTO {table} VALUES
               ('00000000-0000-0000-0000-0000000000f9', 'order', 'o-1', 'T', '{}', '2026-11-29 12:00:00.25+02');",
            count: 1,
            expect: Expect::DebeziumTaskFails {
                error: "DataException: Field 'at' is not of type INT64",
                timestamp: 1_795_946_400_250,
            },
            ..BASE
        },
        Case {
            // Debezium 3.6.1 asks pgoutput for logical decoding messages
            // (PgOutputMessageDecoder.java:247-249) and publishes each one
            // whose prefix message.prefix.include.list matches
            // (PostgresEventDispatcher.java:66) to <topic.prefix>.message
            // (LogicalDecodingMessageMonitor.java:46,74,94-109: key
            // {prefix}, value op "m", ts_ms, source, message{prefix,
            // content}); a non-transactional one at once, so even from a
            // transaction that rolls back (PgOutputMessageDecoder.java:
            // 639-650). The outbox router passes it on untouched: its value
            // schema, io.debezium.connector.postgresql.MessageValue
            // (PostgresSchemaFactory.java:32), is no `.Envelope`
            // (EventRouterDelegate.java:102-106, SmtManager.java:46-54).
            // walrelay run reads the outbox table: no message reaches Kafka
            // through it, and migrate says so in a note. (Its --source
            // messages, which migrate never proposes for an outbox table,
            // routes walrelay's own JSON documents like rows and refuses
            // non-transactional ones: tests/messages_source.rs.)
            what: "pg_logical_emit_message reaches Debezium's <topic.prefix>.message unrouted and no walrelay topic",
            id: "messages",
            options: &[
                DEFAULT_ROUTE,
                ("key.converter", JSON),
                ("key.converter.schemas.enable", "false"),
                ("value.converter", JSON),
                ("value.converter.schemas.enable", "false"),
                ("message.prefix.include.list", "app"),
            ],
            inserts: "BEGIN;
             INSERT INTO {table} VALUES
               ('00000000-0000-0000-0000-0000000001a1', 'order', 'o-1', 'T', '{\"n\": 1}');
             SELECT pg_logical_emit_message(true, 'app', '{\"n\": 1}');
             SELECT pg_logical_emit_message(true, 'other', 'another application''s');
             COMMIT;
             BEGIN;
             SELECT pg_logical_emit_message(true, 'app', 'rolled back');
             SELECT pg_logical_emit_message(false, 'app', 'sent though rolled back');
             INSERT INTO {table} VALUES
               ('00000000-0000-0000-0000-0000000001a2', 'order', 'o-2', 'T', '{}');
             ROLLBACK;
             SELECT pg_logical_emit_message(false, 'app', 'on its own');
             INSERT INTO {table} VALUES
               ('00000000-0000-0000-0000-0000000001a3', 'order', 'o-3', 'T', '{}');",
            count: 2,
            expect: Expect::DebeziumAlsoPublishesMessages {
                prefix: "app",
                messages: &[
                    (true, "{\"n\": 1}"),
                    (false, "sent though rolled back"),
                    (false, "on its own"),
                ],
            },
            ..BASE
        },
        Case {
            // AbstractCloudEventsConverterTest
            // .shouldConvertToCloudEventsInJsonWithMetadataAndIdAndTypeInHeadersAfterOutboxEventRouter
            // (DBZ-3642, DBZ-7016) through a worker, as cloudevents.adoc sets it up.
            what: "CloudEventsConverter after the router with the metadata in JsonConverter headers",
            id: "cloudevents",
            options: cloudevents_options!(),
            inserts: CLOUDEVENTS_ROWS,
            topics: &["outbox.event.User", "outbox.event.order"],
            count: 4,
            ..BASE
        },
        Case {
            // CloudEventsConverterConfig: json.schemas.enable for data,
            // extension.attributes.enable (DBZ-6982), and headers under
            // JsonConverter without schemas.
            what: "CloudEvents without data's schema and without Debezium's extension attributes",
            id: "cloudevents_plain",
            options: cloudevents_options!(
                ("value.converter.json.schemas.enable", "false"),
                ("value.converter.extension.attributes.enable", "false"),
            ),
            inserts: CLOUDEVENTS_ROWS,
            topics: &["outbox.event.User", "outbox.event.order"],
            count: 4,
            ..BASE
        },
        Case {
            what: "a JSON array payload is no struct, so the CloudEvents converter fails",
            id: "cloudevents_array",
            options: cloudevents_options!(),
            inserts: "INSERT INTO {table} VALUES
               ('00000000-0000-0000-0000-0000000001c5', 'order', 'o-1', 'OrderPaid', '[1, 2]');",
            count: 0,
            expect: Expect::BothFail {
                debezium: "DataException",
                walrelay: "a top-level array is no struct",
            },
            ..BASE
        },
        Case {
            what: "a NULL type leaves the CloudEvent without its required type, so the converter fails",
            id: "cloudevents_null_type",
            options: cloudevents_options!(),
            inserts: "INSERT INTO {table} VALUES
               ('00000000-0000-0000-0000-0000000001c6', 'order', 'o-1', NULL, '{\"a\": 1}');",
            count: 0,
            expect: Expect::BothFail {
                debezium: "Invalid value: null used for required field: \\\"type\\\"",
                walrelay: "its `type` header is NULL",
            },
            ..BASE
        },
        Case {
            what: "header.converter=JsonConverter writes every header as JSON with its column's schema",
            id: "json_headers",
            columns: "id uuid PRIMARY KEY, aggregatetype text, aggregateid text, type text, \
                      payload jsonb, shard int NOT NULL DEFAULT 3, amount numeric(10,2), \
                      flag boolean, at timestamp(3)",
            options: &[
                DEFAULT_ROUTE,
                ("key.converter", STRING),
                ("value.converter", STRING),
                ("header.converter", JSON),
                (
                    "transforms.outbox.table.fields.additional.placement",
                    "type:header:eventType,shard:header,amount:header,flag:header,at:header",
                ),
            ],
            inserts: "INSERT INTO {table} VALUES
               ('00000000-0000-0000-0000-0000000001d1', 'order', 'o-1', 'A', '{}', 1, 12.50, true, '2026-11-29 10:00:00.250'),
               ('00000000-0000-0000-0000-0000000001d2', 'order', 'o-2', NULL, '{}', 2, NULL, NULL, NULL);",
            count: 2,
            ..BASE
        },
        Case {
            what: "header.converter=JsonConverter without schemas writes the headers' JSON alone",
            id: "json_headers_plain",
            columns: "id uuid PRIMARY KEY, aggregatetype text, aggregateid text, type text, \
                      payload jsonb, shard int",
            options: &[
                DEFAULT_ROUTE,
                ("key.converter", STRING),
                ("value.converter", STRING),
                ("header.converter", JSON),
                ("header.converter.schemas.enable", "false"),
                (
                    "transforms.outbox.table.fields.additional.placement",
                    "type:header,shard:header",
                ),
            ],
            inserts: "INSERT INTO {table} VALUES
               ('00000000-0000-0000-0000-0000000001d3', 'order', 'o-1', 'A', '{}', 7),
               ('00000000-0000-0000-0000-0000000001d4', 'order', 'o-2', 'B \"q\"', '{}', NULL);",
            count: 2,
            ..BASE
        },
    ]
}

/// The connector file of one side (`dbz` or `wr`) of a case.
fn properties(pg: &Postgres, case: &Case, side: &str) -> Properties {
    let name = format!("{side}_{}", case.id);
    let mut p =
        Properties::outbox_connector(pg, &name, &format!("public.outbox_{}", case.id), PARTITIONS);
    // The same on both sides: it names the envelope schemas.
    p.set("topic.prefix", &format!("oracle_{}", case.id));
    for (key, value) in case.options {
        p.set(
            key,
            &value.replace("{side}", &format!("{side}.{}", case.id)),
        );
    }
    p
}

/// What `walrelay migrate-from-debezium --reuse-slot FILE` prints: the
/// command (its output up to the notes), and the notes.
fn migrated_command(file: &std::path::Path) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_walrelay"))
        .arg("migrate-from-debezium")
        .arg("--reuse-slot")
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "migrate-from-debezium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let (command, notes) = text.split_once("\n\n").unwrap_or((&text, ""));
    assert!(command.starts_with("walrelay run"), "{text}");
    (command.trim().to_string(), notes.to_string())
}

/// Debezium's records of the case's logical decoding messages on
/// `<topic.prefix>.message` (JsonConverter without schemas on both sides),
/// against `expected`; and migrate's note that walrelay publishes none.
fn debezium_messages(
    broker: &Broker,
    case: &Case,
    prefix: &str,
    expected: &[(bool, &str)],
    notes: &str,
    diffs: &mut Vec<String>,
) {
    let topic = format!("oracle_{}.message", case.id);
    if !notes.contains(&format!("to topic {topic}"))
        || !notes.contains("walrelay run publishes none")
    {
        diffs.push(format!(
            "migrate's notes do not say {topic} dries up: {notes}"
        ));
    }
    // A message of another prefix, or one from walrelay, must show too.
    let got = read_topics(broker, vec![topic.clone()], expected.len(), diffs);
    if got.len() != expected.len() {
        diffs.push(format!(
            "{topic} holds {} records, not Debezium's {}: {got:?}",
            got.len(),
            expected.len()
        ));
    }
    let json = |bytes: &Option<Vec<u8>>| -> serde_json::Value {
        bytes
            .as_deref()
            .and_then(|b| serde_json::from_slice(b).ok())
            .unwrap_or_default()
    };
    for record in &got {
        eprintln!(
            "  Debezium's {topic} (walrelay: none): key {} value {}",
            show(&record.raw_key),
            show(&record.raw_value)
        );
    }
    for (record, (transactional, content)) in got.iter().zip(expected) {
        let key = json(&record.raw_key);
        let value = json(&record.raw_value);
        let sent = value["message"]["content"]
            .as_str()
            .and_then(|b| {
                base64::Engine::decode(&base64::engine::general_purpose::STANDARD, b).ok()
            })
            .map(|b| String::from_utf8_lossy(&b).into_owned());
        let ok = key == serde_json::json!({ "prefix": prefix })
            && value["op"] == "m"
            && value["message"]["prefix"] == prefix
            && sent.as_deref() == Some(*content)
            // The transaction's id, none for a non-transactional message.
            && value["source"]["txId"].is_null() != *transactional;
        if !ok {
            diffs.push(format!(
                "{topic}: expected {content:?} (transactional: {transactional}), got key {} value {}",
                show(&record.raw_key),
                show(&record.raw_value)
            ));
        }
    }
}

/// Reads the case's topics of one side until its `count` records came.
fn read_side(broker: &Broker, case: &Case, side: &str, diffs: &mut Vec<String>) -> Vec<Received> {
    let topics = case
        .topics
        .iter()
        .map(|t| format!("{side}.{}.{t}", case.id))
        .collect();
    read_topics(broker, topics, case.count, diffs)
}

/// Reads `topics` until `count` records came, sorted by topic, partition
/// and offset; a topic that never appears is a difference, not the end of
/// the comparison.
fn read_topics(
    broker: &Broker,
    mut topics: Vec<String>,
    count: usize,
    diffs: &mut Vec<String>,
) -> Vec<Received> {
    let reader = broker.consumer();
    let deadline = Instant::now() + WAIT;
    while !topics.iter().all(|t| reader.has_topic(t)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    topics.retain(|t| {
        let there = reader.has_topic(t);
        if !there {
            diffs.push(format!("no topic {t}"));
        }
        there
    });
    if topics.is_empty() {
        return Vec::new();
    }
    let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
    reader.subscribe(&topics);
    let mut got = reader.read(count, WAIT);
    // One more moment: a duplicate or a stray record must show too.
    got.extend(reader.read_for(Duration::from_millis(300)));
    got.sort_by(|a, b| (&a.topic, a.partition, a.offset).cmp(&(&b.topic, b.partition, b.offset)));
    got
}

/// The shape of UUIDUtils.generateNewUUID (debezium-connector-common
/// .../connector/common/UUIDUtils.java): version 7, the RFC 4122 variant,
/// as java.util.UUID.toString writes it (lower-case 8-4-4-4-12 hex).
fn is_uuid_v7(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.iter().map(|g| g.len()).collect::<Vec<_>>() == [8, 4, 4, 4, 12]
        && text
            .bytes()
            .all(|b| b == b'-' || matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        && groups[2].starts_with('7')
        && groups[3].starts_with(['8', '9', 'a', 'b'])
}

fn show(bytes: &Option<Vec<u8>>) -> String {
    match bytes {
        None => "null".into(),
        Some(b) => match std::str::from_utf8(b) {
            Ok(text) => format!("{text:?}"),
            Err(_) => format!(
                "0x{}",
                b.iter().map(|x| format!("{x:02x}")).collect::<String>()
            ),
        },
    }
}

/// Every way walrelay's records differ from Debezium's in a case.
fn compare(case: &Case, dbz: &[Received], wr: &[Received]) -> Vec<String> {
    let mut diffs = Vec::new();
    if dbz.len() != case.count {
        diffs.push(format!(
            "Debezium published {} records, not {}",
            dbz.len(),
            case.count
        ));
    }
    if wr.len() != dbz.len() {
        diffs.push(format!(
            "walrelay published {} records, Debezium {}",
            wr.len(),
            dbz.len()
        ));
    }
    let uses_timestamp_column = case
        .options
        .iter()
        .any(|(k, _)| *k == "transforms.outbox.table.field.event.timestamp");
    let mut traced = 0;
    let mut run_ids: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (d, w) in dbz.iter().zip(wr) {
        let id = d.header("id").unwrap_or("?").to_string();
        let mut differ = |what: &str, dv: String, wv: String| {
            if dv != wv {
                diffs.push(format!("{id}: {what}: Debezium {dv}, walrelay {wv}"));
            }
        };
        differ(
            "topic",
            d.topic
                .trim_start_matches(&format!("dbz.{}.", case.id))
                .into(),
            w.topic
                .trim_start_matches(&format!("wr.{}.", case.id))
                .into(),
        );
        differ(
            "partition",
            d.partition.to_string(),
            w.partition.to_string(),
        );
        differ("offset", d.offset.to_string(), w.offset.to_string());
        differ("key", show(&d.raw_key), show(&w.raw_key));
        // Debezium 3's context headers (extended.headers.enabled, true by
        // default), which the migrated command sends too: the same bytes but
        // for the run id, a UUIDv7 each run makes for itself, compared by
        // its shape (and one per run on each side).
        let mut run_id =
            |side: &str, headers: &[(String, Option<Vec<u8>>)], diffs: &mut Vec<String>| {
                let names: Vec<&str> = headers
                    .iter()
                    .map(|(k, _)| k.as_str())
                    .filter(|k| k.starts_with(DEBEZIUM_CONTEXT))
                    .collect();
                if names != DEBEZIUM_CONTEXT_HEADERS {
                    diffs.push(format!("{id}: {side}'s context headers are {names:?}"));
                }
                // Under header.converter=JsonConverter, the string inside.
                let value = headers
                    .iter()
                    .find(|(k, _)| k == DEBEZIUM_CONTEXT_HEADERS[3])
                    .and_then(|(_, v)| v.as_deref())
                    .map(|v| String::from_utf8_lossy(v).into_owned())
                    .map(|v| match serde_json::from_str::<serde_json::Value>(&v) {
                        Ok(json) => json
                            .get("payload")
                            .unwrap_or(&json)
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                        Err(_) => v,
                    });
                match value {
                    Some(v) if is_uuid_v7(&v) => {
                        run_ids.entry(side.to_string()).or_default().insert(v);
                    }
                    other => diffs.push(format!("{id}: {side}'s runId {other:?} is no UUIDv7")),
                }
            };
        run_id("Debezium", &d.raw_headers, &mut diffs);
        run_id("walrelay", &w.raw_headers, &mut diffs);
        let without_run_id =
            |headers: &[(String, Option<Vec<u8>>)]| -> Vec<(String, Option<Vec<u8>>)> {
                headers
                    .iter()
                    .map(|(k, v)| {
                        if k == DEBEZIUM_CONTEXT_HEADERS[3] {
                            (k.clone(), Some(b"<run id>".to_vec()))
                        } else {
                            (k.clone(), v.clone())
                        }
                    })
                    .collect()
            };
        let dbz_raw = without_run_id(&d.raw_headers);
        let wr_raw = without_run_id(&w.raw_headers);
        let dbz_headers: Vec<&(String, Option<Vec<u8>>)> = dbz_raw.iter().collect();
        let headers = |headers: Vec<&(String, Option<Vec<u8>>)>| {
            headers
                .iter()
                .map(|(k, v)| format!("{k}={}", show(v)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let (trace, wr_headers): (Vec<_>, Vec<_>) = wr_raw.iter().partition(|(k, _)| {
            matches!(case.expect, Expect::WalrelayAddsTraceHeaders { .. })
                && (k == "traceparent" || k == "tracestate")
        });
        if let Expect::WalrelayAddsTraceHeaders { parent } = case.expect {
            match &trace[..] {
                [] => {}
                [(k, Some(v))] if k == "traceparent" && v == parent.as_bytes() => traced += 1,
                other => diffs.push(format!("{id}: walrelay's trace headers are {other:?}")),
            }
        }
        let mut differ = |what: &str, dv: String, wv: String| {
            if dv != wv {
                diffs.push(format!("{id}: {what}: Debezium {dv}, walrelay {wv}"));
            }
        };
        differ("headers", headers(dbz_headers), headers(wr_headers));
        let text = |v: &Option<Vec<u8>>| {
            v.as_deref()
                .map(|b| String::from_utf8_lossy(b).into_owned())
        };
        match case.expect {
            Expect::Same
            | Expect::WalrelayAddsTraceHeaders { .. }
            | Expect::DebeziumAlsoPublishesMessages { .. } => {
                differ("value", show(&d.raw_value), show(&w.raw_value))
            }
            Expect::EnvelopeNamedAfterFirstRoute { first } => {
                let route = w.topic.rsplit('.').next().unwrap_or_default();
                let name = |route: &str| {
                    format!(
                        "\"name\":\"oracle_{0}.public.outbox_{0}.{route}.Value\"",
                        case.id
                    )
                };
                let dv = text(&d.raw_value).unwrap_or_default();
                if !dv.contains(&name(first)) {
                    differ("envelope name", name(first), dv.clone());
                }
                differ(
                    "value (Debezium's renamed after the record's route)",
                    dv.replace(&name(first), &name(route)),
                    text(&w.raw_value).unwrap_or_default(),
                );
            }
            Expect::DebeziumTaskFails { .. } | Expect::BothFail { .. } => {
                unreachable!("nothing to compare")
            }
        }
        if uses_timestamp_column {
            differ(
                "timestamp",
                format!("{:?}", d.timestamp),
                format!("{:?}", w.timestamp),
            );
        } else if let (Some(dt), Some(wt)) = (d.timestamp, w.timestamp) {
            // Deliberate: walrelay stamps the commit time, Debezium the time
            // it processed the change (the envelope's ts_ms), which is later.
            if wt > dt {
                diffs.push(format!(
                    "{id}: walrelay's timestamp {wt} (the commit) is after Debezium's {dt} (its processing)"
                ));
            }
        }
    }
    for (side, ids) in &run_ids {
        if ids.len() > 1 {
            diffs.push(format!(
                "{side} sent {} run ids in one run: {ids:?}",
                ids.len()
            ));
        }
    }
    if matches!(case.expect, Expect::WalrelayAddsTraceHeaders { .. }) && traced == 0 {
        diffs.push("walrelay sent no traceparent".into());
    }
    diffs
}

/// Debezium's task of `case` failed with `error`, and published nothing.
fn debezium_fails(connect: &Connect, case: &Case, error: &str, diffs: &mut Vec<String>) {
    let path = format!("/connectors/dbz_{}/status", case.id);
    let deadline = Instant::now() + WAIT;
    let status = loop {
        let status = connect.get(&path).map(|(_, body)| body).unwrap_or_default();
        if status.contains("\"FAILED\"") || Instant::now() > deadline {
            break status;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    if !status.contains("\"FAILED\"") || !status.contains(error) {
        diffs.push(format!(
            "Debezium's task did not fail with {error:?}: {status}"
        ));
    }
}

/// walrelay stopped on the case's row with `error` in its log, and
/// published nothing: the row's event was mapped before any topic.
fn walrelay_fails(
    broker: &Broker,
    relay: &Relay,
    case: &Case,
    error: &str,
    diffs: &mut Vec<String>,
) {
    let deadline = Instant::now() + WAIT;
    while !relay.log().contains(error) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    if !relay.log().contains(error) {
        diffs.push(format!("walrelay did not stop with {error:?}"));
    }
    let reader = broker.consumer();
    for topic in case.topics {
        let topic = format!("wr.{}.{topic}", case.id);
        if reader.has_topic(&topic) {
            diffs.push(format!("walrelay created {topic}"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walrelay_publishes_what_debezium_publishes_for_the_same_outbox_rows() {
    let begun = Instant::now();
    let cases = cases();
    // Two slots and walsenders a case, beside the test's own connections.
    let pg = Postgres::start_with(&[
        "max_wal_senders = 100",
        "max_replication_slots = 100",
        "max_connections = 300",
    ]);
    let broker = Broker::apache();
    let client = pg.client().await;
    let files = TempDir::new("oracle");
    let mut dbz_files: Vec<PathBuf> = Vec::new();
    let mut commands = BTreeMap::new();
    let mut notes = BTreeMap::new();
    for case in &cases {
        client
            .batch_execute(&format!(
                "CREATE TABLE public.outbox_{} ({})",
                case.id, case.columns
            ))
            .await
            .unwrap();
        let table = format!("public.outbox_{}", case.id);
        if !case.setup.is_empty() {
            client
                .batch_execute(&case.setup.replace("{table}", &table))
                .await
                .unwrap();
        }
        let dbz = files.0.join(format!("dbz_{}.properties", case.id));
        properties(&pg, case, "dbz").write(&dbz);
        dbz_files.push(dbz);
        let wr = files.0.join(format!("wr_{}.properties", case.id));
        properties(&pg, case, "wr").write(&wr);
        let (command, case_notes) = migrated_command(&wr);
        commands.insert(case.id, command);
        notes.insert(case.id, case_notes);
    }

    let connect = Connect::start(&broker, &dbz_files);
    let relays: BTreeMap<&str, Relay> = commands
        .iter()
        .map(|(id, command)| {
            let relay = Relay::start_shell(command, &[("KAFKA_BROKERS", &broker.brokers())]);
            (*id, relay)
        })
        .collect();
    for (id, relay) in &relays {
        relay.wait_ready(WAIT);
        let _ = id;
    }
    // Debezium's task runs before it streams: rows count once its slot is
    // read (walrelay's is, once ready).
    support::eventually(WAIT, "every Debezium slot active", || async {
        let active: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'dbz\\_%' AND active",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        (active == cases.len() as i64).then_some(())
    })
    .await;
    eprintln!("{} cases set up in {:?}", cases.len(), begun.elapsed());

    for case in &cases {
        let table = format!("public.outbox_{}", case.id);
        client
            .batch_execute(&case.inserts.replace("{table}", &table))
            .await
            .unwrap_or_else(|e| panic!("inserts of {}: {e}", case.id));
    }

    let mut failures = Vec::new();
    for case in &cases {
        let mut diffs = Vec::new();
        if let Expect::BothFail { debezium, walrelay } = case.expect {
            debezium_fails(&connect, case, debezium, &mut diffs);
            walrelay_fails(&broker, &relays[case.id], case, walrelay, &mut diffs);
        } else if let Expect::DebeziumTaskFails { error, timestamp } = case.expect {
            debezium_fails(&connect, case, error, &mut diffs);
            let wr = read_side(&broker, case, "wr", &mut diffs);
            if wr.len() != case.count || wr.iter().any(|m| m.timestamp != Some(timestamp)) {
                diffs.push(format!("walrelay published {wr:?}"));
            }
        } else {
            let dbz = read_side(&broker, case, "dbz", &mut diffs);
            let wr = read_side(&broker, case, "wr", &mut diffs);
            diffs.extend(compare(case, &dbz, &wr));
            if let Expect::DebeziumAlsoPublishesMessages { prefix, messages } = case.expect {
                debezium_messages(&broker, case, prefix, messages, &notes[case.id], &mut diffs);
            }
        }
        if diffs.is_empty() {
            eprintln!("as expected: {} ({} records)", case.what, case.count);
        } else {
            failures.push(format!(
                "{} ({}):\n  {}\n  walrelay's command: {}",
                case.what,
                case.id,
                diffs.join("\n  "),
                commands[case.id].replace(" \\\n ", "")
            ));
        }
    }
    eprintln!("compared in {:?}", begun.elapsed());
    if !failures.is_empty() {
        for (id, relay) in &relays {
            if failures.iter().any(|f| f.contains(&format!("({id})"))) {
                eprintln!("--- walrelay log of {id} ---\n{}", relay.log());
            }
        }
        let log = connect.log();
        let errors: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("ERROR") || l.contains("Exception"))
            .take(40)
            .collect();
        panic!(
            "walrelay differs from Debezium in {} of {} cases:\n\n{}\n\nConnect's errors:\n{}",
            failures.len(),
            cases.len(),
            failures.join("\n\n"),
            errors.join("\n")
        );
    }
}
