//! The transactional producer's id, and how long its open transaction has
//! run.
//!
//! The age matters because a fence can come with no other producer. The
//! coordinator aborts a transaction open longer than
//! `transaction.timeout.ms` itself, and bumps the producer's epoch to do
//! it. walrelay's own abort (or epoch bump, or commit) of that transaction
//! still carries the old epoch, and the coordinator checks the epoch before
//! anything else: it answers PRODUCER_FENCED, which librdkafka makes fatal.
//! Whether the coordinator or walrelay gets there first is a race; with a
//! broker restarted under load, CI lost it (Apache Kafka 4.4). The epoch
//! the coordinator bumped from is kept in memory only, so a coordinator
//! that restarted or moved cannot take that abort for a retry either
//! (Kafka's `TransactionCoordinator` and `TransactionLog`). Such a fence is
//! walrelay's transaction timing out, not another walrelay.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;

/// librdkafka's `transaction.timeout.ms` when it is not set.
const DEFAULT_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);

/// The transactional.id of walrelay on a slot of a database cluster.
pub fn transactional_id(system_id: &str, slot: &str) -> String {
    format!("walrelay-{system_id}-{slot}")
}

/// The id of a start-up probe: its own, so that it fences nobody.
pub fn probe_id(slot: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("walrelay-probe-{slot}-{:x}-{nanos:x}", std::process::id())
}

/// The producer configuration with a transactional id. A record may not
/// outlive its transaction: librdkafka then times records out with the
/// transaction (`message.timeout.ms` defaults to `transaction.timeout.ms`),
/// so walrelay's "retry forever" default goes, and a broker away for
/// longer aborts the transaction, which is sent again.
pub fn config(base: &ClientConfig, id: &TransactionalId) -> ClientConfig {
    let mut config = base.clone();
    config.set("transactional.id", &id.id);
    if config.get("message.timeout.ms") == Some("0") {
        config.remove("message.timeout.ms");
    }
    config
}

/// A transactional producer's id, and since when its open transaction has
/// run (from `begun` to `ended`).
pub struct TransactionalId {
    id: String,
    timeout: Duration,
    began: Mutex<Option<Instant>>,
}

impl TransactionalId {
    /// `id` for a producer made from `config`, whose
    /// `transaction.timeout.ms` the coordinator times transactions out by.
    pub fn new(id: String, config: &ClientConfig) -> Arc<Self> {
        let timeout = config
            .get("transaction.timeout.ms")
            .and_then(|ms| ms.trim().parse().ok())
            .map_or(DEFAULT_TRANSACTION_TIMEOUT, Duration::from_millis);
        Arc::new(TransactionalId {
            id,
            timeout,
            began: Mutex::new(None),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.id
    }

    /// A transaction was begun.
    pub fn begun(&self) {
        *self.began.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }

    /// The transaction committed or aborted.
    pub fn ended(&self) {
        *self.began.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// How long the open transaction has run, if that is longer than
    /// `transaction.timeout.ms`: the coordinator has aborted it.
    pub fn outlived(&self) -> Option<(Duration, Duration)> {
        let began = (*self.began.lock().unwrap_or_else(|e| e.into_inner()))?;
        let age = began.elapsed();
        (age > self.timeout).then_some((age, self.timeout))
    }

    /// For tests: a transaction begun `ago`.
    #[cfg(test)]
    pub fn begun_ago(&self, ago: Duration) {
        let began = Instant::now()
            .checked_sub(ago)
            .expect("the monotonic clock reaches back that far");
        *self.began.lock().unwrap_or_else(|e| e.into_inner()) = Some(began);
    }
}

impl fmt::Display for TransactionalId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transactional_id_names_the_cluster_and_the_slot_and_a_probe_fences_nobody() {
        assert_eq!(
            transactional_id("7412345678901234567", "walrelay"),
            "walrelay-7412345678901234567-walrelay"
        );
        let (a, b) = (probe_id("walrelay"), probe_id("walrelay"));
        assert!(a.starts_with("walrelay-probe-walrelay-"), "{a}");
        assert_ne!(a, b);
    }

    #[test]
    fn a_transactional_producer_times_records_out_with_its_transaction() {
        let mut base = ClientConfig::new();
        base.set("message.timeout.ms", "0").set("linger.ms", "5");
        let id = TransactionalId::new("walrelay-1-s".into(), &base);
        let config = config(&base, &id);
        assert_eq!(config.get("transactional.id"), Some("walrelay-1-s"));
        assert_eq!(config.get("message.timeout.ms"), None);
        assert_eq!(config.get("linger.ms"), Some("5"));
        base.set("message.timeout.ms", "30000");
        assert_eq!(
            super::config(&base, &id).get("message.timeout.ms"),
            Some("30000")
        );
    }

    #[test]
    fn only_an_open_transaction_older_than_the_transaction_timeout_is_outlived() {
        let mut config = ClientConfig::new();
        config.set("transaction.timeout.ms", "6000");
        let id = TransactionalId::new("walrelay-1-s".into(), &config);
        assert_eq!(id.outlived(), None, "no transaction is open");
        id.begun_ago(Duration::from_secs(5));
        assert_eq!(id.outlived(), None, "younger than the timeout");
        id.begun_ago(Duration::from_secs(7));
        let (age, timeout) = id.outlived().expect("older than the timeout");
        assert!(age >= Duration::from_secs(7));
        assert_eq!(timeout, Duration::from_secs(6));
        id.ended();
        assert_eq!(id.outlived(), None, "ended");
        // librdkafka's default when it is not set.
        let id = TransactionalId::new("x".into(), &ClientConfig::new());
        id.begun_ago(Duration::from_secs(59));
        assert_eq!(id.outlived(), None);
    }
}
