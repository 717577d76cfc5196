//! Several outbox tables in one relay (Debezium's `table.include.list` with
//! more than one table): every table's events arrive, in commit order across
//! the tables, and a table the publication leaves out stops walrelay with
//! the fix instead of being skipped.

mod support;

use std::time::Duration;

use support::outbox::add_outbox;
use support::{Broker, Postgres, Relay};
use tokio_postgres::Client;

const WAIT: Duration = Duration::from_secs(60);

/// The default outbox and a second one, billing.outbox, of the same layout.
async fn two_outboxes(pg: &Postgres) -> Client {
    let client = pg.client_with_outbox().await;
    add_outbox(&client, "billing").await;
    client
}

/// One event in `table`, in its own transaction unless the caller opened one.
async fn insert(client: &Client, table: &str, seq: i32) {
    client
        .execute(
            &format!(
                "INSERT INTO {table} (id, aggregate_type, aggregate_id, event_type, payload) \
                 VALUES (gen_random_uuid(), 'account', 'acc-1', 'Ledger', \
                         jsonb_build_object('seq', $1::int, 'table', $2::text))"
            ),
            &[&seq, &table],
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_of_several_outbox_tables_arrive_in_commit_order_across_them() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = two_outboxes(&pg).await;
    let relay = Relay::start_with(&pg, &broker, &["--table", "public.outbox,billing.outbox"]);
    relay.wait_ready(WAIT);

    // Alternate the tables, and put both in one transaction twice.
    let mut seq = 0;
    for round in 0..5 {
        for table in ["public.outbox", "billing.outbox"] {
            seq += 1;
            insert(&client, table, seq).await;
        }
        if round % 2 == 0 {
            client.batch_execute("BEGIN").await.unwrap();
            for table in ["billing.outbox", "public.outbox"] {
                seq += 1;
                insert(&client, table, seq).await;
            }
            client.batch_execute("COMMIT").await.unwrap();
        }
    }

    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.Ledger"]);
    let got = reader.read(seq as usize, WAIT);
    assert_eq!(got.len(), seq as usize, "log:\n{}", relay.log());
    // One key, so one partition: Kafka's order is the commit order.
    let order: Vec<i64> = got
        .iter()
        .map(|m| {
            let value: serde_json::Value =
                serde_json::from_str(m.value.as_deref().unwrap()).unwrap();
            value["seq"].as_i64().unwrap()
        })
        .collect();
    assert_eq!(order, (1..=seq as i64).collect::<Vec<_>>());
    let from_billing = got
        .iter()
        .filter(|m| m.value.as_deref().unwrap().contains("billing.outbox"))
        .count();
    assert_eq!(from_billing, seq as usize / 2);

    // The first start created the publication for both tables.
    let published: Vec<String> = client
        .query(
            "SELECT schemaname || '.' || tablename FROM pg_publication_tables \
             WHERE pubname = 'walrelay' ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(published, ["billing.outbox", "public.outbox"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_table_the_publication_leaves_out_is_refused_with_the_fix() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = two_outboxes(&pg).await;
    client
        .batch_execute(
            "CREATE PUBLICATION walrelay FOR TABLE public.outbox WITH (publish = 'insert')",
        )
        .await
        .unwrap();
    let mut relay = Relay::start_with(&pg, &broker, &["--table", "public.outbox,billing.outbox"]);
    let log = relay.wait_for_failure(WAIT);
    assert!(
        log.contains("billing.outbox") && log.contains("ALTER PUBLICATION"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_with_other_tables_waits_for_an_accepted_change_and_the_old_one_then_stops() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = two_outboxes(&pg).await;
    let mut old = Relay::start_with(&pg, &broker, &["--watchdog-interval", "1s"]);
    old.wait_ready(WAIT);

    // A rolling deploy adds a table: the new instance does not stream beside
    // the old one, which would confirm past the new table's events.
    let both = ["--table", "public.outbox,billing.outbox"];
    let mut new = Relay::start_with(&pg, &broker, &both);
    let log = new.wait_for_failure(WAIT);
    assert!(
        log.contains("read with other settings") && log.contains("billing.outbox"),
        "{log}"
    );
    assert!(log.contains("--accept-config-change"), "{log}");

    // The documented steps: accept the change (the old instance stops), then
    // publish the new table, then run the new configuration.
    let accepted = [&both[..], &["--accept-config-change"]].concat();
    let mut new = Relay::start_with(&pg, &broker, &accepted);
    let log = old.wait_for_failure(WAIT);
    assert!(
        log.contains("another walrelay recorded other settings"),
        "{log}"
    );
    let _ = new.wait(WAIT);
    client
        .batch_execute("ALTER PUBLICATION walrelay ADD TABLE billing.outbox")
        .await
        .unwrap();
    let new = Relay::start_with(&pg, &broker, &both);
    new.wait_ready(WAIT);
    insert(&client, "billing.outbox", 1).await;
    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.Ledger"]);
    assert_eq!(reader.read(1, WAIT).len(), 1, "{}", new.log());
}
