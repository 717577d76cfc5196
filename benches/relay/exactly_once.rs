//! The price of exactly once (`-- exactly_once`): at-least-once and
//! exactly-once walrelay side by side on one Apache Kafka broker and one
//! Postgres, in the same run, taking turns.
//!
//! Drain: BENCH_EVENTS (200,000) events in transactions of BENCH_TXN_SIZE
//! (100) wait in the outbox; one slot per turn, created before the fill, is
//! drained until it is confirmed past the last commit, BENCH_ROUNDS (2)
//! turns of each mode, alternating. Reported: events/s and the relay's CPU
//! time (user + system) per event.
//!
//! Latency: BENCH_RATE (2,000) events/s in transactions of BENCH_TXN_EVENTS
//! (20) for BENCH_SECONDS (15) per mode, each payload carrying the writer's
//! clock; a read_committed consumer records when it reads each one.
//! Reported: p50/p99/max of commit to readable, and CPU per event.
//!
//! BENCH_EOS_ARGS adds flags to the exactly-once relay only (e.g.
//! "--transaction-max-duration 10ms").

use std::time::{Duration, Instant};

use super::drain::{fill_for_slots, wait_confirmed};
use super::support::outbox::events;
use super::support::{Broker, BrokerKind, Postgres, Relay};
use super::{cpu_seconds, env_or, paced_writes, read_latencies_from, report_latencies};

const MODES: [&str; 2] = ["at-least-once", "exactly-once"];

/// walrelay on `slot` in `mode`, with BENCH_EOS_ARGS for exactly once.
fn relay(pg: &Postgres, broker: &Broker, slot: &str, mode: &str) -> Relay {
    let extra = std::env::var("BENCH_EOS_ARGS").unwrap_or_default();
    let mut flags = vec!["--slot", slot, "--delivery", mode];
    if mode == "exactly-once" {
        flags.extend(extra.split_whitespace());
    }
    Relay::start_with(pg, broker, &flags)
}

pub async fn exactly_once() {
    drain().await;
    latency().await;
}

async fn drain() {
    let events = env_or("BENCH_EVENTS", 200_000) as i64;
    let txn_size = env_or("BENCH_TXN_SIZE", 100) as i64;
    let rounds = env_or("BENCH_ROUNDS", 2);
    let pg = Postgres::start();
    let broker = Broker::start_kind(BrokerKind::Apache);
    let client = pg.client_with_outbox().await;
    broker.create_topic("outbox.event.OrderPlaced", 3);
    let mut slots = Vec::new();
    for round in 0..rounds {
        for mode in MODES {
            slots.push((format!("{}_{round}", mode.replace('-', "_")), mode));
        }
    }
    let names: Vec<&str> = slots.iter().map(|(slot, _)| slot.as_str()).collect();
    let end = fill_for_slots(&client, &names, events, txn_size).await;
    println!("drain: {events} events in transactions of {txn_size}, on Apache Kafka");
    for (slot, mode) in &slots {
        let started = Instant::now();
        let mut relay = relay(&pg, &broker, slot, mode);
        relay.wait_ready(Duration::from_secs(120));
        // Exactly once starts with a probe, a fence and the position read
        // back: timed apart from the drain.
        let ready = started.elapsed().as_secs_f64();
        let deadline = started + Duration::from_secs(900);
        wait_confirmed(&client, &relay, slot, end, deadline).await;
        let secs = started.elapsed().as_secs_f64();
        let cpu = cpu_seconds(relay.pid());
        let transactions = relay
            .metric("walrelay_kafka_transactions_total")
            .map(|n| format!("; {n:.0} Kafka transactions"))
            .unwrap_or_default();
        relay.kill9();
        println!(
            "  {mode:<14} {slot:<16} ready after {ready:.2}s, then {:>7.0} events/s ({:.2}s); \
             CPU {:.2} µs/event{transactions}",
            events as f64 / (secs - ready),
            secs - ready,
            cpu * 1e6 / events as f64
        );
    }
}

async fn latency() {
    let rate = env_or("BENCH_RATE", 2000);
    let seconds = env_or("BENCH_SECONDS", 15);
    let per_txn = env_or("BENCH_TXN_EVENTS", 20).max(1);
    let pg = Postgres::start();
    let broker = Broker::start_kind(BrokerKind::Apache);
    let client = pg.client_with_outbox().await;
    for mode in MODES {
        let event_type = format!("Latency_{}", mode.replace('-', "_"));
        let topic = format!("outbox.event.{event_type}");
        broker.create_topic(&topic, 3);
        let mut relay = relay(&pg, &broker, &mode.replace('-', "_"), mode);
        relay.wait_ready(Duration::from_secs(120));
        // The connection warm, the producer id (or transactional id) taken.
        events(&event_type, 1)
            .aggregate("warm")
            .payload(r#"{"warmup": true}"#)
            .insert(&client)
            .await;
        let total = ((rate * seconds) as usize).div_ceil(per_txn as usize) * per_txn as usize;
        let brokers = broker.brokers();
        let reader = std::thread::spawn(move || read_latencies_from(&brokers, &topic, total + 1));
        tokio::time::sleep(Duration::from_secs(2)).await;
        let cpu_before = cpu_seconds(relay.pid());
        let (achieved, _) = paced_writes(&client, &event_type, rate, per_txn, total).await;
        let latencies = reader.join().unwrap();
        let cpu = cpu_seconds(relay.pid()) - cpu_before;
        report_latencies(mode, achieved, per_txn, seconds, latencies);
        println!(
            "  {mode}: CPU {:.2} µs/event at this rate",
            cpu * 1e6 / total as f64
        );
        if let Some((_, body)) = relay.http_get("/metrics") {
            print_commit_times(&body);
        }
        relay.kill9();
    }
}

/// p50 and p99 of the Kafka commits, read off walrelay's histogram (bucket
/// upper bounds).
fn print_commit_times(metrics: &str) {
    let buckets: Vec<(f64, f64)> = metrics
        .lines()
        .filter_map(|l| l.strip_prefix("walrelay_kafka_transaction_commit_seconds_bucket{le=\""))
        .filter_map(|rest| {
            let (le, count) = rest.split_once("\"} ")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, count.parse().ok()?))
        })
        .collect();
    let Some(&(_, total)) = buckets.last() else {
        return;
    };
    let at = |p: f64| {
        buckets
            .iter()
            .find(|(_, c)| *c >= p * total)
            .map_or(f64::NAN, |(le, _)| le * 1000.0)
    };
    println!(
        "  Kafka commits: n={total}, p50 ≤ {:.1} ms, p99 ≤ {:.1} ms",
        at(0.5),
        at(0.99)
    );
}
