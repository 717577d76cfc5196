//! A consumer that applies each outbox event exactly once, although walrelay
//! delivers at least once. It records the event id in `processed_events` in
//! the same transaction as its work; a redelivered event finds its id there
//! and is skipped.
//!
//! cargo run --example dedupe_consumer -- BROKERS TOPIC PG_URL COUNT TIMEOUT_SECS
//!
//! The work here: add each event's `amount` to the `totals` row of its
//! aggregate (the Kafka key). Applied twice, a total would be wrong.

use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use tokio_postgres::NoTls;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS processed_events (
    event_id     text PRIMARY KEY,
    processed_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS totals (
    aggregate_id text PRIMARY KEY,
    total        bigint NOT NULL
);";

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [brokers, topic, pg_url, count, timeout] = args.as_slice() else {
        eprintln!("usage: dedupe_consumer BROKERS TOPIC PG_URL COUNT TIMEOUT_SECS");
        std::process::exit(2);
    };
    let (count, timeout): (usize, u64) = (count.parse()?, timeout.parse()?);

    let (mut db, connection) = tokio_postgres::connect(pg_url, NoTls).await?;
    tokio::spawn(connection);
    db.batch_execute(SCHEMA).await?;

    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "dedupe-consumer")
        .set("enable.auto.commit", "false")
        .create()?;
    let partitions = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))?
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .map_or(0, |t| t.partitions().len());
    let mut assignment = TopicPartitionList::new();
    for p in 0..partitions as i32 {
        assignment.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    consumer.assign(&assignment)?;

    let (mut seen, mut applied, mut duplicates) = (0, 0, 0);
    let deadline = Instant::now() + Duration::from_secs(timeout);
    while seen < count && Instant::now() < deadline {
        let Some(message) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let message = message?;
        seen += 1;
        let event_id = message
            .headers()
            .and_then(|h| h.iter().find(|h| h.key == "id").and_then(|h| h.value))
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .ok_or("message without an id header")?;
        let key = String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned();
        let payload: serde_json::Value =
            serde_json::from_slice(message.payload().unwrap_or(b"null"))?;
        let amount = payload["amount"].as_i64().unwrap_or(0);

        // The dedupe record and the work commit together, or neither does.
        let txn = db.transaction().await?;
        let first_time = txn
            .query_opt(
                "INSERT INTO processed_events (event_id) VALUES ($1) \
                 ON CONFLICT DO NOTHING RETURNING event_id",
                &[&event_id],
            )
            .await?
            .is_some();
        if first_time {
            txn.execute(
                "INSERT INTO totals (aggregate_id, total) VALUES ($1, $2) \
                 ON CONFLICT (aggregate_id) DO UPDATE SET total = totals.total + EXCLUDED.total",
                &[&key, &amount],
            )
            .await?;
            applied += 1;
        } else {
            duplicates += 1;
        }
        txn.commit().await?;
        // Commit the Kafka offset only after the database commit (a real
        // consumer group would call commit_message here).
    }
    println!("read {seen}, applied {applied}, skipped {duplicates} duplicates");
    Ok(())
}
