//! The apply loop's bookkeeping in one place: what was received, what is in
//! flight, which LSN is safe to confirm, and when to tell Postgres; with the
//! metrics that show each of them.
//!
//! Why a confirmed LSN is safe: it only ever comes from the checkpoint, which
//! moves it to a transaction's end LSN once that transaction's Commit was read
//! and the sink acknowledged every one of its events, and every earlier
//! transaction is done too (or to a keepalive's WAL end when nothing at all is
//! pending). Restarting from it re-reads whatever is not yet acknowledged.

use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use crate::config::Flow;
use crate::delivery::checkpoint::{Checkpoint, TxnSeq};
use crate::metrics::{Metrics, Published, Stage};
use crate::postgres::lsn::Lsn;

/// How soon a moved confirmation is reported: often enough that a crash
/// re-delivers little, rarely enough to cost the walsender nothing.
pub const PROMPT_CONFIRM: Duration = Duration::from_millis(20);

/// What travels with each record through the sink and comes back with its
/// delivery.
#[derive(Debug, Clone)]
pub struct Ticket {
    pub txn: TxnSeq,
    pub commit_lsn: Lsn,
    /// Microseconds since the Unix epoch.
    pub commit_time_us: i64,
    /// Key and value bytes, as counted in flight.
    pub bytes: usize,
    pub event_id: Option<Bytes>,
    /// The topic's published-events counter, counted on acknowledgement.
    pub published: Published,
    /// The record's own timestamp, for sending it again.
    pub timestamp_ms: i64,
    /// A dead-letter copy, not the event itself.
    pub dead_letter: bool,
    /// Sent with nothing else in flight, so in a batch of its own: a size
    /// refusal is its own.
    pub alone: bool,
}

/// The transaction whose changes are arriving now.
#[derive(Debug, Clone, Copy)]
pub struct TxnRef {
    pub seq: TxnSeq,
    pub commit_lsn: Lsn,
    /// Microseconds since the Unix epoch.
    pub commit_time_us: i64,
}

pub struct Progress {
    checkpoint: Checkpoint,
    /// The furthest WAL position read from the server.
    received: Lsn,
    inflight_events: usize,
    inflight_bytes: usize,
    /// An event read and not yet handed to the sink waits for its topic.
    waiting_for_topic: bool,
    /// The confirmed LSN of the last status update, and when it went out.
    reported: Lsn,
    reported_at: Instant,
    /// When the confirmed LSN first moved past what was last reported.
    confirmable_since: Option<Instant>,
    flow: Flow,
    metrics: Metrics,
}

impl Progress {
    /// Starts from the slot's confirmed position.
    pub fn new(confirmed: Lsn, flow: Flow, metrics: Metrics) -> Self {
        metrics.set_confirmed(confirmed.0);
        metrics.set_inflight(0, 0);
        Progress {
            checkpoint: Checkpoint::new(confirmed),
            received: confirmed,
            inflight_events: 0,
            inflight_bytes: 0,
            waiting_for_topic: false,
            reported: confirmed,
            reported_at: Instant::now(),
            confirmable_since: None,
            flow,
            metrics,
        }
    }

    pub fn confirmed(&self) -> Lsn {
        self.checkpoint.confirmed()
    }

    /// The end of the newest confirmed transaction that had events.
    pub fn delivered(&self) -> Lsn {
        self.checkpoint.delivered()
    }

    pub fn inflight_events(&self) -> usize {
        self.inflight_events
    }

    /// Whether the window has room to read more: events and bytes in
    /// flight, and transactions not yet confirmed.
    pub fn has_room(&self) -> bool {
        self.inflight_events < self.flow.max_inflight_events
            && self.inflight_bytes < self.flow.max_inflight_bytes
            && self.checkpoint.pending() < self.flow.max_pending_transactions
    }

    /// A change read from WAL position `lsn`.
    pub fn received(&mut self, lsn: Lsn) {
        self.received = self.received.max(lsn);
    }

    /// A keepalive: with nothing pending, the server's WAL end is confirmable.
    pub fn keepalive(&mut self, wal_end: Lsn) {
        self.received(wal_end);
        if self.checkpoint.observe_wal_end(wal_end) {
            self.moved(Instant::now());
        }
    }

    /// A transaction opens.
    pub fn begin(&mut self) -> TxnSeq {
        let seq = self.checkpoint.begin();
        self.metrics
            .set_pending_transactions(self.checkpoint.pending());
        seq
    }

    /// A transaction's Commit was read.
    pub fn commit(&mut self, seq: TxnSeq, end_lsn: Lsn) {
        self.checkpoint.commit(seq, end_lsn);
        self.advance();
    }

    /// A record of `seq` with `bytes` of key and value went to the sink.
    pub fn sent(&mut self, seq: TxnSeq, bytes: usize) {
        self.checkpoint.event_sent(seq);
        self.inflight_events += 1;
        self.inflight_bytes += bytes;
        self.show_inflight();
    }

    /// An event is read but waits for its topic (metadata, creation) before
    /// it can go to the sink: pending all the same, so that a lookup that
    /// never answers shows in the metrics and can raise a stall.
    pub fn waiting_for_topic(&mut self, waiting: bool) {
        self.waiting_for_topic = waiting;
        self.show_inflight();
    }

    fn show_inflight(&self) {
        self.metrics.set_inflight(
            self.inflight_events + usize::from(self.waiting_for_topic),
            self.inflight_bytes,
        );
    }

    /// The sink acknowledged a record of `seq` (or its dead-letter copy
    /// took its place) `at` that moment, which may be a little before the
    /// loop took the news.
    pub fn acked(&mut self, seq: TxnSeq, bytes: usize, at: std::time::Instant) {
        self.checkpoint.event_acked(seq);
        self.inflight_events -= 1;
        self.inflight_bytes -= bytes;
        self.show_inflight();
        self.advance_since(Instant::from_std(at));
    }

    /// Transactions read but not yet confirmed.
    pub fn pending_transactions(&self) -> usize {
        self.checkpoint.pending()
    }

    /// Keeps `seq` (and every transaction after it) unconfirmed until
    /// `release`, whatever its events: the sink's transaction that opened
    /// with one of its records is not committed yet (exactly once). Not
    /// counted in flight: it holds no record.
    pub fn hold(&mut self, seq: TxnSeq) {
        self.checkpoint.event_sent(seq);
    }

    /// The sink committed the transaction that held `seq`.
    pub fn release(&mut self, seq: TxnSeq) {
        self.checkpoint.event_acked(seq);
        self.advance();
    }

    /// When a status update should report a moved confirmation, if one did.
    pub fn report_due(&self) -> Option<Instant> {
        (self.checkpoint.confirmed() > self.reported).then_some(self.reported_at + PROMPT_CONFIRM)
    }

    /// The positions for a status update (received, confirmed), counted as
    /// reported from now.
    pub fn report(&mut self) -> (Lsn, Lsn) {
        let confirmed = self.checkpoint.confirmed();
        self.reported = confirmed;
        self.reported_at = Instant::now();
        if let Some(since) = self.confirmable_since.take() {
            self.metrics
                .observe_stage(Stage::AckedToConfirmed, since.elapsed());
        }
        (self.received, confirmed)
    }

    fn advance(&mut self) {
        self.advance_since(Instant::now());
    }

    /// `since`: when what moved the position happened.
    fn advance_since(&mut self, since: Instant) {
        if self.checkpoint.advance() {
            self.moved(since);
        }
        self.metrics
            .set_pending_transactions(self.checkpoint.pending());
    }

    fn moved(&mut self, since: Instant) {
        self.metrics.set_confirmed(self.checkpoint.confirmed().0);
        self.confirmable_since.get_or_insert(since);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(max_inflight_events: usize) -> Progress {
        let flow = Flow {
            max_inflight_events,
            max_inflight_bytes: 1 << 20,
            max_pending_transactions: 100,
            status_interval: Duration::from_secs(1),
            read_batch_window: Duration::ZERO,
        };
        Progress::new(Lsn(100), flow, Metrics::new())
    }

    #[test]
    fn a_full_window_has_no_room_until_an_acknowledgement() {
        let mut p = progress(2);
        let t = p.begin();
        p.sent(t, 10);
        assert!(p.has_room());
        p.sent(t, 10);
        assert!(!p.has_room());
        p.acked(t, 10, std::time::Instant::now());
        assert!(p.has_room());
    }

    #[test]
    fn an_event_waiting_for_its_topic_is_pending_in_the_metrics() {
        let metrics = Metrics::new();
        let flow = progress(10).flow;
        let mut p = Progress::new(Lsn(100), flow, metrics.clone());
        p.waiting_for_topic(true);
        assert_eq!(metrics.inflight_events(), 1);
        let t = p.begin();
        p.waiting_for_topic(false);
        p.sent(t, 10);
        assert_eq!(metrics.inflight_events(), 1);
        p.acked(t, 10, std::time::Instant::now());
        assert_eq!(metrics.inflight_events(), 0);
    }

    #[test]
    fn a_report_is_due_only_after_the_confirmation_moved() {
        let mut p = progress(10);
        assert_eq!(p.report_due(), None);
        let t = p.begin();
        p.sent(t, 1);
        p.commit(t, Lsn(200));
        assert_eq!(p.report_due(), None, "not acknowledged yet");
        p.acked(t, 1, std::time::Instant::now());
        assert!(p.report_due().is_some());
        assert_eq!(p.report(), (Lsn(100), Lsn(200)));
        assert_eq!(p.report_due(), None);
    }

    #[test]
    fn a_held_transaction_is_confirmed_only_once_released_and_holds_the_ones_after_it() {
        let mut p = progress(10);
        let first = p.begin();
        p.hold(first);
        p.sent(first, 1);
        p.commit(first, Lsn(200));
        let second = p.begin();
        p.commit(second, Lsn(300));
        p.acked(first, 1, std::time::Instant::now());
        assert_eq!(p.report_due(), None, "acknowledged, not committed");
        p.keepalive(Lsn(400));
        assert_eq!(p.confirmed(), Lsn(100));
        assert!(p.has_room(), "a hold is not in flight");
        p.release(first);
        assert_eq!(p.confirmed(), Lsn(300));
    }

    #[test]
    fn the_received_position_is_reported_but_never_confirmed_on_its_own() {
        let mut p = progress(10);
        let t = p.begin();
        p.received(Lsn(500));
        p.sent(t, 1);
        p.keepalive(Lsn(900));
        assert_eq!(p.report(), (Lsn(900), Lsn(100)));
    }
}
