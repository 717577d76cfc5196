//! The publication changes under a running relay, or while it is down: the
//! outbox table removed from it (and perhaps added back), dropped and
//! recreated, or renamed. Each publishes nothing for a while, so walrelay
//! must notice and stop with the range at risk, instead of confirming
//! keepalives over events it can no longer see.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use support::outbox::{committed_ids, current_lsn, events, read_until_all_arrive};
use support::pg::{confirmed_flush_lsn, drop_slot};
use support::{Broker, Postgres, Relay, Stack, OUTBOX_SQL};

const WAIT: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_removed_recreated_or_renamed_under_walrelay_stops_it_within_a_watchdog_interval() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let reader = broker.consumer();
    let scenarios = [
        (
            "ALTER PUBLICATION walrelay DROP TABLE outbox",
            "does not include public.outbox",
        ),
        (
            "DROP TABLE outbox; \
             CREATE TABLE outbox (id uuid PRIMARY KEY, aggregate_type text, \
               aggregate_id text, event_type text, payload jsonb); \
             ALTER PUBLICATION walrelay ADD TABLE outbox",
            "was dropped and recreated",
        ),
        (
            "ALTER TABLE outbox RENAME TO outbox_old",
            "no longer exists (dropped or renamed)",
        ),
    ];
    for (n, (change, complaint)) in scenarios.iter().enumerate() {
        let relay = Relay::start_with(&pg, &broker, &["--watchdog-interval", "1s"]);
        relay.wait_ready(WAIT);
        let event_type = format!("Before{n}");
        events(&event_type, 2).insert(&client).await;
        reader.subscribe(&[format!("outbox.event.{event_type}").as_str()]);
        let expected = committed_ids(&client, &event_type).await;
        read_until_all_arrive(&reader, &expected, HashSet::new(), &relay, WAIT);

        client.batch_execute(change).await.unwrap();
        let mut relay = relay;
        let status = relay
            .wait(Duration::from_secs(15))
            .unwrap_or_else(|| panic!("walrelay went on after: {change}; log:\n{}", relay.log()));
        assert!(!status.success(), "{change}");
        let log = relay.log();
        assert!(log.contains(complaint), "{change}: {log}");
        assert!(log.contains("publication_changed"), "{change}: {log}");

        // Back to the starting point for the next change.
        drop_slot(&client, "walrelay").await;
        client
            .batch_execute(
                "DROP TABLE IF EXISTS outbox; DROP TABLE IF EXISTS outbox_old; \
                 DROP PUBLICATION walrelay; DROP TABLE walrelay_state;",
            )
            .await
            .unwrap();
        client
            .batch_execute(include_str!("../sql/outbox.sql"))
            .await
            .unwrap();
    }
}

/// The migration of the issue: the outbox is dropped and recreated (rows
/// then go into the new table before it joins the publication).
fn replace_outbox() -> String {
    format!("DROP TABLE outbox; {OUTBOX_SQL}")
}

/// docs/snippets/publish-again.sql, for the rows of `event_type`.
fn publish_again(event_type: &str) -> String {
    include_str!("../docs/snippets/publish-again.sql").replace(
        "created_at >= :'since'",
        &format!("event_type = '{event_type}'"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_replaced_while_walrelay_was_down_stops_it_with_the_range_at_risk() {
    let mut stack = Stack::start(&[]).await;
    let client = &stack.client;
    let reader = stack.broker.consumer();
    events("Before", 5).insert(client).await;
    reader.subscribe(&["outbox.event.Before"]);
    let before = committed_ids(client, "Before").await;
    read_until_all_arrive(&reader, &before, HashSet::new(), &stack.relay, WAIT);
    assert!(stack.relay.terminate(WAIT).success());

    client.batch_execute(&replace_outbox()).await.unwrap();
    let gap_from = current_lsn(client).await;
    events("Unpublished", 5).insert(client).await;
    client
        .batch_execute("ALTER PUBLICATION walrelay ADD TABLE outbox")
        .await
        .unwrap();
    events("Published", 5).insert(client).await;

    let mut relay = Relay::start(&stack.pg, &stack.broker);
    let log = relay.wait_for_failure(WAIT);
    assert!(log.contains("was dropped and recreated"), "{log}");
    assert!(log.contains("--accept-outbox-change"), "{log}");
    assert_range_covers(&log, gap_from);

    // The runbook: publish the rows again, then accept the table.
    client
        .batch_execute(&publish_again("Unpublished"))
        .await
        .unwrap();
    let mut relay = Relay::start_with(&stack.pg, &stack.broker, &["--accept-outbox-change"]);
    relay.wait_ready(WAIT);
    reader.subscribe(&["outbox.event.Unpublished", "outbox.event.Published"]);
    let mut expected = committed_ids(client, "Unpublished").await;
    expected.extend(committed_ids(client, "Published").await);
    read_until_all_arrive(&reader, &expected, HashSet::new(), &relay, WAIT);

    // Accepted once, it is the outbox from now on: no flag needed.
    assert!(relay.terminate(WAIT).success());
    stack.relay = Relay::start(&stack.pg, &stack.broker);
    stack.relay.wait_ready(WAIT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_that_left_the_publication_and_came_back_between_two_checks_stops_walrelay() {
    let stack = Stack::start(&["--watchdog-interval", "3s"]).await;
    let client = &stack.client;
    let gap_from = current_lsn(client).await;
    client
        .batch_execute("ALTER PUBLICATION walrelay DROP TABLE outbox")
        .await
        .unwrap();
    events("WhileOut", 5).insert(client).await;
    client
        .batch_execute("ALTER PUBLICATION walrelay ADD TABLE outbox")
        .await
        .unwrap();
    events("AfterReturn", 5).insert(client).await;

    let mut relay = stack.relay;
    let log = relay.wait_for_failure(WAIT);
    assert!(log.contains("left publication"), "{log}");
    assert!(log.contains("publication_changed"), "{log}");
    assert_range_covers(&log, gap_from);

    // A restart does not stream on as if nothing happened.
    let mut again = Relay::start(&stack.pg, &stack.broker);
    let log = again.wait_for_failure(WAIT);
    assert!(
        log.contains("left the publication and was added back"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_replaced_under_a_running_walrelay_stops_it_before_the_new_tables_rows() {
    // The watchdog is slow on purpose: the stream itself must notice.
    let stack = Stack::start(&["--watchdog-interval", "1h"]).await;
    let client = &stack.client;
    client.batch_execute(&replace_outbox()).await.unwrap();
    events("Lost", 3).insert(client).await;
    client
        .batch_execute("ALTER PUBLICATION walrelay ADD TABLE outbox")
        .await
        .unwrap();
    let new_rows_end = events("NewTable", 3).insert(client).await;

    let mut relay = stack.relay;
    let log = relay.wait_for_failure(WAIT);
    assert!(log.contains("was dropped and recreated"), "{log}");
    assert!(log.contains("--accept-outbox-change"), "{log}");
    let reader = stack.broker.consumer();
    assert!(
        !reader.has_topic("outbox.event.NewTable"),
        "walrelay published the new table's rows as if nothing happened"
    );
    assert!(confirmed_flush_lsn(client, "walrelay").await < new_rows_end);
}

/// The range at risk that the log names starts no later than the gap.
fn assert_range_covers(log: &str, gap_from: u64) {
    let from = lsn_after(log, "between LSN ");
    assert!(
        from <= gap_from,
        "the range at risk starts after the gap: {log}"
    );
}

/// The LSN printed right after `marker` in a log.
fn lsn_after(log: &str, marker: &str) -> u64 {
    let text = log
        .split(marker)
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("no {marker:?} in the log:\n{log}"));
    let (hi, lo) = text.split_once('/').unwrap();
    (u64::from_str_radix(hi, 16).unwrap() << 32) | u64::from_str_radix(lo, 16).unwrap()
}
