//! Cost per event (`-- cost`, issue 21): CPU time per event at a steady
//! rate of one-event transactions (the usual outbox write), and the share
//! of a core while idle; beside, in the same run and on the same machine,
//! the reference relay (benches/reference/relay.py) and a bare librdkafka
//! producer sending the same rate (benches/reference/producer.py), when
//! BENCH_REFERENCE_PYTHON names their Python, then a bare producer in Rust
//! with walrelay's Kafka settings and its 4 ms window (relay/bare.rs):
//!
//!   BENCH_REFERENCE_PYTHON=$(benches/reference/setup.sh) cargo bench --bench relay -- cost
//!
//! BENCH_RATE (2,000 events/s) for BENCH_SECONDS (20); BENCH_IDLE_SECONDS
//! (20) of idle first. CPU is user + system of every thread, from /proc;
//! RSS at rest (all of it, anonymous, mapped files) at the end of the idle
//! phase, from /proc/PID/status, and how much of link/hot-functions.txt
//! the build has (build.rs).

use std::collections::HashSet;
use std::process::Command;
use std::time::Duration;

use super::bare::paced_bare_producer;
use super::support::{Broker, Postgres};
use super::{
    cpu_seconds, env_or, paced_writes, resident_kib, start_relay, thread_cpu_seconds, walrelay_bin,
    Reference,
};
use crate::support::outbox::events;

pub async fn cost() {
    let rate = env_or("BENCH_RATE", 2000);
    let seconds = env_or("BENCH_SECONDS", 20);
    let idle = env_or("BENCH_IDLE_SECONDS", 20);
    let python = std::env::var("BENCH_REFERENCE_PYTHON").ok();
    let walrelay = contender(None, rate, seconds, idle).await;
    let Some(python) = python else {
        println!("(BENCH_REFERENCE_PYTHON unset: no reference beside it)");
        return;
    };
    let reference = contender(Some(&python), rate, seconds, idle).await;
    let bare = bare_producer(&python, rate, seconds);
    // librdkafka as walrelay drives it, with nothing else: the records due
    // handed over each 4 ms window, reports served on the same thread.
    let paced = paced_bare_producer(rate, seconds);
    let paced_us = paced.cpu * 1e6 / (rate * seconds) as f64;
    println!(
        "bare producer (Rust, walrelay's Kafka settings, a 4 ms window): {paced_us:.1} µs of CPU \
         per record at {rate}/s"
    );
    println!(
        "walrelay's CPU per event is {:.2}x the reference relay's, {:.1}x the Python bare \
         producer's, {:.1}x the Rust one's; idle {:.2}x the reference's",
        walrelay.per_event_us / reference.per_event_us,
        walrelay.per_event_us / bare,
        walrelay.per_event_us / paced_us,
        walrelay.idle_share / reference.idle_share
    );
}

struct Cost {
    per_event_us: f64,
    /// Percent of one core.
    idle_share: f64,
}

/// One relay on a fresh Postgres and broker: idle first, then the steady load.
async fn contender(python: Option<&str>, rate: u64, seconds: u64, idle: u64) -> Cost {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let (name, relay, reference) = match python {
        None => {
            let relay = start_relay(&pg, &broker);
            relay.wait_ready(Duration::from_secs(60));
            ("walrelay", Some(relay), None)
        }
        Some(python) => {
            let reference = Reference::start(python, &pg, &broker, &client).await;
            ("reference relay", None, Some(reference))
        }
    };
    let pid = relay
        .as_ref()
        .map(|r| r.pid())
        .or(reference.as_ref().map(|r| r.0.id()))
        .unwrap();
    // The topic exists and the connections are warm before anything is timed.
    events("Latency", 1)
        .payload(r#"{"sent_us": 0}"#)
        .insert(&client)
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let before = cpu_seconds(pid);
    tokio::time::sleep(Duration::from_secs(idle)).await;
    let idle_share = 100.0 * (cpu_seconds(pid) - before) / idle as f64;
    // Issue 21's RSS at rest: connected, warm, nothing to do.
    let rest = resident_kib(pid);
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "{name}: RSS at rest {:.1} MiB ({:.1} MiB anonymous, {:.1} MiB of mapped files) after \
         {idle}s idle",
        mib(rest.total),
        mib(rest.anonymous),
        mib(rest.files)
    );
    if relay.is_some() {
        print_hot_functions_found();
    }

    let total = (rate * seconds) as usize;
    let before = cpu_seconds(pid);
    let threads_before = thread_cpu_seconds(pid);
    let (achieved, _) = paced_writes(&client, "Latency", rate, 1, total).await;
    // Every event is in Kafka a few milliseconds after its commit.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cpu = cpu_seconds(pid) - before;
    // Which threads the time went to: where to look first.
    for (thread, seconds) in thread_cpu_seconds(pid) {
        let spent = seconds - threads_before.get(&thread).copied().unwrap_or(0.0);
        if spent > 0.0 {
            println!(
                "  {name} thread {thread}: {:.1} µs per event",
                spent * 1e6 / total as f64
            );
        }
    }
    if let Some(relay) = &relay {
        let published = relay
            .metric("walrelay_events_published_total")
            .unwrap_or(0.0);
        assert!(
            published as usize > total,
            "walrelay published {published} of {total}"
        );
    }
    let per_event_us = cpu * 1e6 / total as f64;
    println!(
        "{name}: {per_event_us:.1} µs of CPU per event at {achieved:.0} events/s, one a \
         transaction, over {seconds}s ({:.1}% of a core); idle {idle_share:.2}% of a core \
         over {idle}s",
        100.0 * cpu / (seconds as f64 + 2.0)
    );
    Cost {
        per_event_us,
        idle_share,
    }
}

/// How many of link/hot-functions.txt's names the walrelay measured has. A list gone
/// stale (a toolchain or dependency bump renames functions) lays out less
/// of the code walrelay runs together, and its RSS at rest grows.
fn print_hot_functions_found() {
    let listed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/link/hot-functions.txt"
    ))
    .unwrap();
    let listed: Vec<&str> = listed
        .lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect();
    let nm = Command::new("nm")
        .arg("--defined-only")
        .arg(walrelay_bin())
        .output();
    let Some(nm) = nm.ok().filter(|nm| nm.status.success()) else {
        println!("  (no nm: cannot say how much of link/hot-functions.txt this build has)");
        return;
    };
    let symbols = String::from_utf8_lossy(&nm.stdout);
    let defined: HashSet<&str> = symbols
        .lines()
        .filter_map(|line| line.split_whitespace().nth(2))
        .collect();
    let found = listed.iter().filter(|name| defined.contains(*name)).count();
    println!(
        "  link/hot-functions.txt: {found} of {} functions in this build \
         (scripts/hot-functions.sh renews it)",
        listed.len()
    );
}

/// A bare librdkafka producer at the same rate: µs of CPU per record.
fn bare_producer(python: &str, rate: u64, seconds: u64) -> f64 {
    let broker = Broker::start();
    broker.create_topic("outbox.event.Latency", 3);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/reference/producer.py");
    let output = Command::new(python)
        .args([
            script,
            &broker.brokers(),
            "outbox.event.Latency",
            &rate.to_string(),
            &seconds.to_string(),
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let cpu: f64 = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap();
    let per_event_us = cpu * 1e6 / (rate * seconds) as f64;
    println!(
        "bare producer (Python, librdkafka): {per_event_us:.1} µs of CPU per record at {rate}/s"
    );
    per_event_us
}
