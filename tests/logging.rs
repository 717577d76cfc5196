//! `--log-format json`: every stderr line is one JSON object with stable
//! field names, and no secret from the command line shows in any of them.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{Broker, Postgres, Relay};

const WAIT: Duration = Duration::from_secs(60);
const PG_PASSWORD: &str = "Pg-Secret-4711";
const KAFKA_PASSWORD: &str = "Kafka-Secret-0815";

/// Parses every line; panics naming the first that is not a JSON object.
fn json_lines(log: &str) -> Vec<serde_json::Map<String, Value>> {
    log.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| match serde_json::from_str(l) {
            Ok(Value::Object(o)) => o,
            _ => panic!("not a JSON object: {l}\n--- log ---\n{log}"),
        })
        .collect()
}

fn assert_common_fields(line: &serde_json::Map<String, Value>) {
    let time = line["time"].as_str().expect("time is a string");
    assert!(
        time.len() >= 20 && time.as_bytes()[10] == b'T' && time.ends_with('Z'),
        "time is not RFC 3339 UTC: {time}"
    );
    let level = line["level"].as_str().expect("level is a string");
    assert!(
        ["trace", "debug", "info", "warn", "error"].contains(&level),
        "{line:?}"
    );
    assert!(line["target"].is_string(), "{line:?}");
    assert!(line.contains_key("message"), "{line:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_have_stable_fields_and_no_secret_during_a_real_run() {
    let pg = Postgres::start_with_host_auth("scram-sha-256");
    let client = pg.client_with_outbox().await;
    client
        .batch_execute(&format!("ALTER ROLE postgres PASSWORD '{PG_PASSWORD}'"))
        .await
        .unwrap();
    let broker = Broker::start();
    let property = format!("sasl.password={KAFKA_PASSWORD}");
    let mut relay = Relay::start_raw(
        &pg.url_as("postgres", PG_PASSWORD),
        &broker.brokers(),
        &["--log-format", "json", "-X", &property],
    );
    relay.wait_ready(WAIT);
    client
        .batch_execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES (gen_random_uuid(), 'order', 'o-1', 'Logged', '{}')",
        )
        .await
        .unwrap();
    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.Logged"]);
    assert_eq!(reader.read(1, WAIT).len(), 1, "log:\n{}", relay.log());
    assert!(relay.terminate(WAIT).success());

    let log = relay.log();
    let lines = json_lines(&log);
    assert!(lines.len() >= 3, "{log}");
    for line in &lines {
        assert_common_fields(line);
    }
    // The event's own fields sit at the top level under their names.
    let started = lines
        .iter()
        .find(|l| l["message"] == "streaming started")
        .unwrap_or_else(|| panic!("no 'streaming started' line:\n{log}"));
    assert_eq!(started["slot"], "walrelay", "{started:?}");
    assert!(
        started["resume_lsn"].as_str().unwrap().contains('/'),
        "{started:?}"
    );
    assert!(lines.iter().any(|l| l["message"] == "walrelay stopped"));
    for secret in [PG_PASSWORD, KAFKA_PASSWORD] {
        assert!(!log.contains(secret), "{secret} leaked:\n{log}");
    }
}

#[test]
fn every_subcommand_takes_the_format_from_the_environment() {
    let port = support::free_port();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_walrelay"))
        .args(["status", "--pg-url"])
        .arg(format!(
            "postgres://walrelay:{PG_PASSWORD}@127.0.0.1:{port}/app"
        ))
        .env("WALRELAY_LOG_FORMAT", "json")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines = json_lines(&stderr);
    let error = lines
        .iter()
        .find(|l| l["level"] == "error")
        .unwrap_or_else(|| panic!("no error line:\n{stderr}"));
    assert_common_fields(error);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains(&port.to_string()),
        "the error names the unreachable address: {error:?}"
    );
    assert!(!stderr.contains(PG_PASSWORD), "{stderr}");
}

#[test]
fn an_unknown_log_format_is_refused_with_the_choices() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_walrelay"))
        .args([
            "--log-format",
            "yaml",
            "status",
            "--pg-url",
            "postgres://h/db",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("text") && stderr.contains("json"),
        "{stderr}"
    );
}
