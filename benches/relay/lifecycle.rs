//! Rows already in the outbox: `walrelay replay` and the first start's
//! snapshot (`run --snapshot-where`) against `COPY (SELECT …) TO STDOUT` of
//! the same rows, the rate at which Postgres can hand them out at all.
//!
//!   BENCH_ROWS=200000 cargo bench --bench relay -- replay snapshot
//!
//! Each figure is given twice: from process start to the end (connection,
//! plan, topic creation included), and the rate walrelay's own progress
//! line reports (from the first row read to the last acknowledgement).

use std::process::{Command, Stdio};
use std::time::Instant;

use futures_util::StreamExt;

use super::env_or;
use super::support::{Broker, Postgres, Relay};

/// Fills the default outbox with `rows` small events over 1,000 keys.
async fn fill(client: &tokio_postgres::Client, rows: i64) {
    client
        .execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             SELECT gen_random_uuid(), 'order', 'order-' || (i % 1000), 'OrderPlaced', \
                    jsonb_build_object('seq', i, 'total', i * 7) \
             FROM generate_series(1, $1::bigint) i",
            &[&rows],
        )
        .await
        .unwrap();
    client.batch_execute("VACUUM ANALYZE outbox").await.unwrap();
}

/// Seconds `COPY (SELECT every column … ORDER BY id) TO STDOUT` takes,
/// read to the end by the client.
async fn copy_seconds(client: &tokio_postgres::Client) -> f64 {
    let started = Instant::now();
    let stream = client
        .copy_out("COPY (SELECT * FROM outbox WHERE true ORDER BY id) TO STDOUT")
        .await
        .unwrap();
    let mut stream = std::pin::pin!(stream);
    let mut bytes = 0usize;
    while let Some(chunk) = stream.next().await {
        bytes += chunk.unwrap().len();
    }
    assert!(bytes > 0);
    started.elapsed().as_secs_f64()
}

/// The rate in walrelay's last progress line (`…, 52000 rows/s, …`).
fn reported_rate(log: &str, what: &str) -> f64 {
    log.lines()
        .rev()
        .find(|l| l.contains(&format!("{what} progress:")))
        .and_then(|l| l.split(" rows/s").next())
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(f64::NAN)
}

/// A cluster whose outbox holds BENCH_ROWS rows, a broker, and the time
/// COPY takes to read the rows.
async fn set_up() -> (Postgres, Broker, tokio_postgres::Client, i64, f64) {
    let rows = env_or("BENCH_ROWS", 200_000) as i64;
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    fill(&client, rows).await;
    let copy = copy_seconds(&client).await;
    (pg, broker, client, rows, copy)
}

pub async fn replay() {
    let (pg, broker, client, rows, copy) = set_up().await;
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_walrelay"))
        .args(["replay", "--pg-url", &pg.url(), "--kafka-brokers"])
        .arg(broker.brokers())
        .args(["--where", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Its peak resident memory, read while it runs (VmHWM).
    let status = format!("/proc/{}/status", child.id());
    let mut peak_kb = 0u64;
    while child.try_wait().unwrap().is_none() {
        if let Ok(text) = std::fs::read_to_string(&status) {
            peak_kb = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
                .unwrap_or(peak_kb);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let replay = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    println!("replay's peak RSS: {} MiB", peak_kb / 1024);
    // COPY again after, so a machine that got busier shows in the reference.
    let copy_after = copy_seconds(&client).await;
    report(
        "replay",
        rows,
        replay,
        reported_rate(&stderr, "replay"),
        copy,
        copy_after,
    );
}

pub async fn snapshot() {
    let (pg, broker, client, rows, copy) = set_up().await;
    let started = Instant::now();
    let relay = Relay::start_with(&pg, &broker, &["--snapshot-where", "true"]);
    while !relay.log().contains("snapshot published") {
        assert!(started.elapsed().as_secs() < 600, "{}", relay.log());
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let snapshot = started.elapsed().as_secs_f64();
    let copy_after = copy_seconds(&client).await;
    let log = relay.log();
    report(
        "snapshot",
        rows,
        snapshot,
        reported_rate(&log, "snapshot"),
        copy,
        copy_after,
    );
}

fn report(what: &str, rows: i64, seconds: f64, reported: f64, copy: f64, copy_after: f64) {
    let per_second = |s: f64| rows as f64 / s;
    let reference = per_second(copy.min(copy_after));
    println!(
        "{what}: {rows} rows in {seconds:.2} s = {:.0} rows/s from process start ({:.0}% of COPY); \
         its progress line: {reported:.0} rows/s ({:.0}% of COPY)",
        per_second(seconds),
        100.0 * per_second(seconds) / reference,
        100.0 * reported / reference,
    );
    println!(
        "  COPY (SELECT … ORDER BY id) TO STDOUT of the same rows: {:.0} rows/s before, \
         {:.0} rows/s after",
        per_second(copy),
        per_second(copy_after),
    );
}
