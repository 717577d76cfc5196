//! Start-up to streaming: how long a restarted walrelay takes until it
//! streams (`/readyz`) and until an event that waited in the slot is
//! acknowledged by Kafka. After a crash this is the window in which a second
//! crash re-delivers the whole backlog again, so it should be short.

use std::time::{Duration, Instant};

use super::support::outbox::events;
use super::support::{Broker, Postgres, Relay};
use super::{env_or, start_relay};

async fn insert_one(client: &tokio_postgres::Client) {
    events("Startup", 1)
        .aggregate("o-1")
        .payload("{}")
        .insert(client)
        .await;
}

/// Polls often: the figures are milliseconds.
fn wait_until(relay: &Relay, what: &str, check: impl Fn(&Relay) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !check(relay) {
        assert!(
            Instant::now() < deadline,
            "no {what}; log:\n{}",
            relay.log()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

pub async fn startup() {
    let runs = env_or("BENCH_STARTUP_RUNS", 5);
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    // The first start creates the publication, the slot and the topic.
    let relay = start_relay(&pg, &broker);
    relay.wait_ready(Duration::from_secs(60));
    insert_one(&client).await;
    wait_until(&relay, "first event", |r| {
        r.metric("walrelay_events_published_total").unwrap_or(0.0) >= 1.0
    });
    drop(relay);

    let mut ready = Vec::new();
    let mut first = Vec::new();
    for _ in 0..runs {
        // An event waits in the slot, as after a crash.
        insert_one(&client).await;
        let started = Instant::now();
        let relay = start_relay(&pg, &broker);
        wait_until(&relay, "/readyz", |r| {
            r.http_get("/readyz").map(|(s, _)| s) == Some(200)
        });
        ready.push(started.elapsed());
        wait_until(&relay, "acknowledged event", |r| {
            r.metric("walrelay_events_published_total").unwrap_or(0.0) >= 1.0
        });
        first.push(started.elapsed());
        if std::env::var("BENCH_SHOW_LOG").is_ok() {
            println!("{}", relay.log());
            let (_, metrics) = relay.http_get("/metrics").unwrap();
            for line in metrics
                .lines()
                .filter(|l| l.contains("stage_latency_seconds_sum"))
            {
                println!("{line}");
            }
        }
        drop(relay);
    }
    let ms = |d: &Duration| format!("{:.0}", d.as_secs_f64() * 1000.0);
    println!(
        "start-up over {runs} restarts: streaming after {} ms; waiting event acknowledged after {} ms",
        ready.iter().map(ms).collect::<Vec<_>>().join(" / "),
        first.iter().map(ms).collect::<Vec<_>>().join(" / ")
    );
}
