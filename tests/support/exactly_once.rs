//! Exactly once as a consumer sees it: a writer that goes on through every
//! fault, and the check that a read_committed consumer got each committed
//! event of the outbox table once, nothing else, and per key in commit order.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_postgres::NoTls;

use super::kafka::Received;
use super::outbox::committed_ids;
use super::Broker;

/// walrelay's flags for exactly-once delivery.
pub const EXACTLY_ONCE: &[&str] = &["--delivery", "exactly-once"];

/// How long to go on reading after the last expected event arrived, for a
/// late duplicate to show.
const QUIET: Duration = Duration::from_secs(3);

/// Writes `event_type` events until stopped, in transactions of one to five
/// rows over ten keys, each payload `{"seq": n}` with `n` rising in commit
/// order; reconnects when Postgres goes away. A statement that fails may
/// have committed: the outbox table, not the writer, is the truth.
pub struct Writer {
    stop: Arc<AtomicBool>,
    transactions: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Writer {
    pub fn start(url: String, event_type: &'static str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let transactions = Arc::new(AtomicU64::new(0));
        let (stop_writer, count) = (stop.clone(), transactions.clone());
        let task = tokio::spawn(async move {
            let mut seq = 0i64;
            while !stop_writer.load(Ordering::Relaxed) {
                let Ok((client, connection)) = tokio_postgres::connect(&url, NoTls).await else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                tokio::spawn(connection);
                while !stop_writer.load(Ordering::Relaxed) {
                    let rows = 1 + seq % 5;
                    let written = client
                        .execute(
                            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
                             SELECT gen_random_uuid(), 'order', 'key-' || (($1::bigint + i) % 10), $2, \
                                    jsonb_build_object('seq', $1::bigint + i) \
                             FROM generate_series(0, $3::bigint - 1) i",
                            &[&seq, &event_type, &rows],
                        )
                        .await;
                    // Whatever happened, the next numbers are new ones.
                    seq += rows;
                    if written.is_err() {
                        break;
                    }
                    count.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        });
        Writer {
            stop,
            transactions,
            task,
        }
    }

    /// Transactions that reported their commit so far.
    pub fn transactions(&self) -> u64 {
        self.transactions.load(Ordering::Relaxed)
    }

    pub async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap();
    }
}

/// What a read_committed consumer got of the events committed to the outbox.
pub struct Tally {
    pub expected: usize,
    /// Committed to the outbox, never received.
    pub lost: usize,
    pub duplicated: usize,
    /// Received, though the outbox does not hold them.
    pub unknown: usize,
    received: Vec<Received>,
}

/// Reads `event_type`'s topic with a read_committed consumer until every
/// event committed to the outbox arrived (or `patience` ran out), then a
/// while more, and counts what is missing, doubled or unknown.
pub async fn tally(
    client: &tokio_postgres::Client,
    broker: &Broker,
    event_type: &str,
    patience: Duration,
) -> Tally {
    let expected = committed_ids(client, event_type).await;
    let reader = broker.read_committed();
    reader.subscribe(&[format!("outbox.event.{event_type}").as_str()]);
    let mut received: Vec<Received> = Vec::new();
    let mut seen = HashSet::new();
    let deadline = Instant::now() + patience;
    while !expected.is_subset(&seen) && Instant::now() < deadline {
        for m in reader.read(expected.len(), Duration::from_secs(2)) {
            seen.insert(m.header("id").unwrap().to_string());
            received.push(m);
        }
    }
    received.extend(reader.read_for(QUIET));
    let mut copies: HashMap<&str, usize> = HashMap::new();
    for m in &received {
        *copies.entry(m.header("id").unwrap()).or_default() += 1;
    }
    let lost = expected
        .iter()
        .filter(|id| !copies.contains_key(id.as_str()))
        .count();
    let duplicated = copies.values().filter(|&&n| n > 1).count();
    let unknown = copies.keys().filter(|id| !expected.contains(**id)).count();
    Tally {
        expected: expected.len(),
        lost,
        duplicated,
        unknown,
        received,
    }
}

/// Reads `event_type`'s topic with a read_committed consumer until every
/// event committed to the outbox arrived, then a while more, and checks it
/// got each exactly once, nothing else, and per key in commit order.
/// Returns how many events there were. `log` says why when it did not.
pub async fn each_event_arrives_exactly_once(
    client: &tokio_postgres::Client,
    broker: &Broker,
    event_type: &str,
    log: impl Fn() -> String,
) -> usize {
    let mut tally = tally(client, broker, event_type, Duration::from_secs(180)).await;
    let Tally {
        expected,
        lost,
        duplicated,
        unknown,
        ..
    } = tally;
    assert!(
        lost == 0 && duplicated == 0 && unknown == 0,
        "of {expected} committed events: {lost} lost, {duplicated} delivered more than once, \
         and {unknown} delivered that the outbox does not hold; log:\n{}",
        log()
    );
    assert_commit_order_per_key(&mut tally.received);
    eprintln!("{expected} committed events, each delivered exactly once");
    expected
}

/// Per key, the `seq` of its events rises with their offsets.
fn assert_commit_order_per_key(received: &mut [Received]) {
    received.sort_by_key(|m| (m.partition, m.offset));
    let mut last: HashMap<String, i64> = HashMap::new();
    for m in received.iter() {
        let value: serde_json::Value = serde_json::from_str(m.value.as_deref().unwrap()).unwrap();
        let Some(seq) = value["seq"].as_i64() else {
            continue;
        };
        let key = m.key.clone().unwrap_or_default();
        if let Some(previous) = last.insert(key.clone(), seq) {
            assert!(
                seq > previous,
                "key {key}: seq {seq} delivered after {previous}"
            );
        }
    }
}
