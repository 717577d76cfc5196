//! `walrelay check`: each check passes on a prepared set-up and fails, with
//! its fix, on a broken one. Clusters are shared between scenarios: one
//! good cluster hosts the table, role, publication and slot scenarios.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use serde_json::Value;
use support::pg::{confirmed_flush_lsn, drop_slot, lsn_number, slots_and_publications};
use support::{check_entry as entry, free_port, Broker, Postgres, Relay};

/// `walrelay check --json` with `run`'s connection flags: (success, report).
fn check(pg_url: &str, brokers: &str, extra: &[&str]) -> (bool, Value) {
    let (code, doc) = check_exit(pg_url, brokers, extra);
    (code == 0, doc)
}

/// The same, with check's exit code.
fn check_exit(pg_url: &str, brokers: &str, extra: &[&str]) -> (i32, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_walrelay"))
        .args([
            "check",
            "--json",
            "--pg-url",
            pg_url,
            "--kafka-brokers",
            brokers,
        ])
        .args(extra)
        .env_remove("WALRELAY_PG_URL")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let doc: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}):\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(doc["ok"].as_bool(), Some(out.status.success()), "{doc:#}");
    // A failure or warning that does not say what fixes it is a bug.
    for c in doc["checks"].as_array().into_iter().flatten() {
        if c["status"] == "fail" || c["status"] == "warn" {
            assert!(
                c["fix"].as_str().is_some_and(|f| !f.is_empty()),
                "{} {} with no fix: {c:#}",
                c["name"],
                c["status"]
            );
        }
    }
    (out.status.code().expect("check exited by a signal"), doc)
}

/// Asserts a check's status, and that a failure or warning names `fix`
/// (in its fix, or in its detail for run's own start-up messages).
fn assert_check(doc: &Value, name: &str, status: &str, fix: &str) {
    let c = entry(doc, name);
    assert_eq!(c["status"], status, "{name}: {c:#}");
    let text = format!(
        "{} {}",
        c["detail"].as_str().unwrap_or(""),
        c["fix"].as_str().unwrap_or("")
    );
    assert!(text.contains(fix), "{name} should mention {fix:?}: {c:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_database_and_broker_pass_every_check_and_nothing_is_created() {
    let pg = Postgres::start_with(&["max_slot_wal_keep_size = '1GB'"]);
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;

    let (ok, doc) = check(&pg.url(), &broker.brokers(), &[]);
    assert!(ok, "{doc:#}");
    for (name, detail) in [
        ("postgres.connect", "connected"),
        ("postgres.wal_level", "logical"),
        ("postgres.replication_slots", "free"),
        ("postgres.wal_senders", "max_wal_senders"),
        ("postgres.max_slot_wal_keep_size", "1.0 GiB"),
        ("postgres.role", "SUPERUSER"),
        ("postgres.table", "aggregate_id"),
        ("postgres.table_select", "may SELECT"),
        ("postgres.partitioning", "not partitioned"),
        ("postgres.publication", "walrelay run creates it"),
        ("postgres.state", "a first start"),
        ("postgres.slot", "walrelay run creates it"),
        ("kafka.brokers", "broker(s)"),
        ("kafka.describe_topics", "outbox.event.WalrelayCheck"),
        ("kafka.create_topics", "validated only"),
        ("kafka.idempotent_write", "InitProducerId"),
        ("kafka.topics", "no topic matching"),
    ] {
        assert_check(&doc, name, "pass", detail);
    }
    // Slot failover came with PostgreSQL 17; run creates a failover slot.
    if support::pg::major_version() >= 17 {
        assert_check(&doc, "postgres.slot_failover", "pass", "failover = true");
    } else {
        assert_check(&doc, "postgres.slot_failover", "skip", "17+");
    }

    // A pre-flight changes nothing.
    assert_eq!(slots_and_publications(&client).await, (0, 0));

    // After a real run: the slot and publication exist, a topic too.
    let mut relay = Relay::start(&pg, &broker);
    relay.wait_ready(Duration::from_secs(60));
    client
        .batch_execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES (gen_random_uuid(), 'order', 'o-1', 'Checked', '{}')",
        )
        .await
        .unwrap();
    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.Checked"]);
    assert_eq!(reader.read(1, Duration::from_secs(60)).len(), 1);
    // A second walrelay's pre-flight sees the slot held by the first.
    let (ok, doc) = check(&pg.url(), &broker.brokers(), &[]);
    assert!(ok, "{doc:#}");
    assert_check(&doc, "postgres.slot", "pass", "wait as a standby");
    assert_check(&doc, "postgres.publication", "pass", "publishes inserts");
    assert_check(
        &doc,
        "kafka.topics",
        "pass",
        "outbox.event.Checked (3 partitions",
    );
    // The create-topic probe was validated only: no such topic exists.
    let topics = entry(&doc, "kafka.topics")["detail"].as_str().unwrap();
    assert!(!topics.contains("WalrelayCheck"), "{topics}");
    assert_check(&doc, "postgres.state", "pass", "remembers slot");
    // Without the guard, changes undone between two checks go unseen.
    assert_check(&doc, "postgres.guard", "warn", "sql/walrelay_guard.sql");
    client
        .batch_execute(include_str!("../sql/walrelay_guard.sql"))
        .await
        .unwrap();
    let (_, doc) = check(&pg.url(), &broker.brokers(), &[]);
    assert_check(&doc, "postgres.guard", "pass", "exact WAL position");
    // One broker: an acknowledged event lives on one disk.
    assert_check(
        &doc,
        "kafka.durability",
        "warn",
        "--topic-replication-factor 3",
    );
    relay.terminate(Duration::from_secs(30));

    // The checklist for people: a line per check, exit code 0.
    let out = Command::new(env!("CARGO_BIN_EXE_walrelay"))
        .args(["check", "--pg-url", &pg.url(), "--kafka-brokers"])
        .arg(broker.brokers())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("ok    postgres.wal_level"), "{text}");
    assert!(text.contains("0 failing"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_settings_and_an_unreachable_broker_fail_with_their_fixes() {
    let pg = Postgres::start_with(&[
        "wal_level = replica",
        "max_replication_slots = 1",
        "max_wal_senders = 0",
    ]);
    let client = pg.client_with_outbox().await;
    client
        .batch_execute("SELECT pg_create_physical_replication_slot('taken')")
        .await
        .unwrap();
    let nobody = format!("127.0.0.1:{}", free_port());

    let (ok, doc) = check(&pg.url(), &nobody, &[]);
    assert!(!ok);
    assert_check(
        &doc,
        "postgres.wal_level",
        "fail",
        "ALTER SYSTEM SET wal_level = logical",
    );
    assert_check(
        &doc,
        "postgres.replication_slots",
        "fail",
        "max_replication_slots = 2",
    );
    assert_check(&doc, "postgres.wal_senders", "fail", "max_wal_senders = 2");
    assert_check(
        &doc,
        "postgres.max_slot_wal_keep_size",
        "warn",
        "max_slot_wal_keep_size = '10GB'",
    );
    assert_check(&doc, "kafka.brokers", "fail", "--kafka-brokers");
    assert_check(&doc, "kafka.create_topics", "skip", "reachable broker");

    // People get the fix under each failure, and a non-zero exit.
    let out = Command::new(env!("CARGO_BIN_EXE_walrelay"))
        .args(["check", "--pg-url", &pg.url(), "--kafka-brokers", &nobody])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(text.contains("FAIL  postgres.wal_senders"), "{text}");
    assert!(text.contains("fix: raise max_wal_senders"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_role_publication_and_slot_problems_fail_with_their_fixes() {
    let pg = Postgres::start();
    let client = pg.client_with_outbox().await;
    client
        .batch_execute(
            "CREATE ROLE plain LOGIN;
             CREATE TABLE events_p (LIKE outbox) PARTITION BY LIST (aggregate_type);
             CREATE TABLE events_p_order PARTITION OF events_p FOR VALUES IN ('order');
             CREATE PUBLICATION pub_leaf FOR TABLE events_p WITH (publish = 'insert');
             CREATE PUBLICATION pub_root FOR TABLE events_p
               WITH (publish = 'insert', publish_via_partition_root = true);
             CREATE PUBLICATION pub_updates FOR TABLE outbox WITH (publish = 'update');
             CREATE TABLE other (id int);
             CREATE PUBLICATION pub_other FOR TABLE other;
             SELECT pg_create_physical_replication_slot('physical');",
        )
        .await
        .unwrap();
    let url = pg.url();
    let broker = Broker::start();
    let brokers = broker.brokers();

    // A role with neither REPLICATION nor SELECT, which owns nothing.
    let (ok, doc) = check(&pg.url_as("plain", "unused"), &brokers, &[]);
    assert!(!ok);
    assert_check(
        &doc,
        "postgres.role",
        "fail",
        r#"ALTER ROLE "plain" REPLICATION;"#,
    );
    assert_check(
        &doc,
        "postgres.table_select",
        "warn",
        r#"GRANT SELECT ON "public"."outbox" TO "plain";"#,
    );
    assert_check(
        &doc,
        "postgres.publication",
        "fail",
        r#"CREATE PUBLICATION "walrelay" FOR TABLE "public"."outbox""#,
    );

    // The table, and a mapped column.
    let (_, doc) = check(&url, &brokers, &["--table", "public.missing"]);
    assert_check(&doc, "postgres.table", "fail", "does not exist");
    assert_check(&doc, "postgres.table_select", "skip", "needs the table");
    let (_, doc) = check(&url, &brokers, &["--field-payload", "body"]);
    assert_check(&doc, "postgres.table", "fail", "no column \"body\"");

    // A partitioned table needs publish_via_partition_root.
    let partitioned = ["--table", "public.events_p", "--publication"];
    let (_, doc) = check(&url, &brokers, &[&partitioned[..], &["pub_leaf"]].concat());
    assert_check(
        &doc,
        "postgres.partitioning",
        "fail",
        "SET (publish_via_partition_root = true)",
    );
    let (_, doc) = check(&url, &brokers, &[&partitioned[..], &["absent"]].concat());
    assert_check(
        &doc,
        "postgres.partitioning",
        "pass",
        "creates publication \"absent\" with publish_via_partition_root = true",
    );
    let (ok, doc) = check(&url, &brokers, &[&partitioned[..], &["pub_root"]].concat());
    assert_check(
        &doc,
        "postgres.partitioning",
        "pass",
        "via the partition root",
    );
    assert!(ok, "{doc:#}");

    // The publication must publish inserts of the table.
    let (_, doc) = check(&url, &brokers, &["--publication", "pub_updates"]);
    assert_check(
        &doc,
        "postgres.publication",
        "fail",
        "SET (publish = 'insert')",
    );
    let (_, doc) = check(&url, &brokers, &["--publication", "pub_other"]);
    assert_check(
        &doc,
        "postgres.publication",
        "fail",
        r#"ADD TABLE "public"."outbox""#,
    );

    // An existing slot must be a logical pgoutput slot.
    let (_, doc) = check(&url, &brokers, &["--slot", "physical"]);
    assert_check(
        &doc,
        "postgres.slot",
        "fail",
        "pg_drop_replication_slot('physical')",
    );
    // Failover exists from PostgreSQL 17 only.
    // A physical slot has no failover to speak of before PostgreSQL 17.
    if support::pg::major_version() >= 17 {
        assert_check(&doc, "postgres.slot_failover", "warn", "FAILOVER true");
    } else {
        assert_check(&doc, "postgres.slot_failover", "skip", "17+");
    }

    // Kafka refusals, from librdkafka's mock cluster (tansu has no ACLs):
    // describing the topic and getting a producer id.
    let mock = MockCluster::<DefaultProducerContext>::new(1).unwrap();
    mock.topic_error(
        "outbox.event.WalrelayCheck",
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
    )
    .unwrap();
    mock.request_errors(
        RDKafkaApiKey::InitProducerId,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED; 20],
    );
    let (ok, doc) = check(&url, &mock.bootstrap_servers(), &[]);
    assert!(!ok);
    assert_check(&doc, "kafka.brokers", "pass", "broker(s)");
    assert_check(
        &doc,
        "kafka.describe_topics",
        "fail",
        "--operation Describe",
    );
    assert_check(&doc, "kafka.idempotent_write", "fail", "IDEMPOTENT_WRITE");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_outbox_table_is_checked_and_a_missing_one_fails_by_name() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    support::outbox::add_outbox(&client, "billing").await;
    let tables = ["--table", "public.outbox,billing.outbox,audit.outbox"];
    let (ok, doc) = check(&pg.url(), &broker.brokers(), &tables);
    assert!(!ok, "{doc:#}");
    let table_checks: Vec<&Value> = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"] == "postgres.table")
        .collect();
    assert_eq!(table_checks.len(), 3, "{doc:#}");
    for (check, table) in table_checks.iter().zip(["public.outbox", "billing.outbox"]) {
        assert_eq!(check["status"], "pass", "{check:#}");
        assert!(
            check["detail"].as_str().unwrap().contains(table),
            "{check:#}"
        );
    }
    assert_eq!(table_checks[2]["status"], "fail", "{doc:#}");
    assert!(
        table_checks[2]["detail"]
            .as_str()
            .unwrap()
            .contains("audit.outbox"),
        "{doc:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_refuses_a_remembered_slot_that_is_gone_as_run_does() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let mut relay = Relay::start(&pg, &broker);
    relay.wait_ready(Duration::from_secs(60));
    assert!(relay.terminate(Duration::from_secs(30)).success());
    let confirmed = confirmed_flush_lsn(&client, "walrelay").await;
    drop_slot(&client, "walrelay").await;

    // check names the stop run would make, with run's exit code and the
    // range at risk: after the last position recorded delivered.
    let (code, doc) = check_exit(&pg.url(), &broker.brokers(), &[]);
    assert_eq!(
        code, 3,
        "a missing slot is exit code 3, as for run: {doc:#}"
    );
    assert_check(&doc, "postgres.state", "fail", "is missing");
    assert_check(&doc, "postgres.slot", "fail", "would not create it");
    let stop = &entry(&doc, "postgres.state")["stop"];
    assert_eq!(stop["cause"], "slot_missing", "{doc:#}");
    assert_eq!(stop["exit_code"], 3, "{doc:#}");
    assert_eq!(stop["events_may_be_missing"], true, "{doc:#}");
    assert!(stop["at_risk"]["through"].is_null(), "up to now: {doc:#}");
    let after = stop["at_risk"]["after"].as_str().expect("a position");
    let after_lsn = lsn_number(after);
    assert!(
        after_lsn > 0 && after_lsn <= confirmed,
        "the range at risk begins at a delivered position, at most the slot's ({confirmed:X}): {doc:#}"
    );
    let mut relay = Relay::start(&pg, &broker);
    let log = relay.wait_for_missing_slot_refusal(Duration::from_secs(60));
    assert!(log.contains("is missing"), "{log}");
    // run's last log line says the same range.
    assert!(
        log.contains(&format!("at_risk=after {after} up to now")),
        "run's stop names the range check named ({after}):\n{log}"
    );

    // With the flag both say a new slot, and both name the gap.
    let (ok, doc) = check(&pg.url(), &broker.brokers(), &["--recreate-missing-slot"]);
    assert!(ok, "{doc:#}");
    assert_check(&doc, "postgres.slot", "warn", "are not delivered");
}

/// What `walrelay run` does from a state: Ok once it streams (it is then
/// stopped), or the error it stops with.
fn run_outcome(pg_url: &str, brokers: &str, extra: &[&str]) -> Result<(), String> {
    let mut relay = Relay::start_raw(pg_url, brokers, extra);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if relay.http_get("/readyz").map(|(s, _)| s) == Some(200) {
            assert!(relay.terminate(Duration::from_secs(30)).success());
            return Ok(());
        }
        if let Some(status) = relay.wait(Duration::from_millis(200)) {
            assert!(!status.success(), "{}", relay.log());
            let log = relay.log();
            return Err(log
                .lines()
                .filter(|l| l.contains("ERROR"))
                .collect::<Vec<_>>()
                .join("\n"));
        }
        assert!(
            Instant::now() < deadline,
            "run neither streamed nor stopped; log:\n{}",
            relay.log()
        );
    }
}

/// `check` and `run` on the same state agree: both accept it, or `check`
/// fails `name` and `run` stops, both naming `fix`.
fn assert_agree(pg_url: &str, brokers: &str, extra: &[&str], name: &str, fix: Option<&str>) {
    let (ok, doc) = check(pg_url, brokers, extra);
    let run = run_outcome(pg_url, brokers, extra);
    match fix {
        None => {
            assert!(ok, "check refuses what run accepts: {doc:#}");
            assert_eq!(entry(&doc, name)["status"], "pass", "{doc:#}");
            assert_eq!(run, Ok(()), "run refuses what check accepts: {doc:#}");
        }
        Some(fix) => {
            assert!(!ok, "check accepts what run refuses ({run:?}): {doc:#}");
            assert_check(&doc, name, "fail", fix);
            let error = run.expect_err("run streams where check fails");
            assert!(
                error.contains(fix),
                "run's error does not name {fix:?}: {error}"
            );
        }
    }
}

/// The states a role meets: a publication missing (created by run only
/// when the role owns the table), a role without REPLICATION, a role that
/// may not SELECT from the outbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_run_agree_on_a_missing_publication_and_roles_without_rights() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let brokers = broker.brokers();
    let client = pg.client_with_outbox().await;
    client
        .batch_execute(
            "CREATE ROLE walrelay LOGIN REPLICATION;
             CREATE ROLE norepl LOGIN;
             CREATE ROLE noselect LOGIN REPLICATION;
             GRANT USAGE ON SCHEMA public TO walrelay, norepl, noselect;
             GRANT SELECT ON public.outbox TO walrelay, norepl;
             REVOKE CREATE ON SCHEMA public FROM PUBLIC;
             CREATE PUBLICATION shared FOR TABLE outbox WITH (publish = 'insert');",
        )
        .await
        .unwrap();
    client
        .batch_execute(include_str!("../sql/walrelay_state.sql"))
        .await
        .unwrap();
    client
        .batch_execute("GRANT SELECT, INSERT, UPDATE ON walrelay_state TO norepl, noselect")
        .await
        .unwrap();
    let as_role = |role: &str| pg.url_as(role, "unused");

    // The publication is missing: the owner's run creates it, another role's cannot.
    assert_agree(
        &pg.url(),
        &brokers,
        &["--slot", "by_owner", "--publication", "absent_owner"],
        "postgres.publication",
        None,
    );
    assert_agree(
        &as_role("walrelay"),
        &brokers,
        &["--slot", "by_role", "--publication", "absent_role"],
        "postgres.publication",
        Some("CREATE PUBLICATION \"absent_role\" FOR TABLE \"public\".\"outbox\""),
    );
    // A role that owns its outbox but may not CREATE in the database: the
    // fix is the grant, and run creates nothing before it refuses.
    client
        .batch_execute(
            "CREATE ROLE owner_nocreate LOGIN REPLICATION;
             CREATE TABLE owned_outbox (LIKE outbox INCLUDING ALL);
             ALTER TABLE owned_outbox OWNER TO owner_nocreate;
             GRANT SELECT, INSERT, UPDATE ON walrelay_state TO owner_nocreate;",
        )
        .await
        .unwrap();
    let owned = [
        "--table",
        "public.owned_outbox",
        "--slot",
        "by_nocreate",
        "--publication",
        "absent_nocreate",
    ];
    assert_agree(
        &as_role("owner_nocreate"),
        &brokers,
        &owned,
        "postgres.publication",
        Some(r#"GRANT CREATE ON DATABASE "postgres" TO "owner_nocreate";"#),
    );
    let rows: i64 = client
        .query_one(
            "SELECT count(*) FROM walrelay_state WHERE slot = 'by_nocreate'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 0, "a refused start wrote its state row");
    // A role without REPLICATION.
    assert_agree(
        &as_role("norepl"),
        &brokers,
        &["--slot", "norepl", "--publication", "shared"],
        "postgres.role",
        Some("ALTER ROLE \"norepl\" REPLICATION;"),
    );
    // A role that may not SELECT from the outbox: logical decoding checks
    // no table rights, so run streams and check only warns.
    let (ok, doc) = check(
        &as_role("noselect"),
        &brokers,
        &["--slot", "noselect", "--publication", "shared"],
    );
    assert!(ok, "{doc:#}");
    assert_check(&doc, "postgres.table_select", "warn", "streams without it");
    assert_eq!(
        run_outcome(
            &as_role("noselect"),
            &brokers,
            &["--slot", "noselect", "--publication", "shared"]
        ),
        Ok(())
    );
    // And the role with every right, for contrast.
    assert_agree(
        &as_role("walrelay"),
        &brokers,
        &["--slot", "granted", "--publication", "shared"],
        "postgres.table_select",
        None,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_refused_for_a_missing_outbox_table_leaves_no_state_table_behind() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client().await;
    let refused = run_outcome(&pg.url(), &broker.brokers(), &["--table", "public.missing"]);
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.contains("does not exist")),
        "{refused:?}"
    );
    let state: Option<String> = client
        .query_one("SELECT to_regclass('public.walrelay_state')::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(state, None, "a refused start created the state table");
}
