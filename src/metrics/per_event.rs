//! The observations made for every event, buffered on the thread that
//! publishes.
//!
//! Each event is observed three times: `received_to_produced` when it is
//! handed to the producer, `produced_to_acked` and the delivery latency
//! when its acknowledgement is booked, which also counts it for the
//! watchdog (`Metrics::acked_total`). On the shared histograms each
//! observation is four atomic updates (a shard's count, a bucket, the sum,
//! the count again), and a locked update waits for the core's pending
//! stores: a 1M-event drain cost 6 to 10 % more CPU per event with them
//! (docs/benchmarks.md). Here an observation is a bucket search and three
//! additions on the publisher's own thread, and `flush` adds what was
//! gathered to the shared histograms and counter. The apply loop flushes at
//! every turn, before it waits, so a scrape misses at most the batch being
//! applied; dropping flushes too.

use std::time::{Duration, Instant};

use prometheus::local::LocalHistogram;

use super::{Metrics, Published, Stage};

pub struct EventTimings {
    metrics: Metrics,
    received_to_produced: LocalHistogram,
    produced_to_acked: LocalHistogram,
    delivery_latency: LocalHistogram,
    /// Acknowledged events not yet added to `acked_total`.
    acked: std::cell::Cell<u64>,
}

impl EventTimings {
    pub(super) fn new(metrics: Metrics) -> Self {
        let stage = |stage: Stage| metrics.0.stage_latency[stage as usize].local();
        EventTimings {
            received_to_produced: stage(Stage::ReceivedToProduced),
            produced_to_acked: stage(Stage::ProducedToAcked),
            delivery_latency: metrics.0.delivery_latency.local(),
            acked: std::cell::Cell::new(0),
            metrics,
        }
    }

    /// An event handed to the producer, `took` after it was received.
    pub fn produced(&self, took: Duration) {
        self.received_to_produced.observe(took.as_secs_f64());
    }

    /// An acknowledged event: `acked_at` is when Kafka's answer came, which
    /// may be a little before the apply loop took it; the wait is not part
    /// of the delivery's latency. `took` is from the hand-over to the answer.
    pub fn acked(
        &self,
        published: &Published,
        commit_time_us: i64,
        acked_at: Instant,
        took: Duration,
    ) {
        published.0.inc();
        self.acked.set(self.acked.get() + 1);
        let unix_us = self.metrics.0.unix.unix_us(acked_at);
        let latency = crate::clock::unix_span_us(commit_time_us, unix_us);
        self.delivery_latency.observe(latency.as_secs_f64());
        self.produced_to_acked.observe(took.as_secs_f64());
    }

    /// Adds the observations gathered since the last flush to the shared
    /// histograms.
    pub fn flush(&self) {
        let acked = self.acked.replace(0);
        if acked > 0 {
            let total = &self.metrics.0.acked;
            total.fetch_add(acked, std::sync::atomic::Ordering::Relaxed);
        }
        self.received_to_produced.flush();
        self.produced_to_acked.flush();
        self.delivery_latency.flush();
    }
}

impl Drop for EventTimings {
    fn drop(&mut self) {
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has(metrics: &Metrics, line: &str) -> bool {
        metrics.render().lines().any(|l| l == line)
    }

    #[test]
    fn observations_reach_the_shared_histograms_when_flushed_or_dropped() {
        let metrics = Metrics::new();
        let published = metrics.published("outbox.event.order");
        let timings = metrics.event_timings();
        let produced = "walrelay_stage_latency_seconds_count{stage=\"received_to_produced\"}";
        let acked = "walrelay_stage_latency_seconds_count{stage=\"produced_to_acked\"}";
        timings.produced(Duration::from_micros(40));
        timings.acked(&published, 0, Instant::now(), Duration::from_millis(1));
        assert!(has(&metrics, &format!("{produced} 0")));
        assert!(has(&metrics, "walrelay_delivery_latency_seconds_count 0"));
        assert_eq!(metrics.acked_total(), 0);
        timings.flush();
        assert_eq!(metrics.acked_total(), 1);
        assert!(has(&metrics, &format!("{produced} 1")));
        assert!(has(&metrics, &format!("{acked} 1")));
        assert!(has(&metrics, "walrelay_delivery_latency_seconds_count 1"));
        timings.produced(Duration::from_micros(40));
        timings.acked(&published, 0, Instant::now(), Duration::from_millis(1));
        drop(timings);
        assert!(has(&metrics, &format!("{produced} 2")));
        assert_eq!(metrics.acked_total(), 2);
    }
}
