//! A slot that existed and is gone (dropped by hand, or a failover to a
//! server without a copy of it) is never recreated on its own: a new slot
//! starts at the current WAL position and would skip every event between.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use support::outbox::{add_outbox, committed_ids, current_lsn, events, read_until_all_arrive};
use support::pg::{confirmed_flush_lsn, drop_slot, slots_and_publications};
use support::{eventually, promtool, webhook, Broker, Postgres, Relay, Stack};

const WAIT: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_dropped_while_walrelay_was_down_is_not_recreated_without_the_flag() {
    let mut stack = Stack::start(&[]).await;
    let (client, broker) = (&stack.client, &stack.broker);
    // The events go in after this: what walrelay records as delivered
    // when it stops lies past it.
    let delivered = current_lsn(client).await;
    events("BeforeLoss", 5).insert(client).await;
    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.BeforeLoss"]);
    let expected = committed_ids(client, "BeforeLoss").await;
    read_until_all_arrive(&reader, &expected, HashSet::new(), &stack.relay, WAIT);
    // The recorded position is the last delivered event's, which a
    // keepalive may have taken the slot past (so the slot's position is no
    // floor for it), and never past where the slot stopped.
    assert!(stack.relay.terminate(WAIT).success());
    let stopped_at = confirmed_flush_lsn(client, "walrelay").await;

    // The gap: committed while walrelay is down, then the slot goes.
    events("InTheGap", 5).insert(client).await;
    drop_slot(client, "walrelay").await;

    let mut relay = Relay::start(&stack.pg, broker);
    let log = relay.wait_for_missing_slot_refusal(WAIT);
    assert!(
        log.contains("replication slot \"walrelay\" is missing"),
        "{log}"
    );
    assert!(log.contains("--recreate-missing-slot"), "{log}");
    let recorded = log
        .split("Events committed after LSN ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .map(support::pg::lsn_number)
        .unwrap_or_else(|| panic!("no LSN in the error; log:\n{log}"));
    assert!(
        delivered <= recorded && recorded <= stopped_at,
        "recorded {recorded:x} is not between {delivered:x} and {stopped_at:x}"
    );
    // The stop's last line carries the same range as data.
    assert!(
        log.contains("cause=\"slot_missing\"")
            && log.contains(&format!(
                "at_risk=after {:X}/{:X} up to now",
                recorded >> 32,
                recorded & 0xFFFF_FFFF
            )),
        "log:\n{log}"
    );
    let slot_exists = client
        .query_opt(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = 'walrelay'",
            &[],
        )
        .await
        .unwrap()
        .is_some();
    assert!(!slot_exists, "walrelay recreated the slot on its own");

    // With the flag it creates a new slot, says what it cannot deliver, and streams.
    let relay = Relay::start_with(&stack.pg, broker, &["--recreate-missing-slot"]);
    relay.wait_ready(WAIT);
    assert!(
        relay.log().contains("cannot be delivered by walrelay"),
        "{}",
        relay.log()
    );
    events("AfterLoss", 3).insert(client).await;
    reader.subscribe(&["outbox.event.AfterLoss"]);
    let expected = committed_ids(client, "AfterLoss").await;
    read_until_all_arrive(&reader, &expected, HashSet::new(), &relay, WAIT);
    stack.relay = relay;
}

/// An exit would take /metrics with it, and WalrelaySlotMissing could never
/// fire for the commonest loss: a slot gone while walrelay was down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_refused_for_a_missing_slot_keeps_metrics_up_so_the_alert_fires() {
    let mut stack = Stack::start(&[]).await;
    assert!(stack.relay.terminate(WAIT).success());
    drop_slot(&stack.client, "walrelay").await;

    let (hook_port, hooks) = webhook::receiver().await;
    let hook = format!("http://127.0.0.1:{hook_port}/alerts");
    let relay = Relay::start_with(
        &stack.pg,
        &stack.broker,
        &["--watchdog-interval", "1s", "--alert-webhook", &hook],
    );
    eventually(WAIT, "walrelay_slot_missing 1", || async {
        (relay.metric("walrelay_slot_missing") == Some(1.0)).then_some(())
    })
    .await;
    let posted = eventually(WAIT, "the webhook to hear slot_missing", || async {
        hooks.with_cause("slot_missing")
    })
    .await;
    assert_eq!(posted.body["level"], "critical", "{:?}", posted.body);
    let fired = promtool::firing_for(relay.metrics_port, Duration::from_secs(2)).await;
    assert!(
        fired.contains("WalrelaySlotMissing") && fired.contains("WalrelaySlotLagCritical"),
        "{fired:?}"
    );
    assert_eq!(
        relay.metric("walrelay_slot_lag_alert_level"),
        Some(2.0),
        "the log and the webhook say critical: so must the level the alerts read"
    );
    assert_eq!(relay.http_get("/healthz").unwrap().0, 200);
    let (status, body) = relay.http_get("/readyz").unwrap();
    assert_eq!(status, 503);
    assert!(body.contains("missing"), "{body}");
    assert_eq!(
        relay.metric("walrelay_role{role=\"none\"}"),
        Some(1.0),
        "neither active nor a standby"
    );
    let log = relay.log();
    assert!(log.contains("walrelay does not stream"), "{log}");
    assert!(!log.contains("created replication slot"), "{log}");
    let (slots, _) = slots_and_publications(&stack.client).await;
    assert_eq!(slots, 0, "a refused start created a slot");
    stack.relay = relay;
    let status = stack.relay.terminate(WAIT);
    assert!(
        !status.success(),
        "a refused start exits non-zero when stopped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_start_on_a_database_creates_the_slot_and_remembers_it() {
    let stack = Stack::start(&[]).await;
    let row = stack
        .client
        .query_one(
            "SELECT s.created_lsn <= r.confirmed_flush_lsn, \
                    s.settings->>'route_by_field', s.outbox->0->>'table' \
             FROM walrelay_state s JOIN pg_replication_slots r ON r.slot_name = s.slot \
             WHERE s.slot = 'walrelay'",
            &[],
        )
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0), "the slot's creation is recorded");
    assert_eq!(row.get::<_, String>(1), "event_type");
    assert_eq!(row.get::<_, String>(2), "public.outbox");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walrelays_that_create_the_state_table_at_the_same_moment_all_start() {
    // CREATE TABLE IF NOT EXISTS does not wait for a concurrent one: it
    // fails on pg_type's unique index once the other commits, which stopped
    // one of ten walrelays started at once in tests/debezium_oracle.rs. To
    // make that moment certain, another session creates the table and
    // commits only once every walrelay is waiting on it.
    const N: usize = 3;
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let other = pg.client().await;
    for i in 0..N {
        add_outbox(&client, &format!("s{i}")).await;
    }
    other.batch_execute("BEGIN").await.unwrap();
    // The file's statement, without the comments before it (which hold a ';').
    let sql = include_str!("../sql/walrelay_state.sql");
    let create = &sql[sql.find("CREATE TABLE").unwrap()..];
    other
        .batch_execute(create.split(';').next().unwrap())
        .await
        .unwrap();
    let args: Vec<[String; 6]> = (0..N)
        .map(|i| {
            [
                "--table".into(),
                format!("s{i}.outbox"),
                "--slot".into(),
                format!("slot_{i}"),
                "--publication".into(),
                format!("pub_{i}"),
            ]
        })
        .collect();
    let relays: Vec<Relay> = args
        .iter()
        .map(|a| {
            let a: Vec<&str> = a.iter().map(String::as_str).collect();
            Relay::start_with(&pg, &broker, &a)
        })
        .collect();
    support::eventually(WAIT, "every walrelay waiting on the table", || async {
        let waiting: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE query LIKE 'CREATE TABLE IF NOT EXISTS%' AND wait_event_type = 'Lock'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        (waiting == N as i64).then_some(())
    })
    .await;
    other.batch_execute("COMMIT").await.unwrap();
    for relay in &relays {
        relay.wait_ready(WAIT);
    }
    let remembered: i64 = client
        .query_one(
            "SELECT count(*) FROM walrelay_state WHERE slot LIKE 'slot\\_%'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(remembered, N as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_an_older_walrelay_remembered_in_the_publications_comment_is_not_forgotten() {
    let mut stack = Stack::start(&[]).await;
    stack.relay.kill9();
    let (client, broker) = (&stack.client, &stack.broker);
    // What an older walrelay left: a comment line, and no state table.
    drop_slot(client, "walrelay").await;
    client
        .batch_execute(
            "COMMENT ON PUBLICATION walrelay IS 'walrelay-slot walrelay created_lsn=0/1000000 \
               created_at=2026-11-01T10:00:00Z confirmed_lsn=0/1500000 \
               confirmed_at=2026-11-02T10:00:00Z'; \
             DROP TABLE walrelay_state;",
        )
        .await
        .unwrap();
    let mut relay = Relay::start(&stack.pg, broker);
    let log = relay.wait_for_missing_slot_refusal(WAIT);
    assert!(
        log.contains("replication slot \"walrelay\" is missing")
            && log.contains("after LSN 0/1500000"),
        "{log}"
    );
}
