//! Debezium's router reads no event-type column and sends no `event_type`
//! header: the command `migrate-from-debezium` prints starts against the
//! documented outbox table and sends only the `id` header.

use std::process::Command;
use std::time::Duration;

use crate::support::Stack;

/// The "Basic outbox table" of outbox-event-router.adoc: id uuid,
/// aggregatetype, aggregateid and type varchar(255) not null, payload jsonb.
const DOCUMENTED_TABLE: &str = "CREATE TABLE public.outbox (
    id uuid NOT NULL PRIMARY KEY,
    aggregatetype varchar(255) NOT NULL,
    aggregateid varchar(255) NOT NULL,
    type varchar(255) NOT NULL,
    payload jsonb
)";

/// The flags of a printed `walrelay run \` command, shell quotes removed.
fn printed_flags(stdout: &str) -> Vec<String> {
    let mut flags = Vec::new();
    for line in stdout.lines().skip(1) {
        let line = line.trim().trim_end_matches('\\').trim_end();
        if line.is_empty() {
            break;
        }
        let (flag, value) = line.split_once(' ').unwrap_or((line, ""));
        flags.push(flag.to_string());
        if !value.is_empty() {
            let unquoted = match value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')) {
                Some(inner) => inner.replace("'\\''", "'"),
                None => value.to_string(),
            };
            flags.push(unquoted);
        }
    }
    flags
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_migrated_command_sends_only_the_id_header_from_the_documented_table() {
    let out = Command::new(env!("CARGO_BIN_EXE_walrelay"))
        .args([
            "migrate-from-debezium",
            "tests/fixtures/debezium/documented-basic.properties",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let mut flags = printed_flags(&stdout);
    // The test's own database and broker replace the connector's.
    for flag in ["--pg-url", "--kafka-brokers"] {
        let at = flags.iter().position(|f| f == flag).unwrap();
        flags.drain(at..at + 2);
    }
    assert!(
        flags
            .windows(2)
            .any(|w| w[0] == "--field-event-type" && w[1].is_empty()),
        "{stdout}"
    );

    let args: Vec<&str> = flags.iter().map(String::as_str).collect();
    let stack = Stack::start_on(DOCUMENTED_TABLE, &args).await;
    // The documented example row (outbox-event-router.adoc, "Example outbox message").
    stack
        .client
        .batch_execute(
            "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES \
             ('4d47e190-0402-4048-bc2c-89dd54343cdc', 'order', '1', 'OrderCreated', \
              '{\"id\": 1, \"customerId\": 123}')",
        )
        .await
        .unwrap();
    let reader = stack.broker.consumer();
    reader.subscribe(&["outbox.event.order"]);
    let got = reader.read(1, Duration::from_secs(60));
    assert_eq!(got.len(), 1, "{stdout}\nlog:\n{}", stack.relay.log());
    let m = &got[0];
    // "# Kafka Message Headers: "id=4d47e190-0402-4048-bc2c-89dd54343cdc"".
    assert_eq!(m.headers.len(), 1, "{:?}", m.headers);
    assert_eq!(m.header("id"), Some("4d47e190-0402-4048-bc2c-89dd54343cdc"));
    assert_eq!(m.key.as_deref(), Some("1"));
    assert_eq!(m.value.as_deref(), Some(r#"{"id": 1, "customerId": 123}"#));
}
