//! Writing events into the default outbox table and checking that every
//! committed one reached Kafka: the ground truth is the table itself.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use tokio_postgres::Client;

use super::kafka::KafkaReader;
use super::Relay;

/// The server's current WAL position as a number.
pub async fn current_lsn(client: &Client) -> u64 {
    client
        .query_one("SELECT (pg_current_wal_lsn() - '0/0')::bigint", &[])
        .await
        .unwrap()
        .get::<_, i64>(0) as u64
}

/// Events of one type for the default outbox table, written in one
/// transaction: `count` rows over five aggregates (payload `{"seq": n}`)
/// unless the id, aggregate or payload is given.
pub struct Events<'a> {
    event_type: &'a str,
    count: i32,
    id: Option<&'a str>,
    aggregate_id: Option<&'a str>,
    payload: Option<&'a str>,
    created_at: Option<&'a str>,
}

/// `count` events of `event_type`; finish with `.insert(&client)`.
pub fn events(event_type: &str, count: i32) -> Events<'_> {
    Events {
        event_type,
        count,
        id: None,
        aggregate_id: None,
        payload: None,
        created_at: None,
    }
}

impl<'a> Events<'a> {
    /// The event id (a UUID); only for a single event.
    pub fn id(mut self, id: &'a str) -> Self {
        assert_eq!(self.count, 1, "an explicit id is for a single event");
        self.id = Some(id);
        self
    }

    pub fn aggregate(mut self, aggregate_id: &'a str) -> Self {
        self.aggregate_id = Some(aggregate_id);
        self
    }

    /// The payload, as JSON text.
    pub fn payload(mut self, json: &'a str) -> Self {
        self.payload = Some(json);
        self
    }

    /// `created_at`, which picks the partition of a partitioned outbox.
    pub fn created_at(mut self, timestamp: &'a str) -> Self {
        self.created_at = Some(timestamp);
        self
    }

    /// Commits them; returns the server's WAL position after the commit.
    pub async fn insert(self, client: &Client) -> u64 {
        self.try_insert(client).await.unwrap();
        current_lsn(client).await
    }

    /// `insert` for a server that may go away: the rows it committed, or
    /// the error instead of a panic.
    pub async fn try_insert(self, client: &Client) -> Result<u64, tokio_postgres::Error> {
        client
            .execute(
                "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, created_at) \
                 SELECT COALESCE($3::text::uuid, gen_random_uuid()), 'order', \
                        COALESCE($4, 'agg-' || (i % 5)), $1, \
                        COALESCE($5::text::jsonb, jsonb_build_object('seq', i)), \
                        COALESCE($6::text::timestamptz, clock_timestamp()) \
                 FROM generate_series(1, $2::int) i",
                &[
                    &self.event_type,
                    &self.count,
                    &self.id,
                    &self.aggregate_id,
                    &self.payload,
                    &self.created_at,
                ],
            )
            .await
    }
}

/// Every event id of a type committed to the outbox.
pub async fn committed_ids(client: &Client, event_type: &str) -> HashSet<String> {
    client
        .query(
            "SELECT id::text FROM outbox WHERE event_type = $1",
            &[&event_type],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Reads until every id in `expected` has arrived (duplicates allowed),
/// counting `seen` as already read; fails with the relay's log otherwise.
pub fn read_until_all_arrive(
    reader: &KafkaReader,
    expected: &HashSet<String>,
    mut seen: HashSet<String>,
    relay: &Relay,
    timeout: Duration,
) -> HashSet<String> {
    let deadline = Instant::now() + timeout;
    while !expected.is_subset(&seen) && Instant::now() < deadline {
        for m in reader.read(expected.len(), Duration::from_secs(2)) {
            seen.insert(m.header("id").unwrap().to_string());
        }
    }
    let missing: Vec<_> = expected.difference(&seen).collect();
    assert!(
        missing.is_empty(),
        "{} of {} committed events never arrived, e.g. {:?}; log:\n{}",
        missing.len(),
        expected.len(),
        missing.iter().take(3).collect::<Vec<_>>(),
        relay.log()
    );
    seen
}

/// A second outbox table, `SCHEMA.outbox`, laid out like the default one.
pub async fn add_outbox(client: &Client, schema: &str) {
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; \
             CREATE TABLE {schema}.outbox (LIKE public.outbox INCLUDING ALL);"
        ))
        .await
        .unwrap();
}

/// The outbox the seeds' ORMs make (Prisma `@default(now())`, TypeORM
/// `@CreateDateColumn`, Drizzle `defaultNow()`): a random id, and the
/// transaction's start time, equal for every row of a transaction.
pub const SEEDS_OUTBOX: &str = "CREATE TABLE outbox (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    aggregate_type text NOT NULL,
    aggregate_id text NOT NULL,
    event_type text NOT NULL,
    payload jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)";

/// `transactions` transactions, from number `first` on, each writing five
/// events for each of three keys, one statement an event round: payload
/// `{"n": …}` counts each key's events in the order they were written.
pub async fn write_bursts(client: &Client, event_type: &str, first: i64, transactions: i64) {
    for t in first..first + transactions {
        let mut sql = String::from("BEGIN;");
        for i in 0..5 {
            sql.push_str(&format!(
                "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) \
                 SELECT 'order', 'agg-' || k, '{event_type}', jsonb_build_object('n', {}) \
                 FROM generate_series(1, 3) k;",
                t * 5 + i
            ));
        }
        sql.push_str("COMMIT;");
        client.batch_execute(&sql).await.unwrap();
    }
}

/// Each key's `n`s that arrived after a later one: none when every key's
/// events are in the order they were written.
pub fn key_order_inversions(records: &[super::kafka::Received]) -> Vec<String> {
    let mut last: std::collections::HashMap<String, i64> = Default::default();
    let mut inversions = Vec::new();
    for r in records {
        let value: serde_json::Value = serde_json::from_str(r.value.as_deref().unwrap()).unwrap();
        let n = value["n"].as_i64().unwrap();
        let key = r.key.clone().unwrap();
        if let Some(&before) = last.get(&key) {
            if n < before {
                inversions.push(format!("{key}: {n} after {before}"));
            }
        }
        last.insert(key, n);
    }
    inversions
}
