//! Rows already in the outbox: `walrelay replay` (and the first start's
//! snapshot) against `COPY (SELECT …) TO STDOUT` of the same rows, the
//! rate at which Postgres can hand them out at all.
//!
//!   BENCH_ROWS=200000 cargo bench --bench relay -- replay

use std::process::Command;
use std::time::Instant;

use futures_util::StreamExt;

use super::env_or;
use super::support::{Broker, Postgres};

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

pub async fn replay() {
    let rows = env_or("BENCH_ROWS", 200_000) as i64;
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    fill(&client, rows).await;
    let copy = copy_seconds(&client).await;
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_walrelay"))
        .args(["replay", "--pg-url", &pg.url(), "--kafka-brokers"])
        .arg(broker.brokers())
        .args(["--where", "true"])
        .output()
        .unwrap();
    let replay = started.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // COPY again after, so a machine that got busier shows in the reference.
    let copy_after = copy_seconds(&client).await;
    let per_second = |s: f64| rows as f64 / s;
    println!(
        "replay: {rows} rows in {replay:.2} s = {:.0} rows/s (process start to exit)",
        per_second(replay)
    );
    println!(
        "COPY (SELECT …) TO STDOUT of the same rows: {:.0} rows/s before, {:.0} rows/s after; \
         replay = {:.0}% of the faster",
        per_second(copy),
        per_second(copy_after),
        100.0 * copy.min(copy_after) / replay
    );
}
