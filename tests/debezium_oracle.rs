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

use std::collections::BTreeMap;
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

/// The headers Debezium 3 adds to every record, in order.
const DEBEZIUM_CONTEXT: &str = "__debezium.context.";
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
    /// The same but for the value, which is the `payload` part of
    /// Debezium's `{"schema","payload"}` (why: the case's comment).
    ValueIsDebeziumsPayloadPart,
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

/// Rows over two aggregate types and several keys (so all partitions),
/// with a NULL payload.
const ORDERS: &str = "INSERT INTO {table} (id, aggregatetype, aggregateid, type, payload) VALUES
   ('00000000-0000-0000-0000-000000000001', 'order', 'o-1', 'OrderCreated', '{\"total\": 10, \"lines\": [1, 2]}'),
   ('00000000-0000-0000-0000-000000000002', 'customer', 'c-1', 'CustomerMoved', '{\"city\": \"Oslo\"}'),
   ('00000000-0000-0000-0000-000000000003', 'order', 'o-2', 'OrderCreated', '{\"note\": \"caf\u{e9} \\\\ \\\"q\\\"\"}'),
   ('00000000-0000-0000-0000-000000000004', 'order', 'o-3', 'OrderPaid', NULL),
   ('00000000-0000-0000-0000-000000000005', 'order', 'o-1', 'OrderPaid', '[]'),
   ('00000000-0000-0000-0000-000000000006', 'customer', 'c-2', 'CustomerMoved', '\"just a string\"'),
   ('00000000-0000-0000-0000-000000000007', 'order', 'o-4', 'OrderShipped', '{\"n\": 1.50, \"big\": 12345678901234567890}');";

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
            inserts: ORDERS,
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
            // walrelay does not build the Connect schema Debezium derives
            // from each payload's JSON, so migrate-from-debezium turns
            // schemas.enable=true with expansion into --value-format json
            // (with a note): the value is Debezium's `payload` part alone.
            what: "expanded JSON payloads under schemas.enable=true are Debezium's payload part",
            id: "expand_schemas",
            columns: COLUMNS,
            options: &[
                DEFAULT_ROUTE,
                ("key.converter", JSON),
                ("value.converter", JSON),
                ("transforms.outbox.table.expand.json.payload", "true"),
            ],
            inserts: "INSERT INTO {table} (id, aggregatetype, aggregateid, type, payload) VALUES
               ('00000000-0000-0000-0000-000000000051', 'order', '1', 'OrderCreated', '{\"id\": 1, \"items\": [{\"sku\": \"a\"}]}');",
            topics: &["outbox.event.order"],
            count: 1,
            expect: Expect::ValueIsDebeziumsPayloadPart,
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
            inserts: "INSERT INTO {table} VALUES
               ('00000000-0000-0000-0000-000000000071', 'blob', 'b-1', 'Stored', '\\x00010203ff5c22'),
               ('00000000-0000-0000-0000-000000000072', 'blob', 'b-2', 'Stored', '\\x'),
               ('00000000-0000-0000-0000-000000000073', 'blob', 'b-3', 'Stored', NULL);",
            topics: &["outbox.event.blob"],
            count: 3,
            expect: Expect::Same,
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

/// The command `walrelay migrate-from-debezium --reuse-slot FILE` prints:
/// its output up to the notes.
fn migrated_command(file: &std::path::Path) -> String {
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
    let command = text.split("\n\n").next().unwrap().trim().to_string();
    assert!(command.starts_with("walrelay run"), "{text}");
    command
}

/// Reads the case's topics of one side until `count` records came; a topic
/// that never appears is a difference, not the end of the comparison.
fn read_side(broker: &Broker, case: &Case, side: &str, diffs: &mut Vec<String>) -> Vec<Received> {
    let reader = broker.consumer();
    let deadline = Instant::now() + WAIT;
    let mut topics: Vec<String> = case
        .topics
        .iter()
        .map(|t| format!("{side}.{}.{t}", case.id))
        .collect();
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
    let mut got = reader.read(case.count, WAIT);
    // One more moment: a duplicate or a stray record must show too.
    got.extend(reader.read_for(Duration::from_millis(500)));
    got.sort_by(|a, b| (&a.topic, a.partition, a.offset).cmp(&(&b.topic, b.partition, b.offset)));
    got
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
        // Deliberate: Debezium 3 adds headers that name its own connector
        // and run (extended.headers.enabled, true by default): walrelay has
        // no connector, task or run to name. The rest must be the same.
        let (context, dbz_headers): (Vec<_>, Vec<_>) = d
            .raw_headers
            .iter()
            .partition(|(k, _)| k.starts_with(DEBEZIUM_CONTEXT));
        let names: Vec<&str> = context.iter().map(|(k, _)| k.as_str()).collect();
        if names != DEBEZIUM_CONTEXT_HEADERS {
            diffs.push(format!("{id}: Debezium's context headers are {names:?}"));
        }
        let headers = |headers: Vec<&(String, Option<Vec<u8>>)>| {
            headers
                .iter()
                .map(|(k, v)| format!("{k}={}", show(v)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut differ = |what: &str, dv: String, wv: String| {
            if dv != wv {
                diffs.push(format!("{id}: {what}: Debezium {dv}, walrelay {wv}"));
            }
        };
        differ(
            "headers",
            headers(dbz_headers),
            headers(w.raw_headers.iter().collect()),
        );
        match case.expect {
            Expect::Same => differ("value", show(&d.raw_value), show(&w.raw_value)),
            Expect::ValueIsDebeziumsPayloadPart => {
                let parse = |v: &Option<Vec<u8>>| -> serde_json::Value {
                    serde_json::from_slice(v.as_deref().unwrap_or(b"null")).unwrap()
                };
                differ(
                    "value (Debezium's payload part)",
                    parse(&d.raw_value)["payload"].to_string(),
                    parse(&w.raw_value).to_string(),
                );
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
    diffs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walrelay_publishes_what_debezium_publishes_for_the_same_outbox_rows() {
    let begun = Instant::now();
    let cases = cases();
    // Two slots and walsenders a case, beside the test's own connections.
    let pg = Postgres::start_with(&[
        "max_wal_senders = 40",
        "max_replication_slots = 40",
        "max_connections = 200",
    ]);
    let broker = Broker::apache();
    let client = pg.client().await;
    let files = TempDir::new("oracle");
    let mut dbz_files: Vec<PathBuf> = Vec::new();
    let mut commands = BTreeMap::new();
    for case in &cases {
        client
            .batch_execute(&format!(
                "CREATE TABLE public.outbox_{} ({})",
                case.id, case.columns
            ))
            .await
            .unwrap();
        let dbz = files.0.join(format!("dbz_{}.properties", case.id));
        properties(&pg, case, "dbz").write(&dbz);
        dbz_files.push(dbz);
        let wr = files.0.join(format!("wr_{}.properties", case.id));
        properties(&pg, case, "wr").write(&wr);
        commands.insert(case.id, migrated_command(&wr));
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
        let dbz = read_side(&broker, case, "dbz", &mut diffs);
        let wr = read_side(&broker, case, "wr", &mut diffs);
        diffs.extend(compare(case, &dbz, &wr));
        if diffs.is_empty() {
            eprintln!("same: {} ({} records)", case.what, dbz.len());
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
