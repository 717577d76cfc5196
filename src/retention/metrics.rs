//! Retention's metrics, registered beside the relay's only when
//! `--retention` or `--partitions-ahead` is given (docs/operations.md,
//! "Outbox retention").

use prometheus::{Gauge, IntCounter};

use crate::metrics::Metrics;

#[derive(Clone)]
pub struct RetentionMetrics {
    pub rows_deleted: IntCounter,
    pub partitions_dropped: IntCounter,
    pub partitions_created: IntCounter,
    pub partitions_ahead_blocked: IntCounter,
    pub oldest_row_age: Gauge,
    pub waiting: Gauge,
    pub partitions_stuck: Gauge,
    pub errors: IntCounter,
}

impl RetentionMetrics {
    pub fn register(metrics: &Metrics) -> Self {
        let counter = |name: &str, help: &str| {
            let c = IntCounter::new(name, help).expect("valid metric");
            metrics
                .registry()
                .register(Box::new(c.clone()))
                .expect("registered once");
            c
        };
        let gauge = |name: &str, help: &str| {
            let g = Gauge::new(name, help).expect("valid metric");
            metrics
                .registry()
                .register(Box::new(g.clone()))
                .expect("registered once");
            g
        };
        RetentionMetrics {
            rows_deleted: counter(
                "walrelay_retention_rows_deleted_total",
                "Outbox rows retention deleted, their events confirmed.",
            ),
            partitions_dropped: counter(
                "walrelay_retention_partitions_dropped_total",
                "Outbox partitions retention detached and dropped, their events confirmed.",
            ),
            partitions_created: counter(
                "walrelay_retention_partitions_created_total",
                "Outbox partitions --partitions-ahead created.",
            ),
            partitions_ahead_blocked: counter(
                "walrelay_retention_partitions_ahead_blocked_total",
                "Partitions --partitions-ahead left for a later pass because another session \
                 held a lock on the outbox.",
            ),
            oldest_row_age: gauge(
                "walrelay_retention_oldest_row_age_seconds",
                "Age of the oldest row left in the outbox tables (0 when empty).",
            ),
            waiting: gauge(
                "walrelay_retention_waiting_seconds",
                "How long the rows and partitions retention picked have waited for their \
                 events to be confirmed (0 when none wait).",
            ),
            partitions_stuck: gauge(
                "walrelay_retention_partitions_stuck",
                "Partitions past the retention that the last pass could not drop (logged at \
                 error level with the fix, e.g. a partition another role owns): they stay and \
                 the outbox grows.",
            ),
            errors: counter(
                "walrelay_retention_errors_total",
                "Retention passes that failed (logged at error level).",
            ),
        }
    }
}
