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

/// Inserts `count` events of one type in one transaction, spread over five
/// aggregates, each payload carrying its position in the batch.
pub async fn insert_batch(client: &Client, event_type: &str, count: i32) {
    insert_batch_at(client, event_type, count, None).await
}

/// Like [`insert_batch`], with `created_at` set (it picks the partition of a
/// partitioned outbox); None keeps the column's default.
pub async fn insert_batch_at(
    client: &Client,
    event_type: &str,
    count: i32,
    created_at: Option<&str>,
) {
    try_insert_batch_at(client, event_type, count, created_at)
        .await
        .unwrap();
}

/// `insert_batch` for a server that may go away: the error instead of a panic.
pub async fn try_insert_batch(
    client: &Client,
    event_type: &str,
    count: i32,
) -> Result<u64, tokio_postgres::Error> {
    try_insert_batch_at(client, event_type, count, None).await
}

async fn try_insert_batch_at(
    client: &Client,
    event_type: &str,
    count: i32,
    created_at: Option<&str>,
) -> Result<u64, tokio_postgres::Error> {
    client
        .execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, created_at) \
             SELECT gen_random_uuid(), 'order', 'agg-' || (i % 5), $1, jsonb_build_object('seq', i), \
                    COALESCE($3::text::timestamptz, clock_timestamp()) \
             FROM generate_series(1, $2::int) i",
            &[&event_type, &count, &created_at],
        )
        .await
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
