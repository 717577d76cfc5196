//! Decoding on a standby (PostgreSQL 16+): walrelay pointed at a streaming
//! standby (hot_standby_feedback, a physical slot), with --pg-primary-url for
//! its state table. Events written on the primary arrive through the
//! standby, and keep arriving after the standby is promoted. These need
//! PostgreSQL 16+ and skip (saying so) on older servers;
//! scripts/test-pg-versions.sh runs them on 16, 17 and 18.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use serde_json::Value;
use support::outbox::{committed_ids, events, read_until_all_arrive};
use support::pg::{self, confirmed_flush_lsn};
use support::{eventually, walrelay, Broker, Postgres, Relay};
use tokio_postgres::Client;

/// The standby's physical slot on the primary, also its application_name.
const PHYSICAL_SLOT: &str = "walrelay_standby";

/// The publication walrelay would create, made on the primary by hand.
const PUBLICATION: &str = "CREATE PUBLICATION walrelay FOR TABLE outbox \
     WITH (publish = 'insert', publish_via_partition_root = true)";

fn decoding_on_a_standby_available() -> bool {
    let major = pg::major_version();
    if major < 16 {
        eprintln!(
            "SKIPPED: logical decoding on a standby needs PostgreSQL 16 or later and these tests \
             run {major}; run scripts/test-pg-versions.sh 16 17 -- --test standby_decoding -- --test-threads=1"
        );
        return false;
    }
    true
}

/// A primary with the outbox table, a standby of it to decode on, a client
/// of each, and a broker.
struct Servers {
    primary: Postgres,
    standby: Postgres,
    primary_client: Client,
    standby_client: Client,
    broker: Broker,
}

async fn servers() -> Servers {
    let mut primary = Postgres::start();
    primary.client_with_outbox().await;
    let standby = primary.start_decoding_standby(PHYSICAL_SLOT).await;
    let primary_client = primary.client().await;
    let standby_client = standby.client().await;
    Servers {
        primary,
        standby,
        primary_client,
        standby_client,
        broker: Broker::start(),
    }
}

/// Runs `sql` on the primary and waits until the standby has replayed it.
async fn on_primary_then_replayed(primary: &Client, standby: &Client, sql: &str) {
    primary.batch_execute(sql).await.unwrap();
    let lsn: String = primary
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get(0);
    eventually(
        Duration::from_secs(30),
        "the standby to replay it",
        || async {
            standby
                .query_one(
                    "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn",
                    &[&lsn],
                )
                .await
                .unwrap()
                .get::<_, bool>(0)
                .then_some(())
        },
    )
    .await;
}

/// A password in --pg-primary-url (the test clusters trust every local
/// connection, so it is never checked): it must not reach the log.
const PRIMARY_PASSWORD: &str = "primary-secret-5e1";

/// --pg-primary-url for `primary`.
fn primary_url(primary: &Postgres) -> String {
    primary.url_as("postgres", PRIMARY_PASSWORD)
}

/// walrelay on `standby`, with the primary for its state table when given.
fn relay_on(standby: &Postgres, broker: &Broker, primary: Option<&Postgres>) -> Relay {
    let primary_url = primary.map(primary_url);
    let mut flags = vec!["--watchdog-interval", "1s", "--reconnect-max-backoff", "1s"];
    if let Some(url) = &primary_url {
        flags.extend(["--pg-primary-url", url.as_str()]);
    }
    Relay::start_with(standby, broker, &flags)
}

/// Reads `topics` from the start until every event of `expected` is there.
fn all_arrive(broker: &Broker, topics: &[&str], expected: &HashSet<String>, relay: &Relay) {
    let reader = broker.consumer();
    reader.subscribe(topics);
    read_until_all_arrive(
        &reader,
        expected,
        HashSet::new(),
        relay,
        Duration::from_secs(120),
    );
}

/// The type and, on PostgreSQL 17+, the failover flag of walrelay's slot.
async fn walrelay_slot(client: &Client) -> Option<(String, Option<String>)> {
    client
        .query_opt(
            "SELECT slot_type, to_jsonb(s) ->> 'failover' FROM pg_replication_slots s \
             WHERE slot_name = 'walrelay'",
            &[],
        )
        .await
        .unwrap()
        .map(|r| (r.get(0), r.get(1)))
}

/// created_lsn, delivered_lsn, verified_lsn (as text) and delivered_timeline
/// of walrelay's row in its state table.
async fn state_row(
    client: &Client,
) -> Option<(Option<String>, Option<String>, Option<String>, Option<i32>)> {
    client
        .query_opt(
            "SELECT created_lsn::text, delivered_lsn::text, verified_lsn::text, \
                    delivered_timeline \
             FROM walrelay_state WHERE slot = 'walrelay'",
            &[],
        )
        .await
        .unwrap()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
}

#[tokio::test(flavor = "multi_thread")]
async fn events_written_on_the_primary_arrive_through_a_standby_and_after_its_promotion() {
    if !decoding_on_a_standby_available() {
        return;
    }
    let mut s = servers().await;
    on_primary_then_replayed(&s.primary_client, &s.standby_client, PUBLICATION).await;
    let mut relay = relay_on(&s.standby, &s.broker, Some(&s.primary));
    relay.wait_ready(Duration::from_secs(60));

    // The slot is the standby's, and no failover slot (PostgreSQL 17 refuses one there).
    let (slot_type, failover) = walrelay_slot(&s.standby_client)
        .await
        .unwrap_or_else(|| panic!("no slot on the standby; log:\n{}", relay.log()));
    assert_eq!(slot_type, "logical");
    assert_ne!(failover.as_deref(), Some("true"));
    assert_eq!(walrelay_slot(&s.primary_client).await, None);
    let log = relay.log();
    assert!(
        log.contains("waits for a running-transactions record from the primary"),
        "log:\n{log}"
    );
    if pg::major_version() >= 17 {
        assert!(
            log.contains("PostgreSQL refuses failover = true for a slot on a standby"),
            "log:\n{log}"
        );
    }

    let end = events("OnThePrimary", 50).insert(&s.primary_client).await;
    let expected = committed_ids(&s.primary_client, "OnThePrimary").await;
    all_arrive(&s.broker, &["outbox.event.OnThePrimary"], &expected, &relay);
    // The standby's slot is confirmed past them.
    eventually(
        Duration::from_secs(60),
        "the standby's slot confirmed past the events",
        || async {
            (confirmed_flush_lsn(&s.standby_client, "walrelay").await >= end - 1024).then_some(())
        },
    )
    .await;
    // The state table is written on the primary: creation, delivery and the
    // watchdog's verification.
    eventually(
        Duration::from_secs(30),
        "walrelay's state row on the primary",
        || async {
            match state_row(&s.primary_client).await {
                Some((Some(_), Some(_), Some(_), Some(1))) => Some(()),
                _ => None,
            }
        },
    )
    .await;
    // The watchdog reads the slot (its lag against the standby's replay
    // position) and the publication there.
    eventually(
        Duration::from_secs(30),
        "the watchdog to read the slot",
        || async { (relay.metric("walrelay_slot_active") == Some(1.0)).then_some(()) },
    )
    .await;
    assert!(
        !relay.log().contains("watchdog cannot"),
        "log:\n{}",
        relay.log()
    );

    // A failover: writes until the primary stops, then the standby is promoted.
    let writer_client = s.primary.client().await;
    let writer = tokio::spawn(async move {
        while events("BeforePromotion", 10)
            .try_insert(&writer_client)
            .await
            .is_ok()
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let before_reader = s.broker.consumer();
    before_reader.subscribe(&["outbox.event.BeforePromotion"]);
    assert!(
        before_reader.read(200, Duration::from_secs(60)).len() >= 200,
        "events did not flow before the promotion; log:\n{}",
        relay.log()
    );
    s.primary.stop("fast");
    writer.await.unwrap();
    s.standby.promote();
    events("AfterPromotion", 50).insert(&s.standby_client).await;

    // The promoted standby's outbox is the ground truth.
    let mut expected = expected;
    for event_type in ["BeforePromotion", "AfterPromotion"] {
        expected.extend(committed_ids(&s.standby_client, event_type).await);
    }
    let topics = [
        "outbox.event.OnThePrimary",
        "outbox.event.BeforePromotion",
        "outbox.event.AfterPromotion",
    ];
    all_arrive(&s.broker, &topics, &expected, &relay);
    eventually(
        Duration::from_secs(30),
        "walrelay to see the promotion",
        || async {
            relay
                .log()
                .contains("is no longer a standby (promoted)")
                .then_some(())
        },
    )
    .await;

    // A restart reads the promoted server's timeline (2) and the same slot,
    // with the old primary gone.
    assert!(relay.terminate(Duration::from_secs(30)).success());
    let restarted = relay_on(&s.standby, &s.broker, Some(&s.primary));
    restarted.wait_ready(Duration::from_secs(60));
    events("AfterRestart", 50).insert(&s.standby_client).await;
    let after_restart = committed_ids(&s.standby_client, "AfterRestart").await;
    expected.extend(after_restart.iter().cloned());
    all_arrive(
        &s.broker,
        &["outbox.event.AfterRestart"],
        &after_restart,
        &restarted,
    );
    eventually(
        Duration::from_secs(30),
        "the delivered position recorded on timeline 2",
        || async {
            let row = state_row(&s.standby_client).await?;
            (row.3 == Some(2)).then_some(())
        },
    )
    .await;
    assert!(
        !restarted.log().contains("created replication slot"),
        "the slot survives the promotion; log:\n{}",
        restarted.log()
    );
    for log in [relay.log(), restarted.log()] {
        assert!(
            !log.contains(PRIMARY_PASSWORD),
            "the password leaked:\n{log}"
        );
    }

    // Everything in Kafka, read again from the start: duplicates are
    // allowed (at least once), an event the promoted standby lacks is not.
    let recount = s.broker.consumer();
    recount.subscribe(&[&topics[..], &["outbox.event.AfterRestart"]].concat());
    let delivered: HashSet<String> = recount
        .read_for(Duration::from_secs(3))
        .iter()
        .map(|m| m.header("id").unwrap().to_string())
        .collect();
    assert_eq!(
        delivered.difference(&expected).count(),
        0,
        "events in Kafka that the promoted standby does not have"
    );
    assert_eq!(expected.difference(&delivered).count(), 0, "events lost");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_standby_without_pg_primary_url_is_refused_before_any_slot_is_created() {
    if !decoding_on_a_standby_available() {
        return;
    }
    let s = servers().await;
    on_primary_then_replayed(&s.primary_client, &s.standby_client, PUBLICATION).await;
    let mut relay = relay_on(&s.standby, &s.broker, None);
    let log = relay.wait_for_failure(Duration::from_secs(60));
    let line = log
        .lines()
        .find(|l| l.contains("names a standby, which is read-only"))
        .unwrap_or_else(|| panic!("no refusal; log:\n{log}"));
    assert!(
        line.contains("--pg-primary-url (WALRELAY_PG_PRIMARY_URL)"),
        "{line}"
    );
    assert_eq!(walrelay_slot(&s.standby_client).await, None);
    // Nothing was written anywhere: no state table on the primary.
    let state_table: Option<String> = s
        .primary_client
        .query_one("SELECT to_regclass('public.walrelay_state')::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(state_table, None);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_standby_without_the_publication_is_refused_with_the_statement_for_the_primary() {
    if !decoding_on_a_standby_available() {
        return;
    }
    let s = servers().await;
    let mut relay = relay_on(&s.standby, &s.broker, Some(&s.primary));
    let log = relay.wait_for_failure(Duration::from_secs(60));
    assert_eq!(walrelay_slot(&s.standby_client).await, None, "log:\n{log}");
    // The statement as walrelay prints it, run on the primary as an operator would.
    let statement = log
        .split_once("which cannot create one: run ")
        .and_then(|(_, rest)| rest.split_once("; on the primary"))
        .map(|(statement, _)| statement.to_string())
        .unwrap_or_else(|| panic!("no statement in the log:\n{log}"));
    assert!(statement.starts_with("CREATE PUBLICATION"), "{statement}");
    on_primary_then_replayed(&s.primary_client, &s.standby_client, &statement).await;

    let relay = relay_on(&s.standby, &s.broker, Some(&s.primary));
    relay.wait_ready(Duration::from_secs(60));
    events("Published", 10).insert(&s.primary_client).await;
    let published = committed_ids(&s.primary_client, "Published").await;
    all_arrive(&s.broker, &["outbox.event.Published"], &published, &relay);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_standby_older_than_16_is_refused_with_the_way_out() {
    let major = pg::major_version();
    if major >= 16 {
        eprintln!("SKIPPED: PostgreSQL {major} decodes on a standby; this test needs 15 or older");
        return;
    }
    let s = servers().await;
    on_primary_then_replayed(&s.primary_client, &s.standby_client, PUBLICATION).await;
    let mut relay = relay_on(&s.standby, &s.broker, Some(&s.primary));
    let log = relay.wait_for_failure(Duration::from_secs(60));
    assert!(
        log.contains(&format!(
            "--pg-url names a standby of PostgreSQL {major}, and logical decoding on a standby \
             needs PostgreSQL 16 or later: point --pg-url at the primary"
        )),
        "log:\n{log}"
    );
}

/// `walrelay check --json` against the standby: the report.
fn check(standby: &Postgres, broker: &Broker, primary: Option<&Postgres>) -> Value {
    let primary_url = primary.map(primary_url);
    let standby_url = standby.url();
    let brokers = broker.brokers();
    let mut args = vec![
        "check",
        "--json",
        "--pg-url",
        &standby_url,
        "--kafka-brokers",
        &brokers,
    ];
    if let Some(url) = &primary_url {
        args.extend(["--pg-primary-url", url.as_str()]);
    }
    let (_, stdout, stderr) = walrelay(&args);
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}\n{stderr}"))
}

/// (status, detail and fix) of one check.
fn entry(doc: &Value, name: &str) -> (String, String) {
    let c = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {doc:#}"));
    (
        c["status"].as_str().unwrap().to_string(),
        format!(
            "{} {}",
            c["detail"].as_str().unwrap_or(""),
            c["fix"].as_str().unwrap_or("")
        ),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn walrelay_check_knows_a_standby_and_what_decoding_there_needs() {
    if !decoding_on_a_standby_available() {
        return;
    }
    let s = servers().await;

    // No publication, no --pg-primary-url: both named with their fix.
    let doc = check(&s.standby, &s.broker, None);
    assert_eq!(doc["ok"], false, "{doc:#}");
    let (status, text) = entry(&doc, "postgres.standby");
    assert_eq!(status, "pass");
    assert!(text.contains("is a standby"), "{text}");
    assert_eq!(entry(&doc, "postgres.hot_standby_feedback").0, "pass");
    let (status, text) = entry(&doc, "postgres.primary_slot_name");
    assert_eq!(status, "pass");
    assert!(text.contains(PHYSICAL_SLOT), "{text}");
    let (status, text) = entry(&doc, "postgres.primary_url");
    assert_eq!(status, "fail");
    assert!(text.contains("WALRELAY_PG_PRIMARY_URL"), "{text}");
    let (status, text) = entry(&doc, "postgres.state");
    assert_eq!(status, "fail");
    assert!(text.contains("--pg-primary-url"), "{text}");
    let (status, text) = entry(&doc, "postgres.publication");
    assert_eq!(status, "fail");
    assert!(
        text.contains("on the primary, as the table's owner: CREATE PUBLICATION \"walrelay\""),
        "{text}"
    );

    // With both, every standby check passes; nothing was created.
    on_primary_then_replayed(&s.primary_client, &s.standby_client, PUBLICATION).await;
    let doc = check(&s.standby, &s.broker, Some(&s.primary));
    for name in [
        "postgres.standby",
        "postgres.primary_url",
        "postgres.publication",
        "postgres.state",
    ] {
        let (status, text) = entry(&doc, name);
        assert_eq!(status, "pass", "{name}: {text}");
    }
    assert!(entry(&doc, "postgres.primary_url")
        .1
        .contains("the standby's primary"));
    assert!(!doc.to_string().contains(PRIMARY_PASSWORD), "{doc:#}");
    assert_eq!(entry(&doc, "postgres.slot_failover").0, "skip");
    assert_eq!(walrelay_slot(&s.standby_client).await, None);

    // Without feedback the slot would not last: a warning with the fix.
    s.standby_client
        .batch_execute("ALTER SYSTEM SET hot_standby_feedback = off")
        .await
        .unwrap();
    s.standby_client
        .batch_execute("SELECT pg_reload_conf()")
        .await
        .unwrap();
    eventually(Duration::from_secs(10), "the reload", || async {
        let on: String = s
            .standby_client
            .query_one("SHOW hot_standby_feedback", &[])
            .await
            .unwrap()
            .get(0);
        (on == "off").then_some(())
    })
    .await;
    let doc = check(&s.standby, &s.broker, Some(&s.primary));
    let (status, text) = entry(&doc, "postgres.hot_standby_feedback");
    assert_eq!(status, "warn");
    assert!(
        text.contains("ALTER SYSTEM SET hot_standby_feedback = on"),
        "{text}"
    );
}
