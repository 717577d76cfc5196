//! The crash loop: a writer commits events in transactions of 1 to 50 while
//! walrelay is killed with `kill -9` five times, 0.8 to 2 s apart, and
//! restarted 0.3 s after each kill; then the broker hangs for 15 s and
//! recovers. Reports lost events (must be 0) and duplicates (each costs
//! every consumer a dedupe lookup).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::support::outbox::committed_ids;
use super::support::{Broker, Postgres};
use super::{env_or, start_relay};

/// A small deterministic generator: the same run each time.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

pub async fn crash_loop() {
    let events = env_or("BENCH_CRASH_EVENTS", 20_000) as i64;
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let mut relay = start_relay(&pg, &broker);
    relay.wait_ready(Duration::from_secs(60));

    let writer_client = pg.client().await;
    let writer = tokio::spawn(async move {
        let mut rng = Lcg(7);
        let mut written = 0i64;
        while written < events {
            let n = (1 + rng.below(50) as i64).min(events - written);
            writer_client
                .execute(
                    "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
                     SELECT gen_random_uuid(), 'order', 'order-' || (i % 100), 'Crash', \
                            jsonb_build_object('seq', i) \
                     FROM generate_series($1::bigint, $1::bigint + $2::bigint - 1) i",
                    &[&written, &n],
                )
                .await
                .unwrap();
            written += n;
            // About 2,000 events a second, so the kills land mid-stream.
            tokio::time::sleep(Duration::from_micros(500 * n as u64)).await;
        }
    });

    let mut rng = Lcg(42);
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(800 + rng.below(1200))).await;
        relay.kill9();
        tokio::time::sleep(Duration::from_millis(300)).await;
        relay.restart();
    }
    broker.pause();
    tokio::time::sleep(Duration::from_secs(15)).await;
    broker.resume();
    writer.await.unwrap();

    let expected = committed_ids(&client, "Crash").await;
    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.Crash"]);
    let mut counts: HashMap<String, u32> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        for m in reader.read(expected.len(), Duration::from_secs(3)) {
            *counts
                .entry(m.header("id").unwrap().to_string())
                .or_default() += 1;
        }
        let seen: HashSet<&String> = counts.keys().collect();
        if expected.iter().all(|id| seen.contains(id)) || Instant::now() > deadline {
            break;
        }
    }
    // Whatever else is still coming.
    for m in reader.read_for(Duration::from_secs(5)) {
        *counts
            .entry(m.header("id").unwrap().to_string())
            .or_default() += 1;
    }
    let lost = expected
        .iter()
        .filter(|id| !counts.contains_key(*id))
        .count();
    let delivered: u32 = counts.values().sum();
    let duplicates = delivered as usize - counts.len();
    println!(
        "crash loop: {} events committed, 5 kill -9 restarts and a 15 s broker hang: \
         {lost} lost, {duplicates} duplicates ({:.2} % of events)",
        expected.len(),
        100.0 * duplicates as f64 / expected.len() as f64
    );
    assert_eq!(lost, 0, "events were lost; log:\n{}", relay.log());
}
