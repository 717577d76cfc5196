//! Outbox retention (`walrelay run --retention`) on a real Postgres and
//! broker: rows and partitions go only once their events are confirmed,
//! through a broker outage longer than the retention and a transaction
//! open across its boundary; young rows stay; partitions are made ahead,
//! never holding up the application's inserts.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use support::outbox::read_until_all_arrive;
use support::{eventually, promtool, Broker, Postgres, Relay, OUTBOX_SQL};
use tokio_postgres::Client;

const WAIT: Duration = Duration::from_secs(60);
/// The retention of these tests, as a flag and in seconds.
const RETENTION: &str = "2s";
const RETENTION_S: f64 = 2.0;

/// A relay with a short retention, passes every 300 ms, and a watchdog
/// and keepalives frequent enough for them; the guard installed, as
/// `--retention` requires.
fn relay(pg: &Postgres, broker: &Broker, extra: &[&str]) -> Relay {
    pg.install_guard();
    let mut flags = vec![
        "--retention",
        RETENTION,
        "--retention-interval",
        "300ms",
        "--watchdog-interval",
        "500ms",
        "--replication-timeout",
        "2s",
    ];
    flags.extend_from_slice(extra);
    let relay = Relay::start_with(pg, broker, &flags);
    relay.wait_ready(WAIT);
    relay
}

/// Commits `n` events of `event_type`, one transaction; their ids.
async fn insert(client: &Client, event_type: &str, n: i32) -> Vec<String> {
    client
        .query(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             SELECT gen_random_uuid(), 'order', 'order-' || (i % 3), $1, '{}' \
             FROM generate_series(1, $2) i RETURNING id::text",
            &[&event_type, &n],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// How many of `ids` are still in the outbox.
async fn present(client: &Client, ids: &[String]) -> usize {
    let n: i64 = client
        .query_one(
            "SELECT count(*) FROM outbox WHERE id::text = ANY($1)",
            &[&ids],
        )
        .await
        .unwrap()
        .get(0);
    n as usize
}

/// The age in seconds of the youngest of `ids` still in the outbox.
async fn youngest_age(client: &Client, ids: &[String]) -> Option<f64> {
    client
        .query_one(
            "SELECT EXTRACT(EPOCH FROM clock_timestamp() - max(created_at))::float8 \
             FROM outbox WHERE id::text = ANY($1)",
            &[&ids],
        )
        .await
        .unwrap()
        .get(0)
}

/// Every one of `ids` is in Kafka's `topic`.
fn all_in_kafka(broker: &Broker, relay: &Relay, topic: &str, ids: &[String]) {
    let reader = broker.consumer();
    reader.subscribe(&[topic]);
    let expected: HashSet<String> = ids.iter().cloned().collect();
    read_until_all_arrive(&reader, &expected, HashSet::new(), relay, WAIT);
}

async fn wait_gone(client: &Client, ids: &[String], relay: &Relay, what: &str) {
    eventually(WAIT, what, || async {
        (present(client, ids).await == 0).then_some(())
    })
    .await;
    assert!(
        relay
            .metric("walrelay_retention_rows_deleted_total")
            .unwrap_or(0.0)
            >= ids.len() as f64,
        "{}",
        relay.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirmed_old_rows_are_deleted_and_young_rows_stay() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let relay = relay(&pg, &broker, &[]);

    let old = insert(&client, "Kept", 20).await;
    all_in_kafka(&broker, &relay, "outbox.event.Kept", &old);
    wait_gone(&client, &old, &relay, "the confirmed rows to be deleted").await;

    // A row younger than the retention is there whenever it is looked at.
    let young = insert(&client, "Kept", 1).await;
    loop {
        let age = youngest_age(&client, &young).await;
        match age {
            Some(age) if age < RETENTION_S - 0.2 => {}
            Some(_) => break,
            None => panic!(
                "a row younger than {RETENTION} was deleted:\n{}",
                relay.log()
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_gone(&client, &young, &relay, "the young row, once old").await;
    assert!(
        relay
            .metric("walrelay_retention_oldest_row_age_seconds")
            .is_some(),
        "{}",
        relay.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_retention_metric_served_is_documented_and_every_documented_one_is_served() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let relay = relay(&pg, &broker, &[]);
    let ids = insert(&client, "Listed", 1).await;
    wait_gone(&client, &ids, &relay, "a row deleted").await;
    let retention = |names: std::collections::BTreeSet<String>| {
        names
            .into_iter()
            .filter(|name| name.starts_with("walrelay_retention_"))
            .collect::<std::collections::BTreeSet<_>>()
    };
    let served = retention(relay.metric_names());
    let documented = retention(support::documented_metrics());
    assert!(served.len() >= 5, "{served:?}");
    assert_eq!(served, documented);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_whose_events_kafka_has_not_acknowledged_stay_through_an_outage_longer_than_the_retention(
) {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let relay = relay(&pg, &broker, &[]);
    let before = insert(&client, "Outage", 5).await;
    all_in_kafka(&broker, &relay, "outbox.event.Outage", &before);

    broker.pause();
    let during = insert(&client, "Outage", 5).await;
    // The outage lasts past three retentions, while passes keep running
    // (and wait, as the metric shows).
    eventually(WAIT, "an outage of three retentions", || async {
        let age = youngest_age(&client, &during).await?;
        let waited = relay.metric("walrelay_retention_waiting_seconds")?;
        (age > 3.0 * RETENTION_S && waited > RETENTION_S).then_some(())
    })
    .await;
    assert_eq!(
        present(&client, &during).await,
        5,
        "rows whose events Kafka has not acknowledged were deleted:\n{}",
        relay.log()
    );

    broker.resume();
    all_in_kafka(&broker, &relay, "outbox.event.Outage", &during);
    wait_gone(
        &client,
        &during,
        &relay,
        "the rows, once their events are confirmed",
    )
    .await;
    wait_gone(&client, &before, &relay, "the rows from before the outage").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_of_a_transaction_open_across_the_retention_boundary_is_deleted_only_after_its_event_is_confirmed(
) {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let relay = relay(&pg, &broker, &[]);

    let open = pg.client().await;
    open.batch_execute("BEGIN").await.unwrap();
    let inside = insert(&open, "Boundary", 1).await;
    // Rows committed after it was written are deleted meanwhile: its row
    // is older than the retention long before it commits.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let later = insert(&client, "Boundary", 3).await;
    wait_gone(&client, &later, &relay, "the later rows to be deleted").await;

    commit_while_kafka_is_away(&open, &broker, &relay).await;
    assert_eq!(
        present(&client, &inside).await,
        1,
        "the row of the transaction open across the boundary went before its event:\n{}",
        relay.log()
    );

    broker.resume();
    all_in_kafka(&broker, &relay, "outbox.event.Boundary", &inside);
    wait_gone(
        &client,
        &inside,
        &relay,
        "its row, once its event is confirmed",
    )
    .await;
}

/// Pauses the broker, commits the transaction open on `open`, and waits
/// until retention's passes have waited for its event a while.
async fn commit_while_kafka_is_away(open: &Client, broker: &Broker, relay: &Relay) {
    broker.pause();
    open.batch_execute("COMMIT").await.unwrap();
    eventually(WAIT, "passes that waited for its event", || async {
        let waited = relay.metric("walrelay_retention_waiting_seconds")?;
        (waited > 2.0 * RETENTION_S).then_some(())
    })
    .await;
}

/// The partitioned outbox with its DEFAULT partition and one partition of
/// two seconds around now, named like `outbox_2026_12_01_103042`.
async fn partitioned(pg: &Postgres) -> Client {
    let client = pg.client().await;
    client
        .batch_execute(include_str!("../sql/outbox_partitioned.sql"))
        .await
        .unwrap();
    client
        .batch_execute(
            "DO $$ DECLARE lo timestamptz := date_trunc('second', clock_timestamp()) \
                 - (extract(second FROM clock_timestamp())::int % 2) * interval '1 second'; \
             BEGIN EXECUTE format('CREATE TABLE public.%I PARTITION OF public.outbox \
                 FOR VALUES FROM (%L) TO (%L)', \
                 'outbox_' || to_char(lo, 'YYYY_MM_DD_HH24MISS'), lo, lo + interval '2 seconds'); \
             END $$",
        )
        .await
        .unwrap();
    client
}

/// The partition a row is in, and that partition's upper bound's age in
/// seconds (negative: ahead of now).
async fn partition_of(client: &Client, id: &str) -> (String, f64) {
    let row = client
        .query_one(
            "SELECT c.relname::text, EXTRACT(EPOCH FROM clock_timestamp() - \
                 (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \\(''([^'']*)''\\)'))[1] \
                 ::timestamptz)::float8 \
             FROM outbox o JOIN pg_class c ON c.oid = o.tableoid WHERE o.id::text = $1",
            &[&id],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

async fn exists(client: &Client, table: &str) -> bool {
    client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
        .await
        .unwrap()
        .get(0)
}

async fn in_default(client: &Client) -> i64 {
    client
        .query_one("SELECT count(*) FROM ONLY outbox_default", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_are_made_ahead_and_old_ones_dropped_once_their_events_are_confirmed() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = partitioned(&pg).await;
    let relay = relay(&pg, &broker, &["--partitions-ahead", "3"]);
    eventually(WAIT, "partitions made ahead", || async {
        (relay.metric("walrelay_retention_partitions_created_total")? >= 1.0).then_some(())
    })
    .await;

    let mut ids = Vec::new();
    for _ in 0..25 {
        ids.extend(insert(&client, "Parted", 1).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eventually(WAIT, "two partitions dropped", || async {
        (relay.metric("walrelay_retention_partitions_dropped_total")? >= 2.0).then_some(())
    })
    .await;
    all_in_kafka(&broker, &relay, "outbox.event.Parted", &ids);
    assert_eq!(in_default(&client).await, 0, "every row found a partition");
    assert!(
        present(&client, &ids).await < ids.len(),
        "rows of dropped partitions are gone"
    );
    // The partition now, and the next, exist.
    let now = insert(&client, "Parted", 1).await;
    let (partition, upper_age) = partition_of(&client, &now[0]).await;
    assert_ne!(partition, "outbox_default");
    assert!(upper_age < 0.0);
    assert!(relay
        .metric("walrelay_retention_rows_deleted_total")
        .is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_an_open_transaction_could_still_write_to_is_not_dropped() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = partitioned(&pg).await;
    let relay = relay(&pg, &broker, &["--partitions-ahead", "3"]);
    // Retention already drops partitions.
    eventually(WAIT, "a first partition dropped", || async {
        insert(&client, "Held", 1).await;
        (relay.metric("walrelay_retention_partitions_dropped_total")? >= 1.0).then_some(())
    })
    .await;

    let open = pg.client().await;
    open.batch_execute("BEGIN").await.unwrap();
    let inside = insert(&open, "Held", 1).await;
    let (partition, _) = partition_of(&open, &inside[0]).await;
    // Well past its upper bound plus the retention, while the transaction stays open.
    eventually(
        WAIT,
        "its partition's bound, plus the retention, to pass",
        || async {
            let (_, upper_age) = partition_of(&open, &inside[0]).await;
            (upper_age > 3.0 * RETENTION_S).then_some(())
        },
    )
    .await;
    assert!(
        exists(&client, &partition).await,
        "the partition of an open transaction was dropped:\n{}",
        relay.log()
    );

    // The partition stays while its row's event is not confirmed.
    commit_while_kafka_is_away(&open, &broker, &relay).await;
    assert!(
        exists(&client, &partition).await,
        "the partition went before its row's event was confirmed:\n{}",
        relay.log()
    );
    broker.resume();
    all_in_kafka(&broker, &relay, "outbox.event.Held", &inside);
    eventually(
        WAIT,
        "its partition to go once its event is confirmed",
        || async { (!exists(&client, &partition).await).then_some(()) },
    )
    .await;
}

/// How far ahead of now the newest partition of the outbox reaches, in
/// seconds.
async fn newest_partition_ahead(client: &Client) -> f64 {
    client
        .query_one(
            "SELECT EXTRACT(EPOCH FROM max((regexp_match(pg_get_expr(c.relpartbound, c.oid), \
                 'TO \\(''([^'']*)''\\)'))[1]::timestamptz) - clock_timestamp())::float8 \
             FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
             WHERE i.inhparent = 'public.outbox'::regclass",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_ahead_never_queue_the_application_s_inserts_behind_an_open_transaction() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = partitioned(&pg).await;
    // Five partitions of 2 s ahead: the hold below outlasts two of them
    // coming due, and not the lot.
    let relay = relay(&pg, &broker, &["--partitions-ahead", "5"]);
    eventually(WAIT, "partitions made ahead", || async {
        (relay.metric("walrelay_retention_partitions_created_total")? >= 1.0).then_some(())
    })
    .await;

    // Any transaction on the outbox keeps CREATE … PARTITION OF waiting for
    // its lock, and an INSERT queues behind a waiting CREATE.
    let open = pg.client().await;
    open.batch_execute("BEGIN; LOCK TABLE outbox IN ACCESS SHARE MODE")
        .await
        .unwrap();
    let held = std::time::Instant::now();
    let mut slowest = Duration::ZERO;
    while held.elapsed() < Duration::from_secs(5) {
        let started = std::time::Instant::now();
        insert(&client, "Held", 1).await;
        slowest = slowest.max(started.elapsed());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A bound on lock queueing, far below the 1 s retention's statements
    // may wait for a lock, not a measure of speed.
    assert!(
        slowest < Duration::from_millis(300),
        "an INSERT waited {slowest:?} behind retention's CREATE of a partition:\n{}",
        relay.log()
    );
    assert!(
        relay
            .metric("walrelay_retention_partitions_ahead_blocked_total")
            .unwrap_or(0.0)
            >= 1.0,
        "no partition came due while the transaction was open:\n{}",
        relay.log()
    );

    // Once the transaction ends, the partitions left over are made.
    open.batch_execute("COMMIT").await.unwrap();
    eventually(WAIT, "the partitions ahead made again", || async {
        (newest_partition_ahead(&client).await > 4.0 * 2.0).then_some(())
    })
    .await;
    assert_eq!(in_default(&client).await, 0, "every row found a partition");
    assert_eq!(
        relay.metric("walrelay_retention_errors_total"),
        Some(0.0),
        "a pass failed:\n{}",
        relay.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_on_a_role_without_delete_stops_walrelay_with_the_grant_that_fixes_it() {
    let pg = Postgres::start();
    let broker = Broker::start();
    pg.install_guard();
    let client = pg.client().await;
    client.batch_execute(OUTBOX_SQL).await.unwrap();
    client
        .batch_execute(
            "CREATE PUBLICATION walrelay FOR TABLE public.outbox WITH (publish = 'insert');
             CREATE ROLE walrelay LOGIN REPLICATION PASSWORD 'pw-retain-1';
             GRANT USAGE ON SCHEMA public TO walrelay;
             GRANT SELECT ON public.outbox TO walrelay;",
        )
        .await
        .unwrap();
    client
        .batch_execute(include_str!("../sql/walrelay_state.sql"))
        .await
        .unwrap();
    let mut relay = Relay::start_raw(
        &pg.url_as("walrelay", "pw-retain-1"),
        &broker.brokers(),
        &["--retention", "7d"],
    );
    let log = relay.wait_for_failure(WAIT);
    let grant = r#"GRANT SELECT, DELETE ON "public"."outbox" TO "walrelay";"#;
    assert!(log.contains(grant), "{log}");

    // walrelay check says so beforehand.
    let (url, brokers) = (pg.url_as("walrelay", "pw-retain-1"), broker.brokers());
    let (ok, stdout, _) = support::walrelay(&[
        "check",
        "--pg-url",
        &url,
        "--kafka-brokers",
        &brokers,
        "--retention",
        "7d",
        "--json",
    ]);
    assert!(!ok);
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let retention = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "postgres.retention")
        .expect("a postgres.retention check");
    assert_eq!(retention["status"], "fail");
    assert!(
        retention["detail"].as_str().unwrap().contains(grant),
        "{retention}"
    );
}

/// The publication's inserts switched off and on again between two
/// watchdog checks: rows written meanwhile never reach the slot, and
/// without the guard nothing in the catalog shows it afterwards.
async fn switch_inserts_off_and_on(client: &Client, event_type: &str, n: i32) -> Vec<String> {
    client
        .batch_execute("ALTER PUBLICATION walrelay SET (publish = 'update')")
        .await
        .unwrap();
    let hidden = insert(client, event_type, n).await;
    client
        .batch_execute("ALTER PUBLICATION walrelay SET (publish = 'insert')")
        .await
        .unwrap();
    hidden
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_without_the_guard_is_refused_before_anything_is_created_and_check_says_why() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let mut relay = Relay::start_with(&pg, &broker, &["--retention", RETENTION]);
    let log = relay.wait_for_failure(WAIT);
    assert!(log.contains("sql/walrelay_guard.sql"), "{log}");
    assert_eq!(
        support::pg::slots_and_publications(&client).await,
        (0, 0),
        "a refused start left a slot or a publication behind"
    );

    // walrelay check fails the same way, with the fix.
    let args: Vec<String> = ["--pg-url", &pg.url(), "--kafka-brokers", &broker.brokers()]
        .iter()
        .map(ToString::to_string)
        .chain(["--retention".to_string(), RETENTION.to_string()])
        .collect();
    let (ok, doc, out) = support::check_json(&args);
    assert!(!ok, "{out}");
    let guard = support::check_entry(&doc, "postgres.guard");
    assert_eq!(guard["status"], "fail", "{doc:#}");
    assert!(
        guard["fix"]
            .as_str()
            .unwrap()
            .contains("sql/walrelay_guard.sql"),
        "{doc:#}"
    );

    // Without --retention the guard stays a recommendation.
    let args: Vec<String> = args[..4].to_vec();
    let (_, doc, _) = support::check_json(&args);
    assert_eq!(
        support::check_entry(&doc, "postgres.guard")["status"],
        "warn"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_written_while_inserts_were_switched_off_are_never_deleted_by_guarded_retention() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let mut relay = relay(&pg, &broker, &[]);
    let delivered = insert(&client, "Seen", 3).await;
    all_in_kafka(&broker, &relay, "outbox.event.Seen", &delivered);

    let hidden = switch_inserts_off_and_on(&client, "Hidden", 5).await;
    eventually(WAIT, "walrelay to stop streaming", || async {
        relay
            .log()
            .contains("walrelay does not stream")
            .then_some(())
    })
    .await;
    // Many passes' worth of time, held: none of them may delete the only copy.
    tokio::time::sleep(Duration::from_secs_f64(4.0 * RETENTION_S)).await;
    assert_eq!(present(&client, &hidden).await, hidden.len());
    let log = relay.wait_for_held_stop(WAIT, "walrelay_publication_broken");
    assert!(log.contains("no longer publishes inserts"), "{log}");
}

/// An operator who accepts the change before publishing the hidden rows
/// again (the runbook says to replay first) must not lose them to
/// retention: they never reached Kafka, and from then on only the outbox
/// holds them. Acceptance moves retention's floor to its own time; rows
/// written after it are deleted as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_written_while_inserts_were_switched_off_survive_a_change_accepted_without_replay() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let relay = relay(&pg, &broker, &[]);
    let delivered = insert(&client, "Seen", 3).await;
    all_in_kafka(&broker, &relay, "outbox.event.Seen", &delivered);
    let hidden = switch_inserts_off_and_on(&client, "Hidden", 5).await;
    let mut relay = relay;
    relay.wait_for_held_stop(WAIT, "walrelay_publication_broken");

    let accepted = Relay::start_with(
        &pg,
        &broker,
        &[
            "--retention",
            RETENTION,
            "--retention-interval",
            "300ms",
            "--watchdog-interval",
            "500ms",
            "--replication-timeout",
            "2s",
            "--accept-outbox-change",
        ],
    );
    accepted.wait_ready(WAIT);
    let after = insert(&client, "After", 3).await;
    all_in_kafka(&broker, &accepted, "outbox.event.After", &after);
    eventually(
        WAIT,
        "rows written after the acceptance to be deleted",
        || async { (present(&client, &after).await == 0).then_some(()) },
    )
    .await;
    assert_eq!(
        present(&client, &hidden).await,
        hidden.len(),
        "retention deleted rows whose events never reached Kafka:\n{}",
        accepted.log()
    );
    assert_eq!(
        present(&client, &delivered).await,
        delivered.len(),
        "rows from before the acceptance are kept as rows from before the slot are"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_written_while_inserts_were_switched_off_stay_when_the_guard_was_removed_meanwhile() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let relay = relay(&pg, &broker, &[]);
    let delivered = insert(&client, "Seen", 3).await;
    all_in_kafka(&broker, &relay, "outbox.event.Seen", &delivered);

    client
        .batch_execute(
            "DROP EVENT TRIGGER walrelay_guard_end; DROP EVENT TRIGGER walrelay_guard_drop",
        )
        .await
        .unwrap();
    let hidden = switch_inserts_off_and_on(&client, "Hidden", 5).await;
    // The rows age past the retention while the slot moves past them.
    eventually(
        WAIT,
        "retention to refuse for want of the guard",
        || async { relay.log().contains("the guard was removed").then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs_f64(4.0 * RETENTION_S)).await;
    assert_eq!(
        present(&client, &hidden).await,
        hidden.len(),
        "retention deleted rows whose events never reached Kafka:\n{}",
        relay.log()
    );
}

/// Slots on the server.
async fn slots(client: &Client) -> i64 {
    client
        .query_one("SELECT count(*) FROM pg_replication_slots", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timestamp_without_time_zone_column_stops_retention_before_any_slot_with_the_alter_that_fixes_it(
) {
    let pg = Postgres::start();
    let broker = Broker::start();
    pg.install_guard();
    let client = pg.client().await;
    client.batch_execute(OUTBOX_SQL).await.unwrap();
    // A writer's local wall time, as DEFAULT now() stores it under PgJDBC.
    client
        .batch_execute(
            "ALTER TABLE outbox ALTER COLUMN created_at TYPE timestamp \
               USING created_at AT TIME ZONE 'UTC', \
             ALTER COLUMN created_at SET DEFAULT now()",
        )
        .await
        .unwrap();
    let fix = r#"ALTER TABLE "public"."outbox" ALTER COLUMN "created_at" TYPE timestamptz USING "created_at" AT TIME ZONE '<the zone the writers used>'"#;

    let mut refused = Relay::start_with(&pg, &broker, &["--retention", "7d"]);
    let log = refused.wait_for_failure(WAIT);
    assert!(
        log.contains("created_at of public.outbox is timestamp without time zone")
            && log.contains(fix),
        "{log}"
    );
    assert_eq!(slots(&client).await, 0, "a slot was created: {log}");

    let args = |extra: &[&str]| {
        let mut args = vec![
            "--pg-url".to_string(),
            pg.url(),
            "--kafka-brokers".to_string(),
            broker.brokers(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        args
    };
    let (ok, doc, out) = support::check_json(&args(&["--retention", "7d"]));
    assert!(!ok, "{out}");
    let retention = support::check_entry(&doc, "postgres.retention");
    assert_eq!(retention["status"], "fail", "{retention}");
    assert!(
        retention["fix"].as_str().is_some_and(|f| f.contains(fix)),
        "{retention}"
    );

    // The fix, with the writers' zone: retention starts.
    client
        .batch_execute(&fix.replace("<the zone the writers used>", "Europe/Berlin"))
        .await
        .unwrap();
    let (_, doc, out) = support::check_json(&args(&["--retention", "7d"]));
    let retention = support::check_entry(&doc, "postgres.retention");
    assert_eq!(retention["status"], "pass", "{out}");
    let relay = relay(&pg, &broker, &[]);
    let ids = insert(&client, "Zoned", 3).await;
    all_in_kafka(&broker, &relay, "outbox.event.Zoned", &ids);
    wait_gone(&client, &ids, &relay, "rows of a timestamptz column").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timestamp_partition_key_is_refused_saying_the_table_must_be_rebuilt() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client().await;
    client
        .batch_execute(
            "CREATE TABLE outbox (id uuid NOT NULL, aggregate_type text NOT NULL, \
               aggregate_id text NOT NULL, event_type text NOT NULL, payload jsonb NOT NULL, \
               created_at timestamp NOT NULL DEFAULT now(), PRIMARY KEY (id, created_at) \
             ) PARTITION BY RANGE (created_at); \
             CREATE TABLE outbox_2026_12_01 PARTITION OF outbox \
               FOR VALUES FROM ('2026-12-01') TO ('2026-12-02'); \
             CREATE TABLE outbox_default PARTITION OF outbox DEFAULT;",
        )
        .await
        .unwrap();
    let mut relay = Relay::start_with(&pg, &broker, &["--partitions-ahead", "2"]);
    let log = relay.wait_for_failure(WAIT);
    assert!(
        log.contains("timestamp without time zone")
            && log.contains("partition key")
            && log.contains("must be rebuilt"),
        "{log}"
    );
    assert_eq!(slots(&client).await, 0, "a slot was created: {log}");
    let (ok, doc, out) = support::check_json(&[
        "--pg-url".to_string(),
        pg.url(),
        "--kafka-brokers".to_string(),
        broker.brokers(),
        "--partitions-ahead".to_string(),
        "2".to_string(),
    ]);
    assert!(!ok, "{out}");
    let retention = support::check_entry(&doc, "postgres.retention");
    assert_eq!(retention["status"], "fail", "{retention}");
    assert!(
        retention["fix"]
            .as_str()
            .is_some_and(|f| f.contains("must be rebuilt")),
        "{retention}"
    );
}

/// The partitions of the outbox but DEFAULT, oldest first.
async fn partition_names(client: &Client) -> Vec<String> {
    client
        .query(
            "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
             WHERE i.inhparent = 'public.outbox'::regclass \
               AND pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT' \
             ORDER BY c.relname",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_outbox_a_dba_set_up_is_refused_at_start_naming_every_partition_and_right_it_lacks_at_once(
) {
    let pg = Postgres::start();
    let broker = Broker::start();
    pg.install_guard();
    let client = partitioned(&pg).await;
    // As reported: the root handed to walrelay, its partitions (one made
    // ahead by the DBA) left to the superuser, and a publication made by
    // hand without publish_via_partition_root.
    client
        .batch_execute(
            "CREATE ROLE walrelay LOGIN REPLICATION PASSWORD 'pw-retain-2';
             ALTER TABLE public.outbox OWNER TO walrelay;
             -- PostgreSQL 15's default; 14 and older grant it to PUBLIC.
             REVOKE CREATE ON SCHEMA public FROM PUBLIC;
             DO $$ DECLARE lo timestamptz := date_trunc('second', clock_timestamp()) \
                 + interval '1 hour'; \
             BEGIN EXECUTE format('CREATE TABLE public.%I PARTITION OF public.outbox \
                 FOR VALUES FROM (%L) TO (%L)', \
                 'outbox_' || to_char(lo, 'YYYY_MM_DD_HH24MISS'), lo, lo + interval '2 seconds'); \
             END $$;
             CREATE PUBLICATION walrelay FOR TABLE public.outbox WITH (publish = 'insert');",
        )
        .await
        .unwrap();
    client
        .batch_execute(include_str!("../sql/walrelay_state.sql"))
        .await
        .unwrap();
    // The partition of now is older than the slot this start makes, so
    // retention never drops it: only the one ahead must be walrelay's.
    let partitions = partition_names(&client).await;
    assert_eq!(partitions.len(), 2, "{partitions:?}");
    let own = |p: &str| format!(r#"ALTER TABLE "public"."{p}" OWNER TO "walrelay";"#);
    let mut statements = vec![own(&partitions[1])];
    statements.extend(
        [
            r#"GRANT pg_read_all_stats TO "walrelay";"#,
            r#"GRANT CREATE ON SCHEMA "public" TO "walrelay";"#,
            r#"GRANT SELECT, DELETE ON "public"."outbox_default" TO "walrelay";"#,
            r#"ALTER PUBLICATION "walrelay" SET (publish_via_partition_root = true);"#,
        ]
        .map(String::from),
    );
    let url = pg.url_as("walrelay", "pw-retain-2");
    let flags = ["--retention", "1m", "--partitions-ahead", "3"];
    let mut relay = Relay::start_raw(&url, &broker.brokers(), &flags);
    let log = relay.wait_for_failure(WAIT);
    for statement in &statements {
        assert!(log.contains(statement.as_str()), "{statement}\n{log}");
    }
    assert!(!log.contains(&own(&partitions[0])), "{log}");
    assert_eq!(
        support::pg::slots_and_publications(&client).await,
        (0, 1),
        "a refused start left a slot behind"
    );

    // walrelay check names the same statements as the fix.
    let args: Vec<String> = ["--pg-url", &url, "--kafka-brokers", &broker.brokers()]
        .into_iter()
        .chain(flags)
        .map(ToString::to_string)
        .collect();
    let (ok, doc, out) = support::check_json(&args);
    assert!(!ok, "{out}");
    let retention = support::check_entry(&doc, "postgres.retention");
    assert_eq!(retention["status"], "fail", "{doc:#}");
    let fix = retention["fix"].as_str().expect("a fix").to_string();
    for statement in &statements {
        assert!(fix.contains(statement.as_str()), "{statement}\n{doc:#}");
    }
    // And that fix is the whole of it.
    client.batch_execute(&fix).await.unwrap();
    let (_, doc, _) = support::check_json(&args);
    assert_eq!(
        support::check_entry(&doc, "postgres.retention")["status"],
        "pass",
        "{doc:#}"
    );
}

/// The partitions of the outbox starting after now, soonest first.
async fn partitions_ahead(client: &Client) -> Vec<String> {
    client
        .query(
            "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
             CROSS JOIN LATERAL (SELECT (regexp_match(pg_get_expr(c.relpartbound, c.oid), \
                 'FROM \\(''([^'']*)''\\)'))[1]::timestamptz AS lower) b \
             WHERE i.inhparent = 'public.outbox'::regclass AND b.lower > clock_timestamp() \
             ORDER BY b.lower",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_another_role_owns_is_counted_stuck_and_walrelay_s_own_partitions_are_still_dropped(
) {
    let pg = Postgres::start();
    let broker = Broker::start();
    pg.install_guard();
    let client = partitioned(&pg).await;
    // Everything walrelay needs; the outbox and its partitions its own.
    client
        .batch_execute(
            "CREATE ROLE walrelay LOGIN REPLICATION PASSWORD 'pw-retain-3';
             CREATE ROLE dba;
             GRANT CREATE ON SCHEMA public TO walrelay;
             GRANT pg_read_all_stats TO walrelay;
             ALTER TABLE public.outbox OWNER TO walrelay;
             DO $$ DECLARE t regclass; BEGIN \
                 FOR t IN SELECT inhrelid::regclass FROM pg_inherits \
                          WHERE inhparent = 'public.outbox'::regclass LOOP \
                     EXECUTE format('ALTER TABLE %s OWNER TO walrelay', t); \
                 END LOOP; END $$;
             CREATE PUBLICATION walrelay FOR TABLE public.outbox \
                 WITH (publish = 'insert', publish_via_partition_root = true);",
        )
        .await
        .unwrap();
    client
        .batch_execute(include_str!("../sql/walrelay_state.sql"))
        .await
        .unwrap();
    let flags = [
        "--retention",
        RETENTION,
        "--retention-interval",
        "300ms",
        "--watchdog-interval",
        "500ms",
        "--replication-timeout",
        "2s",
        "--partitions-ahead",
        "3",
    ];
    let url = pg.url_as("walrelay", "pw-retain-3");
    let relay = Relay::start_raw(&url, &broker.brokers(), &flags);
    relay.wait_ready(WAIT);
    let quiet = promtool::firing_for(relay.metrics_port, Duration::from_secs(2)).await;
    assert!(quiet.is_empty(), "healthy, yet {quiet:?} fire");
    let ahead = eventually(WAIT, "two partitions made ahead", || async {
        let ahead = partitions_ahead(&client).await;
        (ahead.len() >= 2).then_some(ahead)
    })
    .await;
    // While walrelay runs, a DBA takes over the next partition: no start
    // could have seen it.
    let (stuck, after) = (&ahead[0], &ahead[1]);
    client
        .batch_execute(&format!("ALTER TABLE public.{stuck} OWNER TO dba"))
        .await
        .unwrap();

    eventually(WAIT, "the partition after it dropped", || async {
        insert(&client, "Stuck", 1).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        (!exists(&client, after).await).then_some(())
    })
    .await;
    let log = relay.log();
    assert!(exists(&client, stuck).await, "{log}");
    eventually(WAIT, "the stuck partition counted", || async {
        (relay.metric("walrelay_retention_partitions_stuck")? >= 1.0).then_some(())
    })
    .await;
    let fired = promtool::firing_for(relay.metrics_port, Duration::from_secs(2)).await;
    assert!(fired.contains("WalrelayRetentionStuck"), "{fired:?}");
    let fix = format!(r#"ALTER TABLE "public"."{stuck}" OWNER TO "walrelay";"#);
    let log = relay.log();
    assert!(
        log.lines()
            .any(|l| l.contains("ERROR") && l.contains(stuck.as_str()) && l.contains(&fix)),
        "{fix}\n{log}"
    );
}
