//! Password authentication and least privilege: walrelay runs as a
//! `LOGIN REPLICATION` role that is not a superuser, and its password never
//! shows in logs or metrics. Nor does the value of a Kafka property
//! librdkafka refuses, a misspelt password being one (issue 19): not in
//! `run`'s log, not in what `walrelay check` prints. (walrelay makes its
//! producer first, so such a property stops it before anything else; no
//! metric carries a property's value.)

mod support;

use std::time::Duration;

use support::outbox::events;
use support::pg::drop_slot;
use support::{check_entry, check_json, Broker, Postgres, Relay};

const WAIT: Duration = Duration::from_secs(60);

/// Prepares the least-privilege set-up of docs/security.md as the table
/// owner, with the state table a DBA creates (sql/walrelay_state.sql) or
/// without it.
async fn least_privilege_setup(
    pg: &Postgres,
    password_encryption: &str,
    password: &str,
    state_table: bool,
) {
    let client = pg.client_with_outbox().await;
    client
        .batch_execute(&format!(
            "CREATE PUBLICATION walrelay FOR TABLE public.outbox WITH (publish = 'insert');
             SET password_encryption = '{password_encryption}';
             CREATE ROLE walrelay LOGIN REPLICATION PASSWORD '{password}';
             GRANT USAGE ON SCHEMA public TO walrelay;
             GRANT SELECT ON public.outbox TO walrelay;
             REVOKE CREATE ON SCHEMA public FROM PUBLIC;"
        ))
        .await
        .unwrap();
    if state_table {
        client
            .batch_execute(include_str!("../sql/walrelay_state.sql"))
            .await
            .unwrap();
    }
}

async fn relays_one_event_as_the_walrelay_role(method: &str) {
    let password = format!("Pw-{method}-9f3c1");
    let pg = Postgres::start_with_host_auth(method);
    least_privilege_setup(&pg, method, &password, true).await;
    let broker = Broker::start();
    let relay = Relay::start_raw(&pg.url_as("walrelay", &password), &broker.brokers(), &[]);
    relay.wait_ready(WAIT);

    let client = pg.client().await;
    client
        .batch_execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES (gen_random_uuid(), 'order', 'o-1', 'Secured', '{}')",
        )
        .await
        .unwrap();
    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.Secured"]);
    assert_eq!(reader.read(1, WAIT).len(), 1, "log:\n{}", relay.log());

    let superuser: bool = client
        .query_one(
            "SELECT rolsuper FROM pg_roles WHERE rolname = 'walrelay'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!superuser);
    let (_, metrics) = relay.http_get("/metrics").unwrap();
    for text in [relay.log(), metrics] {
        assert!(!text.contains(&password), "the password leaked:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_sha_256_role_without_superuser_relays_events() {
    relays_one_event_as_the_walrelay_role("scram-sha-256").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn md5_role_without_superuser_relays_events() {
    relays_one_event_as_the_walrelay_role("md5").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_least_privilege_role_never_takes_a_dropped_slot_for_a_first_start() {
    let password = "Pw-drop-4c1d";
    let pg = Postgres::start_with_host_auth("scram-sha-256");
    least_privilege_setup(&pg, "scram-sha-256", password, true).await;
    let broker = Broker::start();
    let url = pg.url_as("walrelay", password);
    let mut relay = Relay::start_raw(&url, &broker.brokers(), &[]);
    relay.wait_ready(WAIT);
    assert!(relay.terminate(WAIT).success());

    let client = pg.client().await;
    events("WhileDown", 5).insert(&client).await;
    drop_slot(&client, "walrelay").await;
    let mut relay = Relay::start_raw(&url, &broker.brokers(), &[]);
    let log = relay.wait_for_missing_slot_refusal(WAIT);
    assert!(
        log.contains("replication slot \"walrelay\" is missing"),
        "{log}"
    );
    assert!(!slot_exists(&client).await, "walrelay recreated the slot");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_least_privilege_role_without_the_state_table_is_refused_before_any_slot_exists() {
    let password = "Pw-nostate-71aa";
    let pg = Postgres::start_with_host_auth("scram-sha-256");
    least_privilege_setup(&pg, "scram-sha-256", password, false).await;
    let broker = Broker::start();
    let mut relay = Relay::start_raw(&pg.url_as("walrelay", password), &broker.brokers(), &[]);
    let log = relay.wait_for_failure(WAIT);
    assert!(log.contains("sql/walrelay_state.sql"), "{log}");
    assert!(log.contains("GRANT SELECT, INSERT, UPDATE ON"), "{log}");
    let client = pg.client().await;
    assert!(
        !slot_exists(&client).await,
        "a failed start left a slot behind"
    );
    assert!(!log.contains(password), "{log}");
}

/// The command `walrelay migrate-from-debezium` prints has no password in
/// it; with the password in PGPASSWORD (libpq's variable) it runs as printed
/// against a role that must log in with one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_migrated_command_runs_as_printed_with_the_password_in_pgpassword() {
    let password = "Pw-migrate-5e2b";
    let pg = Postgres::start_with_host_auth("scram-sha-256");
    least_privilege_setup(&pg, "scram-sha-256", password, true).await;
    let broker = Broker::start();
    let dir = support::TempDir::new("migrate");
    let connector = dir.0.join("connector.json");
    std::fs::write(
        &connector,
        serde_json::json!({
            "name": "outbox",
            "config": {
                "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
                "database.hostname": "127.0.0.1",
                "database.port": pg.port.to_string(),
                "database.user": "walrelay",
                "database.password": password,
                "database.dbname": "postgres",
                "plugin.name": "pgoutput",
                "publication.name": "walrelay",
                "table.include.list": "public.outbox",
                "key.converter": "org.apache.kafka.connect.storage.StringConverter",
                "value.converter": "org.apache.kafka.connect.storage.StringConverter",
                "transforms": "outbox",
                "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
                "transforms.outbox.table.field.event.key": "aggregate_id",
                "transforms.outbox.route.by.field": "event_type",
            }
        })
        .to_string(),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_walrelay"))
        .arg("migrate-from-debezium")
        .arg(&connector)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).unwrap();
    assert!(!printed.contains(password), "{printed}");
    assert!(
        printed.contains("PGPASSWORD"),
        "the notes say where the password goes: {printed}"
    );
    let command = printed.split("\n\n").next().unwrap();

    let relay = Relay::start_shell(
        command,
        &[
            ("KAFKA_BROKERS", &broker.brokers()),
            ("PGPASSWORD", password),
        ],
    );
    relay.wait_ready(WAIT);
    pg.client()
        .await
        .batch_execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES (gen_random_uuid(), 'order', 'o-1', 'Migrated', '{}')",
        )
        .await
        .unwrap();
    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.Migrated"]);
    assert_eq!(reader.read(1, WAIT).len(), 1, "log:\n{}", relay.log());
    assert!(!relay.log().contains(password), "{}", relay.log());
}

async fn slot_exists(client: &tokio_postgres::Client) -> bool {
    client
        .query_opt(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = 'walrelay'",
            &[],
        )
        .await
        .unwrap()
        .is_some()
}

#[test]
fn help_shows_no_secret_from_the_environment() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_walrelay"))
        .args(["run", "--help"])
        .env("WALRELAY_PG_URL", "postgres://u:env-secret-77@h/db")
        .env(
            "WALRELAY_PG_PRIMARY_URL",
            "postgres://u:primary-secret-66@h/db",
        )
        .env("WALRELAY_KAFKA_PROPERTIES", "sasl.password=kafka-secret-88")
        .env(
            "WALRELAY_ALERT_WEBHOOK",
            "http://ops:hook-secret-99@alerts:8080/hook",
        )
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("--pg-url") && help.contains("--pg-primary-url"),
        "{help}"
    );
    assert!(
        !help.contains("env-secret-77")
            && !help.contains("primary-secret-66")
            && !help.contains("kafka-secret-88")
            && !help.contains("hook-secret-99"),
        "{help}"
    );
}

/// A misspelling of each librdkafka property that holds a secret (and
/// Java's sasl.jaas.config, which librdkafka does not know at all), each
/// with a value of its own, and the property walrelay suggests.
const MISSPELT: &[(&str, &str, Option<&str>)] = &[
    ("sasl.pasword", "typo-secret-sasl-1", Some("sasl.password")),
    (
        "ssl.key.pasword",
        "typo-secret-sslkey-2",
        Some("ssl.key.password"),
    ),
    (
        "sasl.oauthbearer.client.secert",
        "typo-secret-oidc-3",
        Some("sasl.oauthbearer.client.secret"),
    ),
    ("sasl.jaas.config", "typo-secret-jaas-4", None),
    (
        "ssl.keystore.passwd",
        "typo-secret-keystore-5",
        Some("ssl.keystore.password"),
    ),
    ("ssl.key.pme", "typo-secret-pem-6", Some("ssl.key.pem")),
    (
        "sasl.oauthbearer.cofig",
        "typo-secret-unsecured-jwt-7",
        Some("sasl.oauthbearer.config"),
    ),
    (
        "SASL.PASSWORD",
        "typo-secret-cased-8",
        Some("sasl.password"),
    ),
];

fn assert_no_misspelt_secret(output: &str) {
    for (_, secret, _) in MISSPELT {
        assert!(!output.contains(secret), "{secret} leaked:\n{output}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misspelt_secret_property_stops_run_naming_the_property_meant_and_never_its_value() {
    let pg = Postgres::start();
    let _client = pg.client_with_outbox().await;
    let broker = Broker::start();
    for (i, (key, secret, meant)) in MISSPELT.iter().enumerate() {
        let property = format!("{key}={secret}");
        // Every other line as JSON: its escaping must not unmask a value.
        let format = if i % 2 == 0 { "text" } else { "json" };
        let mut relay = Relay::start_with(&pg, &broker, &["-X", &property, "--log-format", format]);
        let log = relay.wait_for_failure(WAIT);
        assert!(
            log.contains("cannot create the Kafka producer"),
            "{key}:\n{log}"
        );
        assert!(log.contains(&format!("-X {key}=<redacted>")), "{log}");
        if let Some(meant) = meant {
            assert!(log.contains(&format!("did you mean {meant}?")), "{log}");
        }
        assert_no_misspelt_secret(&log);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walrelay_check_never_prints_a_misspelt_secret_propertys_value() {
    let pg = Postgres::start();
    let _client = pg.client_with_outbox().await;
    let broker = Broker::start();
    let base = [
        "--pg-url".to_string(),
        pg.url(),
        "--kafka-brokers".into(),
        broker.brokers(),
    ];
    for (key, secret, _) in MISSPELT {
        let mut args = base.to_vec();
        args.extend(["-X".into(), format!("{key}={secret}")]);
        let mut text_args: Vec<&str> = vec!["check"];
        text_args.extend(args.iter().map(String::as_str));
        let (ok, text, text_log) = support::walrelay(&text_args);
        assert!(!ok, "{text}");
        assert!(text.contains(&format!("-X {key}=<redacted>")), "{text}");
        let (_, doc, json_output) = check_json(&args);
        let brokers = check_entry(&doc, "kafka.brokers");
        assert_eq!(brokers["status"], "fail", "{brokers:#}");
        assert_no_misspelt_secret(&format!("{text}\n{text_log}\n{json_output}"));
    }
    // A value that is not key=value at all is refused by the flag parser,
    // which names the flag and not what was given.
    let mut args: Vec<&str> = vec!["check"];
    args.extend(base.iter().map(String::as_str));
    args.extend(["-X", "sasl.password:typo-secret-sasl-1"]);
    let (ok, stdout, stderr) = support::walrelay(&args);
    assert!(!ok);
    assert!(stderr.contains("--kafka-property"), "{stderr}");
    assert_no_misspelt_secret(&format!("{stdout}\n{stderr}"));
}
