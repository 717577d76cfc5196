//! `--on-update` (table.op.invalid.behavior): EventRouterDelegate.apply
//! hands an UPDATE to `handleUnexpectedOperation`, which warns, logs an
//! error, or throws (fatal) and fails the task; a DELETE it drops. The
//! connector's publication published UPDATEs (Debezium's is FOR ALL TABLES,
//! or FOR TABLE with every operation), so `error` and `fatal` fired. walrelay
//! creates its publication to publish UPDATEs when `--on-update` is error or
//! fatal, and refuses one that does not, as `walrelay check` does.

use std::process::Command;

use super::{DEBEZIUM_COLUMNS, TABLE, WAIT};
use crate::support::{Broker, Postgres, Relay};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_of_an_outbox_row_stops_walrelay_with_on_update_fatal() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client().await;
    client.batch_execute(TABLE).await.unwrap();
    // No publication: walrelay creates it, publishing UPDATEs as fatal needs.
    let mut args = DEBEZIUM_COLUMNS.to_vec();
    args.extend_from_slice(&["--on-update", "fatal"]);
    let mut relay = Relay::start_with(&pg, &broker, &args);
    relay.wait_ready(WAIT);
    client
        .batch_execute(
            "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) \
             VALUES ('00000000-0000-0000-0000-0000000000e1', 'order', 'o-1', 'Created', '{}'); \
             DELETE FROM outbox WHERE aggregateid = 'none'; \
             UPDATE outbox SET payload = '{\"changed\": true}';",
        )
        .await
        .unwrap();
    let status = relay.wait(WAIT).expect("--on-update fatal stops walrelay");
    assert!(!status.success());
    assert!(
        relay.log().contains("--on-update is fatal"),
        "{}",
        relay.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_update_error_refuses_a_publication_without_updates_and_check_says_so() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client().await;
    client.batch_execute(TABLE).await.unwrap();
    client
        .batch_execute("CREATE PUBLICATION walrelay FOR TABLE outbox WITH (publish = 'insert')")
        .await
        .unwrap();
    let mut args = DEBEZIUM_COLUMNS.to_vec();
    args.extend_from_slice(&["--on-update", "error"]);
    let fix = "ALTER PUBLICATION \"walrelay\" SET (publish = 'insert, update')";
    let out = Command::new(env!("CARGO_BIN_EXE_walrelay"))
        .args(["check", "--pg-url", &pg.url(), "--kafka-brokers"])
        .arg(broker.brokers())
        .args(&args)
        .env_remove("WALRELAY_PG_URL")
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{report}");
    assert!(report.contains(fix), "{report}");
    let mut relay = Relay::start_with(&pg, &broker, &args);
    let status = relay.wait(WAIT).expect("walrelay refuses to start");
    assert!(!status.success());
    assert!(relay.log().contains(fix), "{}", relay.log());
    // With the fix, it starts; warn needs no UPDATEs at all.
    client
        .batch_execute("ALTER PUBLICATION walrelay SET (publish = 'insert, update')")
        .await
        .unwrap();
    let relay = Relay::start_with(&pg, &broker, &args);
    relay.wait_ready(WAIT);
    drop(relay);
}
