//! PostgreSQL 17 failover slots: a real primary crash and standby promotion
//! with events flowing, and what happens without a failover slot. These need
//! PostgreSQL 17+ and skip (saying so) on older servers; scripts/test-pg-versions.sh
//! runs them on 17 and 18.

mod support;

use std::collections::HashSet;
use std::process::Command;
use std::time::{Duration, Instant};

use support::outbox::{committed_ids, events, read_until_all_arrive};
use support::standby::ServerSettings;
use support::{eventually, pg, Broker, Postgres, Relay};
use tokio_postgres::Client;

/// The standby's physical slot on the primary, also its application_name.
const PHYSICAL_SLOT: &str = "walrelay_standby";

fn failover_slots_available() -> bool {
    let major = pg::major_version();
    if major < 17 {
        eprintln!(
            "SKIPPED: failover slots need PostgreSQL 17 or later and these tests run {major}; \
             run scripts/test-pg-versions.sh 17 18"
        );
        return false;
    }
    true
}

/// failover, synced and temporary of walrelay's slot, if the server has it.
async fn slot_flags(client: &Client) -> Option<(bool, bool, bool)> {
    client
        .query_opt(
            "SELECT failover, synced, temporary FROM pg_replication_slots WHERE slot_name = 'walrelay'",
            &[],
        )
        .await
        .unwrap()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
}

#[tokio::test(flavor = "multi_thread")]
async fn walrelay_resumes_on_a_promoted_standby_without_skipping_an_event() {
    if !failover_slots_available() {
        return;
    }
    let mut primary = Postgres::start();
    primary.client_with_outbox().await;
    let standby = primary.start_standby(PHYSICAL_SLOT).await;
    let primary_client = primary.client().await;
    // Synchronous replication, so that every commit the writer sees
    // acknowledged is on the standby too: the test can then hold walrelay to
    // "every committed event", not just "every event the standby got".
    primary_client
        .set_and_reload("synchronous_standby_names", PHYSICAL_SLOT)
        .await;
    let broker = Broker::start();
    // Both servers in one URL: walrelay follows whichever accepts writes.
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        primary.port, standby.port
    );
    let relay = Relay::start_raw(&url, &broker.brokers(), &["--reconnect-max-backoff", "1s"]);
    relay.wait_ready(Duration::from_secs(60));

    let standby_client = standby.client().await;
    assert_eq!(
        slot_flags(&primary_client)
            .await
            .map(|(failover, _, _)| failover),
        Some(true),
        "walrelay must create its slot with failover = true on PostgreSQL 17+"
    );
    // A synced slot stays temporary (and is dropped at promotion) until the
    // standby could decode from it on its own; only then is the standby ready.
    eventually(
        Duration::from_secs(60),
        "a synced, persistent copy of the slot on the standby",
        || async { (slot_flags(&standby_client).await == Some((true, true, false))).then_some(()) },
    )
    .await;

    let writer_client = primary.client().await;
    let writer = tokio::spawn(async move {
        let mut acknowledged = 0u64;
        while let Ok(n) = events("BeforeCrash", 10).try_insert(&writer_client).await {
            acknowledged += n;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        acknowledged
    });
    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.BeforeCrash"]);
    let early = reader.read(1000, Duration::from_secs(60));
    assert!(
        early.len() >= 1000,
        "events did not flow before the crash; log:\n{}",
        relay.log()
    );

    let crash = Instant::now();
    primary.kill9();
    let acknowledged = writer.await.unwrap();
    standby.promote();
    let promoted_after = crash.elapsed();
    events("AfterPromotion", 100).insert(&standby_client).await;

    // The promoted standby's outbox is the ground truth.
    let before = committed_ids(&standby_client, "BeforeCrash").await;
    let after = committed_ids(&standby_client, "AfterPromotion").await;
    assert!(
        before.len() as u64 >= acknowledged,
        "the standby has {} events, the writer saw {acknowledged} commits acknowledged",
        before.len()
    );
    let expected: HashSet<String> = before.union(&after).cloned().collect();
    let all_reader = broker.consumer();
    all_reader.subscribe(&["outbox.event.BeforeCrash", "outbox.event.AfterPromotion"]);
    read_until_all_arrive(
        &all_reader,
        &expected,
        HashSet::new(),
        &relay,
        Duration::from_secs(120),
    );
    let caught_up_after = crash.elapsed();

    // Everything in Kafka, read once more from the start: duplicates are
    // allowed (at-least-once), events the new primary does not have are not.
    let recount = broker.consumer();
    recount.subscribe(&["outbox.event.BeforeCrash", "outbox.event.AfterPromotion"]);
    let delivered = recount.read_for(Duration::from_secs(3));
    let ids: Vec<String> = delivered
        .iter()
        .map(|m| m.header("id").unwrap().to_string())
        .collect();
    let unique: HashSet<&String> = ids.iter().collect();
    let phantoms: Vec<_> = unique
        .iter()
        .filter(|id| !expected.contains(**id))
        .collect();
    assert!(
        phantoms.is_empty(),
        "{} events in Kafka are not in the promoted standby's outbox, e.g. {:?}",
        phantoms.len(),
        phantoms.first()
    );

    // The new primary streams from the synced slot; PostgreSQL leaves
    // synced = true on a promoted standby's slots.
    assert_eq!(slot_flags(&standby_client).await, Some((true, true, false)));
    let log = relay.log();
    assert_eq!(
        log.matches("created replication slot").count(),
        1,
        "walrelay must reuse the synced slot, not create one; log:\n{log}"
    );
    eprintln!(
        "failover figures (PostgreSQL {}): {} events acknowledged before the crash, {} on the \
         promoted standby, {} after the promotion; promotion done {:?} after the crash, every \
         event in Kafka {:?} after it; {} messages read, {} duplicates",
        pg::major_version(),
        acknowledged,
        before.len(),
        after.len(),
        promoted_after,
        caught_up_after,
        ids.len(),
        ids.len() - unique.len()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_failover_slot_the_promoted_standby_has_no_slot_for_walrelay() {
    if !failover_slots_available() {
        return;
    }
    let mut primary = Postgres::start();
    primary.client_with_outbox().await;
    let standby = primary.start_standby(PHYSICAL_SLOT).await;
    let broker = Broker::start();
    let relay = Relay::start_with(&primary, &broker, &["--failover-slot=false"]);
    relay.wait_ready(Duration::from_secs(60));
    let primary_client = primary.client().await;
    assert_eq!(
        slot_flags(&primary_client)
            .await
            .map(|(failover, _, _)| failover),
        Some(false)
    );
    // A failover slot made after walrelay's shows that the standby synced
    // after walrelay's slot existed, and left it out.
    primary_client
        .execute(
            "SELECT pg_create_logical_replication_slot('witness', 'pgoutput', false, false, true)",
            &[],
        )
        .await
        .unwrap();
    let standby_client = standby.client().await;
    eventually(
        Duration::from_secs(60),
        "the witness slot on the standby",
        || async {
            standby_client
                .query_opt(
                    "SELECT 1 FROM pg_replication_slots WHERE slot_name = 'witness' AND synced",
                    &[],
                )
                .await
                .unwrap()
                .map(|_| ())
        },
    )
    .await;

    primary.kill9();
    standby.promote();
    // After the failover there is no slot to resume from: a new slot would
    // skip the events written since walrelay's last confirmation.
    assert_eq!(slot_flags(&standby_client).await, None);
    // walrelay, pointed at the new primary, stops instead of creating one.
    let mut moved = Relay::start_with(&standby, &broker, &["--failover-slot=false"]);
    let log = moved.wait_for_missing_slot_refusal(Duration::from_secs(60));
    assert!(log.contains("is missing"), "log:\n{log}");
    assert_eq!(slot_flags(&standby_client).await, None);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slot_that_is_not_a_failover_slot_is_reported_with_the_command_that_fixes_it() {
    if !failover_slots_available() {
        return;
    }
    let pg = Postgres::start();
    let client = pg.client_with_outbox().await;
    let broker = Broker::start();
    let mut old = Relay::start_with(&pg, &broker, &["--failover-slot=false"]);
    old.wait_ready(Duration::from_secs(60));
    assert!(old.terminate(Duration::from_secs(30)).success());

    let mut relay = Relay::start(&pg, &broker);
    relay.wait_ready(Duration::from_secs(60));
    let log = relay.log();
    let line = log
        .lines()
        .find(|l| l.contains("is not a failover slot"))
        .unwrap_or_else(|| panic!("no warning about the slot; log:\n{log}"));
    // The command as walrelay prints it, run as an operator would.
    let command = line
        .split_once("-c '")
        .and_then(|(_, rest)| rest.split_once('\''))
        .map(|(command, _)| command)
        .unwrap_or_else(|| panic!("no psql -c '…' in {line}"));
    assert_eq!(command, "ALTER_REPLICATION_SLOT walrelay (FAILOVER true)");
    assert!(relay.terminate(Duration::from_secs(30)).success());
    let out = Command::new("psql")
        .arg(format!("{} replication=database", pg.socket_url()))
        .args(["-c", command])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        slot_flags(&client).await.map(|(failover, _, _)| failover),
        Some(true)
    );

    let fixed = Relay::start(&pg, &broker);
    fixed.wait_ready(Duration::from_secs(60));
    assert!(!fixed.log().contains("is not a failover slot"));
}

#[tokio::test(flavor = "multi_thread")]
async fn with_a_standby_listed_first_both_connections_go_to_the_primary() {
    if !failover_slots_available() {
        return;
    }
    let mut primary = Postgres::start();
    primary.client_with_outbox().await;
    let standby = primary.start_standby(PHYSICAL_SLOT).await;
    let broker = Broker::start();
    // The SQL connection (tokio-postgres) and the replication connection
    // (walrelay's own) must both skip the read-only standby.
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        standby.port, primary.port
    );
    let relay = Relay::start_raw(&url, &broker.brokers(), &[]);
    relay.wait_ready(Duration::from_secs(60));
    let client = primary.client().await;
    events("ReadWrite", 20).insert(&client).await;
    let expected = committed_ids(&client, "ReadWrite").await;
    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.ReadWrite"]);
    read_until_all_arrive(
        &reader,
        &expected,
        HashSet::new(),
        &relay,
        Duration::from_secs(60),
    );
    let streaming_from_primary = client
        .query_opt(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = 'walrelay' AND active",
            &[],
        )
        .await
        .unwrap();
    assert!(streaming_from_primary.is_some(), "log:\n{}", relay.log());
}
