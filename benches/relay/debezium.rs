//! walrelay beside Debezium (`-- debezium`): Debezium 3.6.1's PostgreSQL
//! connector with the outbox EventRouter in a Kafka Connect standalone
//! worker (scripts/debezium.sh), and walrelay, each on its own pgoutput slot
//! of the same Postgres, producing to the same Apache Kafka broker, with the
//! same rows, one after the other so that neither takes the other's CPU.
//!
//! For each: start-up to the first record of an event waiting in the slot,
//! RSS at rest, then a drain of BENCH_DBZ_EVENTS (1,000,000) events in
//! transactions of 1,000 (time to the last record in Kafka, events/s, CPU
//! per event, peak RSS), then BENCH_DBZ_RATE events/s (2,000) in
//! transactions of 20 for BENCH_DBZ_SECONDS (20): latency from the writer's
//! clock to the consumer, p50 and p99, and CPU per event.
//!
//! Both write the payload as its text (Debezium: StringConverter), keyed by
//! `aggregate_id`, routed by `event_type`; Debezium with its defaults
//! otherwise, as a user runs it.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};

use super::support::debezium::{Connect, Properties};
use super::support::{Broker, BrokerKind, Postgres, Relay, TempDir};
use super::{cpu_seconds, env_or, paced_writes, read_latencies_from, report_latencies, rss_kib};

/// Resident memory now, in KiB.
fn rss_now_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Records in every partition of `topic` (the sum of its high watermarks).
fn records(consumer: &BaseConsumer, topic: &str) -> i64 {
    let Ok(md) = consumer.fetch_metadata(Some(topic), Duration::from_secs(5)) else {
        return 0;
    };
    let partitions = md
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .map_or(0, |t| t.partitions().len() as i32);
    (0..partitions)
        .filter_map(|p| {
            consumer
                .fetch_watermarks(topic, p, Duration::from_secs(5))
                .ok()
        })
        .map(|(_, high)| high)
        .sum()
}

/// Waits until `topic` holds `count` records; how long it took.
fn wait_for_records(consumer: &BaseConsumer, topic: &str, count: i64, since: Instant) -> Duration {
    let deadline = Instant::now() + Duration::from_secs(1800);
    while records(consumer, topic) < count {
        assert!(Instant::now() < deadline, "{topic} never reached {count}");
        std::thread::sleep(Duration::from_millis(20));
    }
    since.elapsed()
}

/// One of the two relays, started and stopped by the benchmark.
enum Contender {
    Walrelay(Relay),
    Debezium(Connect),
}

impl Contender {
    fn pid(&self) -> u32 {
        match self {
            Contender::Walrelay(relay) => relay.pid(),
            Contender::Debezium(connect) => connect.pid(),
        }
    }
}

struct Side {
    name: &'static str,
    topic_prefix: &'static str,
}

const SIDES: [Side; 2] = [
    Side {
        name: "walrelay",
        topic_prefix: "wr.",
    },
    Side {
        name: "Debezium 3.6.1",
        topic_prefix: "dbz.",
    },
];

fn start(side: &Side, pg: &Postgres, broker: &Broker, connector: &std::path::Path) -> Contender {
    if side.name == "walrelay" {
        Contender::Walrelay(Relay::start_with(
            pg,
            broker,
            &[
                "--field-event-key",
                "aggregate_id",
                "--topic-replacement",
                "wr.${routedByValue}",
            ],
        ))
    } else {
        Contender::Debezium(Connect::start(broker, &[connector.to_path_buf()]))
    }
}

async fn insert(client: &tokio_postgres::Client, event_type: &str, from: i64, n: i64) {
    client
        .execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             SELECT gen_random_uuid(), 'order', 'order-' || (i % 1000), $3, \
                    jsonb_build_object('version', 1, 'seq', i, 'total_cents', 1999, 'currency', 'EUR') \
             FROM generate_series($1::bigint, $1::bigint + $2::bigint - 1) i",
            &[&from, &n, &event_type],
        )
        .await
        .unwrap();
}

pub async fn debezium() {
    let events = env_or("BENCH_DBZ_EVENTS", 1_000_000) as i64;
    let rate = env_or("BENCH_DBZ_RATE", 2000);
    let seconds = env_or("BENCH_DBZ_SECONDS", 20);
    let pg = Postgres::start();
    let broker = Broker::start_kind(BrokerKind::Apache);
    let client = pg.client_with_outbox().await;
    // Each its own publication and slot, made before any row: both see
    // every row written after this.
    for sql in [
        "CREATE PUBLICATION walrelay FOR TABLE outbox WITH (publish = 'insert')",
        "SELECT pg_create_logical_replication_slot('walrelay', 'pgoutput')",
        "CREATE PUBLICATION dbz FOR TABLE outbox WITH (publish = 'insert')",
        "SELECT pg_create_logical_replication_slot('dbz', 'pgoutput')",
    ] {
        client.batch_execute(sql).await.unwrap();
    }
    // Every topic up front: each relay also routes the other's latency rows.
    for topic in ["Bench", "Drain", "Latency0", "Latency1"] {
        for side in &SIDES {
            broker.create_topic(&format!("{}{topic}", side.topic_prefix), 3);
        }
    }
    let dir = TempDir::new("bench-dbz");
    let connector = dir.0.join("dbz.properties");
    let mut props = Properties::outbox_connector(&pg, "dbz", "public.outbox", 3);
    for (key, value) in [
        ("publication.autocreate.mode", "disabled"),
        (
            "key.converter",
            "org.apache.kafka.connect.storage.StringConverter",
        ),
        (
            "value.converter",
            "org.apache.kafka.connect.storage.StringConverter",
        ),
        ("transforms.outbox.table.field.event.key", "aggregate_id"),
        ("transforms.outbox.route.by.field", "event_type"),
        (
            "transforms.outbox.route.topic.replacement",
            "dbz.${routedByValue}",
        ),
    ] {
        props.set(key, value);
    }
    props.write(&connector);
    let consumer: BaseConsumer = broker.client_config().create().unwrap();

    println!("walrelay beside Debezium on one Apache Kafka broker (each alone in turn)");
    // Start-up: an event waits in both slots.
    insert(&client, "Bench", 0, 1).await;
    for side in &SIDES {
        let topic = format!("{}Bench", side.topic_prefix);
        let started = Instant::now();
        let contender = start(side, &pg, &broker, &connector);
        let first = wait_for_records(&consumer, &topic, 1, started);
        std::thread::sleep(Duration::from_secs(10));
        println!(
            "  {}: first record {:.2}s after start; RSS at rest {} MiB",
            side.name,
            first.as_secs_f64(),
            rss_now_kib(contender.pid()) / 1024
        );
    }

    // Drain: the slots hold `events` events while neither runs.
    let fill = Instant::now();
    let mut done = 0;
    while done < events {
        let n = 1000.min(events - done);
        insert(&client, "Drain", done, n).await;
        done += n;
    }
    println!(
        "  filled {events} events in transactions of 1,000 in {:.1}s",
        fill.elapsed().as_secs_f64()
    );
    // Each drains, then takes a steady rate, then stops: its latency rows
    // are of a type of its own, so the other's rows never count.
    let per_txn = 20;
    let total = (rate * seconds) as usize;
    let mut earlier_latency_rows = 0;
    for (n, side) in SIDES.iter().enumerate() {
        let topic = format!("{}Drain", side.topic_prefix);
        let started = Instant::now();
        let contender = start(side, &pg, &broker, &connector);
        let took = wait_for_records(&consumer, &topic, events, started);
        let cpu = cpu_seconds(contender.pid());
        println!(
            "  {}: drained {events} events in {:.1}s ({:.0} events/s, start-up included); \
             CPU {:.1}s, {:.1} µs per event; peak RSS {} MiB",
            side.name,
            took.as_secs_f64(),
            events as f64 / took.as_secs_f64(),
            cpu,
            cpu * 1e6 / events as f64,
            rss_kib(contender.pid()) / 1024
        );
        // The rows of an earlier side's steady phase, read before this one's.
        if n > 0 {
            let earlier = format!("{}Latency{}", side.topic_prefix, n - 1);
            wait_for_records(&consumer, &earlier, earlier_latency_rows, Instant::now());
        }
        let event_type = format!("Latency{n}");
        let topic = format!("{}{event_type}", side.topic_prefix);
        let brokers = broker.brokers();
        let reader = {
            let topic = topic.clone();
            std::thread::spawn(move || read_latencies_from(&brokers, &topic, total))
        };
        tokio::time::sleep(Duration::from_secs(2)).await;
        let cpu_before = cpu_seconds(contender.pid());
        let (achieved, _) = paced_writes(&client, &event_type, rate, per_txn as u64, total).await;
        let latencies = reader.join().unwrap();
        let cpu = cpu_seconds(contender.pid()) - cpu_before;
        report_latencies(side.name, achieved, per_txn as u64, seconds, latencies);
        println!(
            "  {}: CPU {:.1} µs per event at that rate; RSS {} MiB",
            side.name,
            cpu * 1e6 / total as f64,
            rss_now_kib(contender.pid()) / 1024
        );
        earlier_latency_rows = total as i64;
    }
}
