//! Bad configuration and broken prerequisites: each gets one clear line that
//! names the fix and a non-zero exit; no panic, no stack trace.

mod support;

use std::time::Duration;

use support::pg::slots_and_publications;
use support::{eventually, free_port, promtool, Broker, Postgres, Relay};

const WAIT: Duration = Duration::from_secs(60);

/// Runs walrelay until it exits; returns its error line, asserting a clean failure.
fn fails_cleanly(mut relay: Relay) -> String {
    fails_cleanly_after(&mut relay)
}

/// `fails_cleanly` for a relay the test keeps.
fn fails_cleanly_after(relay: &mut Relay) -> String {
    let status = relay
        .wait(WAIT)
        .unwrap_or_else(|| panic!("walrelay kept running; log:\n{}", relay.log()));
    let log = relay.log();
    assert!(!status.success(), "exit status {status:?}; log:\n{log}");
    assert!(
        !log.contains("panicked") && !log.contains("stack backtrace"),
        "{log}"
    );
    let errors: Vec<_> = log.lines().filter(|l| l.contains("ERROR")).collect();
    assert_eq!(errors.len(), 1, "exactly one error line:\n{log}");
    errors[0].to_string()
}

#[test]
fn unreachable_host_gives_up_after_the_startup_timeout() {
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", free_port());
    let relay = Relay::start_raw(&url, "127.0.0.1:9", &["--startup-timeout", "2s"]);
    let mut relay = relay;
    let status = relay.wait(WAIT).expect("walrelay gives up");
    assert!(!status.success());
    let log = relay.log();
    assert!(
        log.contains("--startup-timeout") && log.contains("reachable"),
        "{log}"
    );
    // Nothing was ever connected: a retry is not a reconnect.
    assert!(log.contains("cannot connect to Postgres yet"), "{log}");
    assert!(!log.contains("session ended; reconnecting"), "{log}");
}

#[test]
fn malformed_url_is_rejected_with_an_example() {
    let relay = Relay::start_raw("postgres://u@host:notaport/db", "127.0.0.1:9", &[]);
    let line = fails_cleanly(relay);
    assert!(
        line.contains("--pg-url is not a valid Postgres URL"),
        "{line}"
    );
    assert!(line.contains("example: postgres://"), "{line}");
}

#[test]
fn a_mistyped_url_scheme_is_named_with_the_right_one() {
    let relay = Relay::start_raw("postgress://u:pw@localhost/db", "127.0.0.1:9", &[]);
    let line = fails_cleanly(relay);
    assert!(
        line.contains("\"postgress\"://") && line.contains("postgres:// or postgresql://"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_is_reported_without_the_password() {
    let pg = Postgres::start_with_host_auth("scram-sha-256");
    let client = pg.client_with_outbox().await;
    client
        .batch_execute("CREATE ROLE app LOGIN REPLICATION PASSWORD 'right-pass'")
        .await
        .unwrap();
    let relay = Relay::start_raw(&pg.url_as("app", "wrong-pass-123"), "127.0.0.1:9", &[]);
    let line = fails_cleanly(relay);
    assert!(line.contains("password authentication failed"), "{line}");
    assert!(!line.contains("wrong-pass-123"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_table_names_the_table_and_the_flag() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let line = fails_cleanly(Relay::start(&pg, &broker));
    assert!(
        line.contains("table public.outbox does not exist") && line.contains("--table"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_column_is_named() {
    let pg = Postgres::start();
    let broker = Broker::start();
    pg.client()
        .await
        .batch_execute("CREATE TABLE outbox (id uuid, aggregate_id text, event_type text)")
        .await
        .unwrap();
    let line = fails_cleanly(Relay::start(&pg, &broker));
    assert!(line.contains("has no column \"payload\""), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wal_level_below_logical_says_how_to_set_it() {
    let pg = Postgres::start_with(&["wal_level = replica"]);
    let broker = Broker::start();
    pg.client_with_outbox().await;
    let line = fails_cleanly(Relay::start(&pg, &broker));
    assert!(
        line.contains("wal_level=replica") && line.contains("ALTER SYSTEM SET wal_level = logical"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slot_of_another_plugin_is_refused_and_left_alone() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    client
        .batch_execute("SELECT pg_create_logical_replication_slot('walrelay', 'test_decoding')")
        .await
        .unwrap();
    let line = fails_cleanly(Relay::start(&pg, &broker));
    assert!(
        line.contains("output plugin test_decoding") && line.contains("--slot"),
        "{line}"
    );
    let plugin: String = client
        .query_one(
            "SELECT plugin::text FROM pg_replication_slots WHERE slot_name = 'walrelay'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        plugin, "test_decoding",
        "the existing slot is never dropped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publication_without_the_table_names_the_fix() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    client
        .batch_execute("CREATE TABLE other (id int); CREATE PUBLICATION walrelay FOR TABLE other")
        .await
        .unwrap();
    let line = fails_cleanly(Relay::start(&pg, &broker));
    assert!(
        line.contains("ALTER PUBLICATION \"walrelay\" ADD TABLE \"public\".\"outbox\""),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_slot_stops_walrelay_with_recovery_steps_and_is_never_recreated() {
    let pg = Postgres::start_with(&["max_slot_wal_keep_size = '1MB'", "wal_keep_size = 0"]);
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let mut relay = Relay::start(&pg, &broker);
    relay.wait_ready(WAIT);
    assert!(relay.terminate(WAIT).success());

    // Write and switch away from enough WAL that the checkpoint removes what the slot needs.
    client
        .batch_execute("CREATE TABLE filler (t text)")
        .await
        .unwrap();
    for _ in 0..4 {
        client
            .batch_execute(
                "INSERT INTO filler SELECT repeat(md5(i::text), 20) FROM generate_series(1, 30000) i; \
                 SELECT pg_switch_wal();",
            )
            .await
            .unwrap();
    }
    client.batch_execute("CHECKPOINT").await.unwrap();
    let status: String = client
        .query_one(
            "SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'walrelay'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "lost", "the test could not lose the slot");

    // walrelay refuses, and stays up so that the alert on the lost slot
    // (WalrelaySlotWalUnreserved) has a series to fire on.
    let mut relay = Relay::start_with(&pg, &broker, &["--watchdog-interval", "1s"]);
    eventually(
        WAIT,
        "walrelay_slot_wal_status{status=\"lost\"} 1",
        || async {
            (relay.metric("walrelay_slot_wal_status{status=\"lost\"}") == Some(1.0)).then_some(())
        },
    )
    .await;
    let (status, _) = relay.http_get("/readyz").unwrap();
    assert_eq!(status, 503);
    let fired = promtool::firing_for(relay.metrics_port, Duration::from_secs(2)).await;
    assert!(fired.contains("WalrelaySlotWalUnreserved"), "{fired:?}");
    let stopped = relay.terminate(WAIT);
    assert_eq!(
        stopped.code(),
        Some(3),
        "a refused start exits with the lost slot's code when stopped"
    );
    let log = relay.log();
    assert!(
        log.contains("walrelay does not stream")
            && log.contains("is lost")
            && log.contains("pg_drop_replication_slot"),
        "{log}"
    );
    assert!(!log.contains("panicked"), "{log}");
    let slots: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_replication_slots WHERE wal_status = 'lost'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(slots, 1, "walrelay left the lost slot in place");

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_walrelay"))
        .args(["status", "--pg-url", &pg.url()])
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "walrelay status exits non-zero for a lost slot"
    );
}

/// What a failed first start must not leave behind: a slot holds WAL until
/// the disk fills, and a publication or state row would make the next
/// start look like a restart.
async fn nothing_was_created(client: &tokio_postgres::Client) {
    let row = client
        .query_one(
            "SELECT (SELECT count(*) FROM pg_replication_slots), \
                    (SELECT count(*) FROM pg_publication), \
                    to_regclass('public.walrelay_state') IS NOT NULL",
            &[],
        )
        .await
        .unwrap();
    let (slots, publications, state): (i64, i64, bool) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(
        (slots, publications, state),
        (0, 0, false),
        "slots, publications, state table"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_property_librdkafka_refuses_stops_walrelay_before_it_creates_anything() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let line = fails_cleanly(Relay::start_with(&pg, &broker, &["-X", "bogus.prop=3"]));
    assert!(
        line.contains("-X properties") && line.contains("bogus.prop"),
        "{line}"
    );
    nothing_was_created(&client).await;
}

/// Properties librdkafka takes but walrelay cannot work with: without a
/// report of each record delivered it could confirm nothing, and a
/// transactional.id of the operator's own makes a producer that accepts
/// no record outside a transaction walrelay never opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_properties_walrelay_cannot_work_with_stop_it_before_it_creates_anything() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let cases: [(&[&str], &[&str]); 3] = [
        (
            &["-X", "delivery.report.only.error=true"],
            &["delivery.report.only.error", "remove"],
        ),
        (
            &["-X", "transactional.id=orders-relay"],
            &["transactional.id", "--delivery exactly-once"],
        ),
        (
            &[
                "--delivery",
                "exactly-once",
                "-X",
                "transactional.id=orders-relay",
            ],
            &["transactional.id", "--delivery exactly-once"],
        ),
    ];
    for (flags, named) in cases {
        let line = fails_cleanly(Relay::start_with(&pg, &broker, flags));
        for name in named {
            assert!(line.contains(name), "{flags:?}: {line}");
        }
        nothing_was_created(&client).await;
    }
}

/// Waits until walrelay's slot creation waits for `blocker`'s transaction.
async fn slot_creation_waits(client: &tokio_postgres::Client) {
    support::eventually(WAIT, "the slot creation to wait", || async {
        client
            .query_opt(
                "SELECT 1 FROM pg_stat_activity \
                 WHERE query LIKE '%create_logical_replication_slot%' \
                   AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap()
            .map(|_| ())
    })
    .await;
}

/// A slot holds WAL until it is dropped: one this start created must not
/// outlive a start that fails before streaming. Here the replication
/// connection dies while the slot is being created (an open transaction
/// holds the creation), so START_REPLICATION fails; meanwhile the outbox
/// was dropped, so the next attempt stops walrelay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_that_fails_after_creating_the_slot_drops_it_again() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let blocker = pg.client().await;
    blocker
        .batch_execute("BEGIN; CREATE TABLE long_running (id int);")
        .await
        .unwrap();
    let mut relay = Relay::start(&pg, &broker);
    slot_creation_waits(&client).await;
    let ended: i64 = client
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE backend_type = 'walsender'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(ended, 1, "walrelay's replication connection");
    client.batch_execute("DROP TABLE outbox").await.unwrap();
    blocker.batch_execute("COMMIT").await.unwrap();

    let line = fails_cleanly_after(&mut relay);
    assert!(line.contains("public.outbox does not exist"), "{line}");
    let log = relay.log();
    assert!(
        log.contains("dropped the replication slot this start created"),
        "{log}"
    );
    let (slots, _) = slots_and_publications(&client).await;
    assert_eq!(
        slots, 0,
        "the failed start left its slot behind; log:\n{log}"
    );
}

/// A start stopped while Postgres creates the slot (creation waits for
/// every open transaction) cancels the creation: left alone, the server
/// would finish it after walrelay exited, and the slot would hold WAL with
/// nothing reading it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_stopped_while_the_slot_is_created_leaves_no_slot() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let blocker = pg.client().await;
    blocker
        .batch_execute("BEGIN; CREATE TABLE long_running (id int);")
        .await
        .unwrap();
    let mut relay = Relay::start(&pg, &broker);
    slot_creation_waits(&client).await;
    assert!(relay.terminate(WAIT).success(), "{}", relay.log());
    blocker.batch_execute("COMMIT").await.unwrap();
    // The server process that was creating it is gone, or done.
    support::eventually(WAIT, "no slot creation left running", || async {
        client
            .query_opt(
                "SELECT 1 FROM pg_stat_activity \
                 WHERE query LIKE '%create_logical_replication_slot%' \
                   AND state = 'active' AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    let (slots, _) = slots_and_publications(&client).await;
    assert_eq!(slots, 0, "log:\n{}", relay.log());
}

/// TLS files and routing are read before anything is created: a typo in
/// one must not leave a slot (or a publication) behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_tls_files_and_bad_routing_stop_walrelay_before_it_creates_anything() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let missing_ca = format!(
        "{}?sslmode=verify-full&sslrootcert=/no/such/ca.pem",
        pg.url()
    );
    let line = fails_cleanly(Relay::start_raw(&missing_ca, &broker.brokers(), &[]));
    assert!(line.contains("sslrootcert /no/such/ca.pem"), "{line}");
    nothing_was_created(&client).await;

    let cases: [(&[&str], &str); 4] = [
        (
            &[
                "-X",
                "security.protocol=ssl",
                "-X",
                "ssl.ca.location=/no/such/kafka-ca.pem",
            ],
            "ssl.ca.location",
        ),
        (
            &[
                "-X",
                "security.protocol=ssl",
                "-X",
                "ssl.certificate.location=/no/such/client.pem",
                "-X",
                "ssl.key.location=/no/such/client.key",
            ],
            "ssl.certificate.location",
        ),
        (
            &["--topic-replacement", "outbox.${nope}"],
            "--topic-replacement",
        ),
        (&["--topic-allow-regex", "outbox.("], "--topic-allow-regex"),
    ];
    for (flags, named) in cases {
        let line = fails_cleanly(Relay::start_with(&pg, &broker, flags));
        assert!(line.contains(named), "{flags:?}: {line}");
        nothing_was_created(&client).await;
    }
}
