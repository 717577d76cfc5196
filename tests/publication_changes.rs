//! The publication changes under a running relay: the outbox table removed
//! from it, dropped and recreated, or renamed. Each publishes nothing more,
//! so walrelay must notice within a watchdog interval and stop, instead of
//! confirming keepalives over events it can no longer see.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use support::outbox::{committed_ids, events, read_until_all_arrive};
use support::{Broker, Postgres, Relay};

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
        client
            .batch_execute(
                "DROP TABLE IF EXISTS outbox; DROP TABLE IF EXISTS outbox_old; \
                 DROP PUBLICATION walrelay; SELECT pg_drop_replication_slot('walrelay');",
            )
            .await
            .unwrap();
        client
            .batch_execute(include_str!("../sql/outbox.sql"))
            .await
            .unwrap();
    }
}
