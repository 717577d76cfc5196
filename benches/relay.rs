//! Benchmarks with real parts (a private Postgres, a tansu broker, the
//! release walrelay binary). Not a test: it prints figures for
//! docs/benchmarks.md.
//!
//!   cargo bench --bench relay                   # throughput and latency
//!   BENCH_EVENTS=200000 BENCH_TXN_SIZE=100 cargo bench --bench relay -- throughput
//!   BENCH_RATE=2000 BENCH_SECONDS=15 cargo bench --bench relay -- latency
//!
//! Throughput: fills the outbox with BENCH_EVENTS events, then times
//! `pg_recvlogical` draining an identical pgoutput slot to /dev/null
//! (Postgres's own client, the reference) and walrelay draining its slot into the broker
//! until the slot is confirmed past the last commit, with each one's CPU per
//! event (BENCH_EVENTS=1000000 for the long run, BENCH_TXN_SIZE=1 for
//! one-event transactions, BENCH_PAYLOAD_BYTES=8192 for 8 KB payloads;
//! relay/drain.rs). Then a bare producer sends the same records to a fresh
//! broker (relay/bare.rs): the broker's pace, and producing alone.
//!
//! Big transaction (`-- bigtxn`): one transaction of BENCH_BIG_ROWS
//! (1,000,000) rows; reports walrelay's peak RSS while it drains it.
//!
//! Latency (issue 11's set-up): BENCH_RATE events/s (2,000) in transactions
//! of BENCH_TXN_EVENTS (20), each payload carrying the writer's clock just
//! before its INSERT; a consumer with `assign()` and fetch.wait.max.ms =
//! BENCH_FETCH_WAIT_MS (5) records when it reads each one. Prints p50/p99
//! of commit to readable, and walrelay's per-stage histograms.
//!
//! Crash loop (`-- crash`): BENCH_CRASH_EVENTS (20,000) events while
//! walrelay is killed five times and the broker hangs; lost and duplicated.
//!
//! Broker floor (`-- floor`): the latency load produced straight to the
//! broker, no Postgres and no relay.
//!
//! Start-up (`-- startup`): BENCH_STARTUP_RUNS (5) restarts, each timed to
//! streaming and to the acknowledgement of an event waiting in the slot.
//!
//! Beside Debezium (`-- debezium`, only by name): start-up, RSS, a drain of
//! BENCH_DBZ_EVENTS (1,000,000) and latency at BENCH_DBZ_RATE (2,000/s),
//! walrelay and Debezium 3.6.1 in Kafka Connect each in turn on one Apache
//! Kafka broker (benches/relay/debezium.rs).
//!
//! Replay and snapshot (`-- replay`, `-- snapshot`, only when named):
//! `walrelay replay` and `run --snapshot-where` of BENCH_ROWS (200,000)
//! rows against `COPY (SELECT …) TO STDOUT` of the same rows.
//!
//! Exactly once (`-- exactly_once`): its price against at-least-once in the
//! same run, on Apache Kafka (relay/exactly_once.rs).
//!
//! Cost per event (`-- cost`, only by name): CPU per event at a steady rate
//! of one-event transactions and while idle, beside the reference relay and
//! a bare producer (relay/cost.rs).
//!
//! Another build (BENCH_WALRELAY_BIN=/path/to/walrelay): throughput,
//! latency, bigtxn, crash, startup, cost and formats run that binary
//! instead of the one cargo built with the bench (debezium, exactly_once,
//! replay and snapshot do not), so an older commit's release build is
//! measured by the same harness in the same session, A and B in turn; it
//! must take the flags the scenario passes (docs/benchmarks.md, "Before
//! and after the restructure").
//!
//! Avro and Protobuf beside JSON (`-- formats`, only by name): one fill of
//! BENCH_EVENTS (200,000) drained from BENCH_PAIRS (3) rounds of slots in
//! turn, `--value-format json`, `avro` and `protobuf` (keys likewise), the
//! registry's with Apicurio Registry 3.3.3, all with `--expand-json-payload`;
//! events/s and CPU per event of each (relay/formats.rs).

#[path = "../tests/support/mod.rs"]
mod support;

// walrelay's allocator and its options (src/allocator.rs), for the bare
// producer that runs as a child of this binary: its CPU is then
// librdkafka's as walrelay runs it, not glibc's malloc's.
walrelay::process_allocator!();

#[path = "relay/bare.rs"]
mod bare;
#[path = "relay/cost.rs"]
mod cost;
#[path = "relay/crash_loop.rs"]
mod crash_loop;
#[path = "relay/debezium.rs"]
mod debezium;
#[path = "relay/drain.rs"]
mod drain;
#[path = "relay/exactly_once.rs"]
mod exactly_once;
#[path = "relay/floor.rs"]
mod floor;
#[path = "relay/formats.rs"]
mod formats;
#[path = "relay/lifecycle.rs"]
mod lifecycle;
#[path = "relay/startup.rs"]
mod startup;

use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use support::outbox::events;
use support::pg::confirmed_flush_lsn;
use support::{Broker, Postgres, Relay};

/// Extra walrelay flags from BENCH_RELAY_ARGS, e.g. "-X linger.ms=1"; the
/// binary at BENCH_WALRELAY_BIN instead of this build's, if set.
fn start_relay(pg: &Postgres, broker: &Broker) -> Relay {
    let extra = std::env::var("BENCH_RELAY_ARGS").unwrap_or_default();
    let extra: Vec<&str> = extra.split_whitespace().collect();
    start_relay_with(pg, broker, &extra)
}

/// `start_relay` with these flags, not BENCH_RELAY_ARGS.
fn start_relay_with(pg: &Postgres, broker: &Broker, extra: &[&str]) -> Relay {
    Relay::start_program(&walrelay_bin(), pg, broker, extra)
}

/// The walrelay binary the benches run: BENCH_WALRELAY_BIN, or the one
/// cargo built with this bench.
fn walrelay_bin() -> std::path::PathBuf {
    std::env::var_os("BENCH_WALRELAY_BIN")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_walrelay").into())
        .into()
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    if bare::run_if_child() {
        return;
    }
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wants = |name: &str| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str()));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if wants("throughput") {
        runtime.block_on(drain::throughput());
    }
    if wants("latency") {
        runtime.block_on(latency());
    }
    if wants("bigtxn") {
        runtime.block_on(big_transaction());
    }
    if wants("crash") {
        runtime.block_on(crash_loop::crash_loop());
    }
    if wants("startup") {
        runtime.block_on(startup::startup());
    }
    if wants("floor") {
        runtime.block_on(floor::floor());
    }
    // Minutes long and two JVMs: only when asked for by name.
    if filter.iter().any(|f| "debezium".contains(f.as_str())) {
        runtime.block_on(debezium::debezium());
    }
    if filter.iter().any(|f| f == "replay") {
        runtime.block_on(lifecycle::replay());
    }
    if filter.iter().any(|f| f == "snapshot") {
        runtime.block_on(lifecycle::snapshot());
    }
    if filter.iter().any(|f| f == "cost") {
        runtime.block_on(cost::cost());
    }
    // Only when asked for: it needs Apicurio Registry (a JVM).
    if filter.iter().any(|f| f == "formats") {
        runtime.block_on(formats::formats());
    }
    // Only when asked for: it needs Apache Kafka.
    if filter.iter().any(|f| f == "exactly_once") {
        runtime.block_on(exactly_once::exactly_once());
    }
}

/// walrelay, then (with BENCH_REFERENCE_PYTHON) the reference relay, each
/// on a fresh Postgres and broker under the same load.
async fn latency() {
    measure_latency(None).await;
    if let Ok(python) = std::env::var("BENCH_REFERENCE_PYTHON") {
        measure_latency(Some(&python)).await;
    }
}

/// The simple single-threaded relay of benches/reference/relay.py,
/// (its Python needs psycopg2 and confluent-kafka: benches/reference/setup.sh).
struct Reference(std::process::Child);

impl Reference {
    async fn start(
        python: &str,
        pg: &Postgres,
        broker: &Broker,
        client: &tokio_postgres::Client,
    ) -> Self {
        for sql in [
            "CREATE PUBLICATION reference FOR TABLE outbox WITH (publish = 'insert')",
            "SELECT pg_create_logical_replication_slot('reference', 'pgoutput')",
        ] {
            client.batch_execute(sql).await.unwrap();
        }
        broker.create_topic("outbox.event.Latency", 3);
        let linger = std::env::var("BENCH_REFERENCE_LINGER_MS").unwrap_or_else(|_| "1".into());
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/reference/relay.py");
        let child = Command::new(python)
            .args([
                script,
                &pg.url(),
                "reference",
                "reference",
                &broker.brokers(),
                &linger,
            ])
            .spawn()
            .unwrap();
        Reference(child)
    }
}

impl Drop for Reference {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn measure_latency(reference: Option<&str>) {
    let rate = env_or("BENCH_RATE", 2000);
    let seconds = env_or("BENCH_SECONDS", 15);
    let per_txn = env_or("BENCH_TXN_EVENTS", 20).max(1);
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let (relay, _reference) = match reference {
        None => {
            let relay = start_relay(&pg, &broker);
            relay.wait_ready(Duration::from_secs(60));
            (Some(relay), None)
        }
        Some(python) => (
            None,
            Some(Reference::start(python, &pg, &broker, &client).await),
        ),
    };
    let name = if reference.is_some() {
        "reference relay"
    } else {
        "walrelay"
    };
    // Create the topic and warm up the connection before measuring.
    events("Latency", 1)
        .aggregate("warm")
        .payload(r#"{"warmup": true}"#)
        .insert(&client)
        .await;
    let brokers = broker.brokers();
    let total = ((rate * seconds) as usize).div_ceil(per_txn as usize) * per_txn as usize;
    let reader = std::thread::spawn(move || read_latencies(&brokers, total + 1));
    tokio::time::sleep(Duration::from_secs(2)).await;

    // How long the writer's own INSERT and COMMIT take: part of every figure.
    let (achieved, mut commits) = paced_writes(&client, "Latency", rate, per_txn, total).await;
    commits.sort_unstable();
    let at =
        |v: &[i64], p: f64| v[((v.len() as f64 * p) as usize).min(v.len() - 1)] as f64 / 1000.0;
    println!(
        "  the writer's INSERT and COMMIT: p50 {:.2} ms, p99 {:.2} ms",
        at(&commits, 0.50),
        at(&commits, 0.99)
    );
    let latencies = reader.join().unwrap();
    report_latencies(name, achieved, per_txn, seconds, latencies);
    // Where the time goes, as walrelay itself sees it.
    if let Some(relay) = relay {
        let (_, body) = relay.http_get("/metrics").unwrap();
        print_stages(&body);
    }
}

/// The latency load: `total` rows of `event_type`, one statement and one
/// transaction per `per_txn` rows, paced to `rate` events/s, each payload
/// carrying the writer's clock just before its INSERT. Returns the rate
/// achieved and how long each INSERT and COMMIT took (µs).
async fn paced_writes(
    client: &tokio_postgres::Client,
    event_type: &str,
    rate: u64,
    per_txn: u64,
    total: usize,
) -> (f64, Vec<i64>) {
    let insert = client
        .prepare(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             SELECT gen_random_uuid(), 'order', 'order-' || (($1::int + i) % 100), $4, \
                    jsonb_build_object('sent_us', $2::bigint) \
             FROM generate_series(1, $3::int) i",
        )
        .await
        .unwrap();
    let per_txn = per_txn.max(1) as usize;
    let transactions = total / per_txn;
    let interval = Duration::from_secs_f64(per_txn as f64 / rate as f64);
    let mut commits = Vec::with_capacity(transactions);
    let start = Instant::now();
    for t in 0..transactions {
        let due = start + interval * t as u32;
        let now = Instant::now();
        if due > now {
            tokio::time::sleep(due - now).await;
        }
        let first = (t * per_txn) as i32;
        let sent = unix_us();
        client
            .execute(&insert, &[&first, &sent, &(per_txn as i32), &event_type])
            .await
            .unwrap();
        commits.push(unix_us() - sent);
    }
    (total as f64 / start.elapsed().as_secs_f64(), commits)
}

async fn big_transaction() {
    let rows = env_or("BENCH_BIG_ROWS", 1_000_000) as i64;
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let relay = start_relay(&pg, &broker);
    relay.wait_ready(Duration::from_secs(60));
    let fill = Instant::now();
    client
        .execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             SELECT gen_random_uuid(), 'order', 'order-' || (i % 1000), 'Bulk', \
                    jsonb_build_object('version', 1, 'seq', i, 'total_cents', 1999) \
             FROM generate_series(1, $1::bigint) i",
            &[&rows],
        )
        .await
        .unwrap();
    let committed = fill.elapsed().as_secs_f64();
    let end: u64 = client
        .query_one("SELECT (pg_current_wal_lsn() - '0/0')::bigint", &[])
        .await
        .unwrap()
        .get::<_, i64>(0) as u64;
    let mut max_inflight = 0.0f64;
    while confirmed_flush_lsn(&client, "walrelay").await < end {
        max_inflight = max_inflight.max(relay.metric("walrelay_inflight_events").unwrap_or(0.0));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let total = fill.elapsed().as_secs_f64();
    let published = relay
        .metric("walrelay_events_published_total")
        .unwrap_or(0.0);
    assert!(published >= rows as f64, "published {published} of {rows}");
    println!(
        "one transaction of {rows} rows: committed after {committed:.1}s, confirmed after {total:.1}s; \
         walrelay peak RSS {} MiB, most events in flight seen {max_inflight:.0}",
        rss_kib(relay.pid()) / 1024
    );
}

/// p50, p99 and max of commit (or send) to readable.
fn report_latencies(
    name: &str,
    achieved: f64,
    per_txn: u64,
    seconds: u64,
    mut latencies: Vec<i64>,
) {
    latencies.sort_unstable();
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    println!(
        "{name}: latency at {achieved:.0} events/s ({per_txn} a transaction) over {seconds}s ({} events): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        latencies.len(),
        pct(0.50) as f64 / 1000.0,
        pct(0.99) as f64 / 1000.0,
        *latencies.last().unwrap() as f64 / 1000.0
    );
}

/// Microsecond latencies from the `sent_us` in each payload to its arrival.
fn read_latencies(brokers: &str, count: usize) -> Vec<i64> {
    read_latencies_from(brokers, "outbox.event.Latency", count)
}

/// The same, from `topic`, with read_committed (librdkafka's default).
fn read_latencies_from(brokers: &str, topic: &str, count: usize) -> Vec<i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "walrelay-bench")
        .set("enable.auto.commit", "false")
        .set(
            "fetch.wait.max.ms",
            std::env::var("BENCH_FETCH_WAIT_MS").unwrap_or_else(|_| "5".into()),
        )
        .set("fetch.error.backoff.ms", "1")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let partitions = loop {
        let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(5));
        if let Some(n) = md.ok().and_then(|md| {
            md.topics()
                .iter()
                .find(|t| t.name() == topic && t.error().is_none())
                .map(|t| t.partitions().len())
        }) {
            if n > 0 {
                break n;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut list = TopicPartitionList::new();
    for p in 0..partitions as i32 {
        list.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&list).unwrap();
    let mut out = Vec::with_capacity(count);
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut seen = 0;
    while seen < count && Instant::now() < deadline {
        let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        let now = unix_us();
        seen += 1;
        let value: serde_json::Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
        if let Some(sent) = value.get("sent_us").and_then(|v| v.as_i64()) {
            out.push(now - sent);
        }
    }
    out
}

/// p50 and p99 of each stage, read off walrelay's histograms (bucket bounds).
fn print_stages(metrics: &str) {
    let mut stages: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("walrelay_stage_latency_seconds_bucket"))
    {
        let stage = line
            .split("stage=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        let le = line
            .split("le=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        let count: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        let le: f64 = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().unwrap()
        };
        match stages.iter_mut().find(|(s, _)| s == stage) {
            Some((_, buckets)) => buckets.push((le, count)),
            None => stages.push((stage.to_string(), vec![(le, count)])),
        }
    }
    println!("  walrelay's stages (upper bucket bounds):");
    for (stage, buckets) in stages {
        let total = buckets.last().map_or(0.0, |b| b.1);
        let at = |p: f64| {
            buckets
                .iter()
                .find(|(_, c)| *c >= p * total)
                .map_or(f64::NAN, |(le, _)| le * 1000.0)
        };
        println!(
            "    {stage:<22} n={total:<7} p50 ≤ {:.1} ms, p99 ≤ {:.1} ms",
            at(0.5),
            at(0.99)
        );
    }
}

fn unix_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

/// CPU seconds (user + system, every thread) of a process so far.
pub fn cpu_seconds(pid: u32) -> f64 {
    stat_cpu_seconds(&format!("/proc/{pid}/stat")).1
}

/// CPU seconds of each of a process's threads, summed by thread name (the
/// name without its trailing digits, so librdkafka's `rdk:broker1` and
/// `rdk:broker2` are one line).
pub fn thread_cpu_seconds(pid: u32) -> std::collections::BTreeMap<String, f64> {
    let mut by_name = std::collections::BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return by_name;
    };
    for task in tasks.flatten() {
        let (name, seconds) = stat_cpu_seconds(&format!("{}/stat", task.path().display()));
        let name = name
            .trim_end_matches(|c: char| c.is_ascii_digit())
            .to_string();
        *by_name.entry(name).or_insert(0.0) += seconds;
    }
    by_name
}

/// The command name and user + system CPU seconds of a `stat` file.
fn stat_cpu_seconds(path: &str) -> (String, f64) {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    let name = stat
        .split_once('(')
        .and_then(|(_, rest)| rest.rsplit_once(')'))
        .map(|(name, _)| name.to_string())
        .unwrap_or_default();
    // The fields after the command name, which may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the name.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (name, (ticks(11) + ticks(12)) / hz)
}

/// Resident memory now, in KiB: all of it, the anonymous part, and the
/// pages of mapped files (the binary, its libraries), as /proc/PID/status
/// splits them.
pub struct Resident {
    pub total: u64,
    pub anonymous: u64,
    pub files: u64,
}

pub fn resident_kib(pid: u32) -> Resident {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    Resident {
        total: field("VmRSS:"),
        anonymous: field("RssAnon:"),
        files: field("RssFile:"),
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
