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
use support::{eventually, promtool, Broker, Postgres, Relay, Stack, OUTBOX_SQL};

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

        if n == 0 {
            let quiet = promtool::firing_for(relay.metrics_port, Duration::from_secs(2)).await;
            assert!(quiet.is_empty(), "healthy, yet {quiet:?} fire");
        }
        client.batch_execute(change).await.unwrap();
        let mut relay = relay;
        eventually(
            Duration::from_secs(15),
            "walrelay to stop streaming",
            || async {
                relay
                    .log()
                    .contains("walrelay does not stream")
                    .then_some(())
            },
        )
        .await;
        if n == 0 {
            // Held rather than exited, so the shipped alert sees the gauge.
            let fired = promtool::firing_for(relay.metrics_port, Duration::from_secs(2)).await;
            assert!(
                fired.contains("WalrelayPublicationBroken"),
                "{fired:?}\n{}",
                relay.log()
            );
        }
        let log = relay.wait_for_held_stop(WAIT, "walrelay_publication_broken");
        assert!(log.contains(complaint), "{change}: {log}");
        assert!(log.contains("publication_changed"), "{change}: {log}");
        if n == 0 {
            // Restarted while the table is still out: the range at risk too.
            let log =
                Relay::start(&pg, &broker).wait_for_held_stop(WAIT, "walrelay_publication_broken");
            assert!(log.contains(complaint), "{log}");
            assert!(
                log.contains("last found the outbox published as recorded at LSN"),
                "{log}"
            );
        }

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
    let log = relay.wait_for_held_stop(WAIT, "walrelay_publication_broken");
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
async fn rows_the_replaced_outbox_left_in_the_slot_are_published_once_the_replacement_is_accepted()
{
    let mut stack = Stack::start(&[]).await;
    let client = &stack.client;
    assert!(stack.relay.terminate(WAIT).success());
    // Written to the old table while walrelay is down: in the slot, under
    // the outbox's name and the old table's oid.
    events("Stranded", 5).insert(client).await;
    let mut expected = committed_ids(client, "Stranded").await;
    client.batch_execute(&replace_outbox()).await.unwrap();
    client
        .batch_execute("ALTER PUBLICATION walrelay ADD TABLE outbox")
        .await
        .unwrap();
    events("Published", 5).insert(client).await;
    expected.extend(committed_ids(client, "Published").await);

    // Accepted while Kafka is away, so nothing is confirmed: the
    // acceptance must outlive this instance.
    stack.broker.stop();
    let mut relay = Relay::start_with(&stack.pg, &stack.broker, &["--accept-outbox-change"]);
    support::eventually(WAIT, "the replacement accepted", || {
        let accepted = relay.log().contains("accepted at start-up");
        async move { accepted.then_some(()) }
    })
    .await;
    assert!(relay.terminate(WAIT).success(), "{}", relay.log());
    stack.broker.restart();

    // No flag now: the old table's rows are still events, and so are the new one's.
    stack.relay = Relay::start(&stack.pg, &stack.broker);
    let reader = stack.broker.consumer();
    reader.subscribe(&["outbox.event.Stranded", "outbox.event.Published"]);
    read_until_all_arrive(&reader, &expected, HashSet::new(), &stack.relay, WAIT);
    assert!(
        !stack.relay.log().contains("was dropped and recreated"),
        "{}",
        stack.relay.log()
    );
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
    let log = relay.wait_for_held_stop(WAIT, "walrelay_publication_broken");
    assert!(log.contains("left publication"), "{log}");
    assert!(log.contains("publication_changed"), "{log}");
    assert_range_covers(&log, gap_from);

    // A restart does not stream on as if nothing happened.
    let mut again = Relay::start(&stack.pg, &stack.broker);
    let log = again.wait_for_held_stop(WAIT, "walrelay_publication_broken");
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
    let log = relay.wait_for_held_stop(WAIT, "walrelay_publication_broken");
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
    // The stop's last line carries it as data too (cause=, at_risk=).
    let typed = lsn_after(log, "at_risk=after ");
    assert!(
        typed <= gap_from,
        "the stop's range at risk starts after the gap: {log}"
    );
}

/// The LSN printed right after `marker` in a log.
fn lsn_after(log: &str, marker: &str) -> u64 {
    let text = log
        .split(marker)
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("no {marker:?} in the log:\n{log}"));
    support::pg::lsn_number(text)
}

/// sql/walrelay_guard.sql, installed as a DBA would before walrelay starts.
fn outbox_with_guard() -> String {
    format!(
        "{OUTBOX_SQL}\n{}",
        include_str!("../sql/walrelay_guard.sql")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publication_switched_off_and_on_between_two_checks_stops_a_guarded_walrelay_at_the_switch(
) {
    // The watchdog is slow on purpose, and the catalog looks the same
    // before and after: only the guard's message can tell.
    let mut stack = Stack::start_on(&outbox_with_guard(), &["--watchdog-interval", "1h"]).await;
    let client = &stack.client;
    let reader = stack.broker.consumer();
    events("Before", 3).insert(client).await;
    reader.subscribe(&["outbox.event.Before"]);
    let before = committed_ids(client, "Before").await;
    read_until_all_arrive(&reader, &before, HashSet::new(), &stack.relay, WAIT);
    assert!(stack.relay.log().contains("the guard is installed"));

    let switch_from = current_lsn(client).await;
    client
        .batch_execute("ALTER PUBLICATION walrelay SET (publish = 'update')")
        .await
        .unwrap();
    let switch_to = current_lsn(client).await;
    events("Hidden", 4).insert(client).await;
    client
        .batch_execute("ALTER PUBLICATION walrelay SET (publish = 'insert')")
        .await
        .unwrap();
    events("After", 3).insert(client).await;

    let log = stack
        .relay
        .wait_for_held_stop(WAIT, "walrelay_publication_broken");
    assert!(log.contains("no longer publishes inserts"), "{log}");
    assert!(log.contains("--accept-outbox-change"), "{log}");
    // The range starts at the transaction that switched inserts off.
    let at = lsn_after(&log, "committed between LSN ");
    assert!(
        (switch_from..=switch_to).contains(&at),
        "{at:X} not in {switch_from:X}..{switch_to:X}: {log}"
    );
    assert!(confirmed_flush_lsn(client, "walrelay").await <= at);
    assert!(
        lsn_after(&log, "at_risk=after ") <= at,
        "the stop's range at risk covers the switch: {log}"
    );

    // A restart without the flag stops at the same place.
    let mut again = Relay::start(&stack.pg, &stack.broker);
    let log = again.wait_for_held_stop(WAIT, "walrelay_publication_broken");
    assert_eq!(lsn_after(&log, "committed between LSN "), at, "{log}");

    // The runbook: publish the hidden rows again, accept once, and every
    // event arrives; the flag is not needed after that.
    client
        .batch_execute(&publish_again("Hidden"))
        .await
        .unwrap();
    let mut relay = Relay::start_with(&stack.pg, &stack.broker, &["--accept-outbox-change"]);
    reader.subscribe(&["outbox.event.Hidden", "outbox.event.After"]);
    let mut expected = committed_ids(client, "Hidden").await;
    expected.extend(committed_ids(client, "After").await);
    read_until_all_arrive(&reader, &expected, HashSet::new(), &relay, WAIT);
    assert!(
        relay.log().contains("accepted with --accept-outbox-change"),
        "{}",
        relay.log()
    );
    assert!(relay.terminate(WAIT).success());
    stack.relay = Relay::start(&stack.pg, &stack.broker);
    stack.relay.wait_ready(WAIT);
    events("Later", 2).insert(client).await;
    reader.subscribe(&["outbox.event.Later"]);
    let later = committed_ids(client, "Later").await;
    read_until_all_arrive(&reader, &later, HashSet::new(), &stack.relay, WAIT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_column_or_another_table_in_the_publication_does_not_stop_a_guarded_walrelay() {
    let stack = Stack::start_on(&outbox_with_guard(), &["--watchdog-interval", "1h"]).await;
    let client = &stack.client;
    client
        .batch_execute(
            "ALTER TABLE outbox ADD COLUMN note text; \
             CREATE TABLE other (id int PRIMARY KEY); \
             ALTER PUBLICATION walrelay ADD TABLE other; \
             ALTER PUBLICATION walrelay SET (publish = 'insert, update')",
        )
        .await
        .unwrap();
    events("StillFlowing", 3).insert(client).await;
    let reader = stack.broker.consumer();
    reader.subscribe(&["outbox.event.StillFlowing"]);
    let expected = committed_ids(client, "StillFlowing").await;
    read_until_all_arrive(&reader, &expected, HashSet::new(), &stack.relay, WAIT);
    assert!(
        !stack.relay.log().contains("the guard saw"),
        "{}",
        stack.relay.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_that_left_the_publication_and_came_back_stops_a_guarded_walrelay_at_the_drop() {
    let stack = Stack::start_on(&outbox_with_guard(), &["--watchdog-interval", "1h"]).await;
    let client = &stack.client;
    let left_from = current_lsn(client).await;
    client
        .batch_execute("ALTER PUBLICATION walrelay DROP TABLE outbox")
        .await
        .unwrap();
    let left_to = current_lsn(client).await;
    events("WhileOut", 3).insert(client).await;
    client
        .batch_execute("ALTER PUBLICATION walrelay ADD TABLE outbox")
        .await
        .unwrap();
    events("AfterReturn", 3).insert(client).await;

    let mut relay = stack.relay;
    let log = relay.wait_for_held_stop(WAIT, "walrelay_publication_broken");
    assert!(log.contains("an outbox table left publication"), "{log}");
    let at = lsn_after(&log, "committed between LSN ");
    assert!(
        (left_from..=left_to).contains(&at),
        "{at:X} not in {left_from:X}..{left_to:X}: {log}"
    );
    assert!(confirmed_flush_lsn(client, "walrelay").await <= at);
}
