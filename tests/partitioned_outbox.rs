//! A partitioned outbox, as the outbox guides recommend once volumes grow:
//! every partition's events arrive, and a relation walrelay cannot place
//! stops it instead of being skipped.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use support::outbox::{committed_ids, events, read_until_all_arrive};
use support::pg::confirmed_flush_lsn;
use support::{Broker, Postgres, Relay};
use tokio_postgres::Client;

const WAIT: Duration = Duration::from_secs(90);

/// The partitioned outbox of sql/outbox_partitioned.sql with three monthly
/// partitions beside its DEFAULT one.
async fn partitioned_outbox(pg: &Postgres) -> Client {
    let client = pg.client().await;
    client
        .batch_execute(include_str!("../sql/outbox_partitioned.sql"))
        .await
        .unwrap();
    for month in 1..=3 {
        client
            .batch_execute(&format!(
                "CREATE TABLE outbox_2026_0{month} PARTITION OF outbox \
                 FOR VALUES FROM ('2026-0{month}-01') TO ('2026-0{}-01')",
                month + 1
            ))
            .await
            .unwrap();
    }
    client
}

/// A publication that names partitions by their own names, and a slot
/// made by hand, as before walrelay created them through the root.
async fn leaf_publication_and_slot(client: &Client) {
    client
        .batch_execute("CREATE PUBLICATION walrelay FOR TABLE outbox WITH (publish = 'insert')")
        .await
        .unwrap();
    // Slot creation refuses a transaction that has written.
    client
        .batch_execute("SELECT pg_create_logical_replication_slot('walrelay', 'pgoutput')")
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_from_every_partition_arrive_including_default_attached_and_after_a_drop() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = partitioned_outbox(&pg).await;
    let relay = Relay::start(&pg, &broker);
    relay.wait_ready(WAIT);
    let publication: bool = client
        .query_one(
            "SELECT pubviaroot FROM pg_publication WHERE pubname = 'walrelay'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        publication,
        "walrelay creates the publication through the root"
    );

    for day in ["2026-01-15", "2026-02-15", "2026-03-15", "2031-01-01"] {
        events("Partitioned", 15)
            .created_at(day)
            .insert(&client)
            .await;
    }
    // Attached while walrelay streams, both ways Postgres allows.
    client
        .batch_execute(
            "CREATE TABLE outbox_2026_04 (LIKE outbox INCLUDING DEFAULTS); \
             ALTER TABLE outbox ATTACH PARTITION outbox_2026_04 \
               FOR VALUES FROM ('2026-04-01') TO ('2026-05-01'); \
             CREATE TABLE outbox_2026_05 PARTITION OF outbox \
               FOR VALUES FROM ('2026-05-01') TO ('2026-06-01');",
        )
        .await
        .unwrap();
    events("Partitioned", 10)
        .created_at("2026-04-15")
        .insert(&client)
        .await;
    events("Partitioned", 10)
        .created_at("2026-05-15")
        .insert(&client)
        .await;

    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.Partitioned"]);
    let expected = committed_ids(&client, "Partitioned").await;
    assert_eq!(expected.len(), 80);
    let seen = read_until_all_arrive(&reader, &expected, HashSet::new(), &relay, WAIT);

    // Dropping an old partition publishes nothing and streaming goes on.
    client
        .batch_execute("DROP TABLE outbox_2026_01")
        .await
        .unwrap();
    events("Partitioned", 5)
        .created_at("2026-02-20")
        .insert(&client)
        .await;
    let mut after_drop = committed_ids(&client, "Partitioned").await;
    after_drop.extend(expected.iter().cloned());
    let seen = read_until_all_arrive(&reader, &after_drop, seen, &relay, WAIT);
    assert_eq!(seen.len(), 85);
    assert!(
        !relay.log().contains("ERROR"),
        "no error expected; log:\n{}",
        relay.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publication_that_publishes_partitions_by_their_own_names_is_refused_with_the_fix() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = partitioned_outbox(&pg).await;
    client
        .batch_execute("CREATE PUBLICATION walrelay FOR TABLE outbox WITH (publish = 'insert')")
        .await
        .unwrap();
    let log = Relay::start(&pg, &broker).wait_for_failure(WAIT);
    assert!(
        log.contains("ALTER PUBLICATION \"walrelay\" SET (publish_via_partition_root = true);"),
        "{log}"
    );
}

/// Rows decoded from before `publish_via_partition_root` was set carry their
/// partitions' names: walrelay places them through the catalog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_written_while_partitions_were_published_by_their_own_names_still_arrive() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = partitioned_outbox(&pg).await;
    leaf_publication_and_slot(&client).await;
    events("ByLeaf", 10)
        .created_at("2026-01-10")
        .insert(&client)
        .await;
    events("ByLeaf", 10)
        .created_at("2031-06-01")
        .insert(&client)
        .await;
    client
        .batch_execute("ALTER PUBLICATION walrelay SET (publish_via_partition_root = true)")
        .await
        .unwrap();
    events("ByLeaf", 10)
        .created_at("2026-02-10")
        .insert(&client)
        .await;

    let relay = Relay::start(&pg, &broker);
    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.ByLeaf"]);
    let expected = committed_ids(&client, "ByLeaf").await;
    read_until_all_arrive(&reader, &expected, HashSet::new(), &relay, WAIT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_of_a_dropped_partition_stop_walrelay_before_the_slot_moves_past_them() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = partitioned_outbox(&pg).await;
    leaf_publication_and_slot(&client).await;
    let before = confirmed_flush_lsn(&client, "walrelay").await;
    events("Dropped", 10)
        .created_at("2026-01-10")
        .insert(&client)
        .await;
    client
        .batch_execute(
            "DROP TABLE outbox_2026_01; \
             ALTER PUBLICATION walrelay SET (publish_via_partition_root = true);",
        )
        .await
        .unwrap();

    let log = Relay::start(&pg, &broker).wait_for_failure(WAIT);
    assert!(log.contains("outbox_2026_01"), "{log}");
    assert!(
        log.contains("cannot tell whether its rows are events"),
        "{log}"
    );
    // The way past names the transaction's LSN, and warns what it costs.
    assert!(
        log.contains("in the transaction that commits at LSN ")
            && log.contains("SELECT pg_replication_slot_advance('walrelay', '")
            && log.contains("publish them again afterwards"),
        "{log}"
    );
    assert_eq!(
        confirmed_flush_lsn(&client, "walrelay").await,
        before,
        "the slot moved past rows walrelay could not place"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_table_in_the_publication_is_ignored_with_a_warning() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    client
        .batch_execute(
            "CREATE TABLE audit (id serial PRIMARY KEY, note text); \
             CREATE PUBLICATION walrelay FOR TABLE outbox, audit WITH (publish = 'insert');",
        )
        .await
        .unwrap();
    let relay = Relay::start(&pg, &broker);
    relay.wait_ready(WAIT);
    client
        .batch_execute("INSERT INTO audit (note) VALUES ('not an event')")
        .await
        .unwrap();
    events("Beside", 5).insert(&client).await;
    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.Beside"]);
    let expected = committed_ids(&client, "Beside").await;
    read_until_all_arrive(&reader, &expected, HashSet::new(), &relay, WAIT);
    assert!(
        relay.log().contains("also publishes this table"),
        "{}",
        relay.log()
    );
}
