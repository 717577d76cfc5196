//! Exactly once (`--delivery exactly-once`): the publisher's side of the
//! sink's transactions. Records go into a Kafka transaction that closes
//! only on a Postgres commit boundary, never inside a Postgres transaction,
//! once it holds `--transaction-max-events` events or has been open
//! `--transaction-max-duration` (at once when that passes between Postgres
//! transactions); the commit writes the end of its last Postgres
//! transaction into the position topic, in the same Kafka transaction.
//!
//! Why the slot is confirmed only past what Kafka committed: the Postgres
//! transaction whose record opened a Kafka transaction is held in
//! `Progress` (`Progress::hold`) until that Kafka transaction commits, and
//! every transaction after it waits behind it in commit order. An
//! acknowledged record frees its place in the in-flight window, so a
//! Postgres transaction larger than the window still streams into one
//! Kafka transaction with bounded memory; it only cannot be confirmed.
//!
//! Why nothing is sent twice: a session starts by reading the position the
//! last committed Kafka transaction recorded (`relay::exactly_once`), and
//! every Postgres transaction that committed below it is read past here,
//! not sent. A Kafka transaction that cannot commit is aborted: none of
//! its records is ever seen by a read_committed consumer, the session ends,
//! and the next one reads its Postgres transactions again from the slot,
//! which was never confirmed past them.
//!
//! A record Kafka refuses after it was sent dooms its transaction. Where
//! the policy would send something in its place (a dead-letter copy, or the
//! record again alone to find which of a batch is too large), what Kafka
//! said is remembered by the event's commit LSN and id (`Memory`, which
//! outlives sessions) and the session ends; the next one applies it before
//! sending anything.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, Opts};
use tokio::time::{sleep_until, Instant};
use tracing::{debug, info, warn};

use super::{Outcome, Publisher};
use crate::config::ExactlyOnce;
use crate::delivery::checkpoint::TxnSeq;
use crate::delivery::poison::text;
use crate::delivery::progress::{Progress, Ticket, TxnRef};
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::postgres::lsn::Lsn;
use crate::postgres::state::ServerId;
use crate::sink::{Closing, Refusal, Sink};

/// What one session of exactly-once delivery starts with.
pub struct Run {
    /// The position the last committed Kafka transaction recorded for this
    /// server history: its Postgres transactions are in Kafka already.
    pub skip_below: Option<Lsn>,
    /// The server history the session streams from.
    pub server: ServerId,
    pub memory: Arc<Memory>,
    pub metrics: TransactionMetrics,
}

/// What outlives sessions: what Kafka said of events it refused inside a
/// transaction, by the event's commit LSN and id, for the next session to
/// act on; and the last position a commit recorded, which the position
/// topic must hold from then on (`relay::exactly_once`).
#[derive(Default)]
pub struct Memory {
    refused: Mutex<HashMap<(Lsn, Bytes), Remembered>>,
    committed: Mutex<Option<(ServerId, Lsn)>>,
}

#[derive(Debug, Clone)]
pub enum Remembered {
    /// Its batch was refused for size: send it alone, so that a refusal is its own.
    Alone,
    /// Refused for itself: the poison policy decides, without sending it.
    Refused(Refusal),
}

impl Memory {
    /// What was remembered of an event, once: if acting on it fails too
    /// (a partition that exists after all), the event is sent as any other.
    fn take(&self, commit_lsn: Lsn, event_id: Option<&Bytes>) -> Option<Remembered> {
        let mut memory = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        memory.remove(&(commit_lsn, event_id?.clone()))
    }

    fn put(&self, commit_lsn: Lsn, event_id: Bytes, what: Remembered) {
        let mut memory = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        memory.insert((commit_lsn, event_id), what);
    }

    /// The last position a commit of this process recorded, and on which
    /// server history.
    pub fn last_committed(&self) -> Option<(ServerId, Lsn)> {
        self.committed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn committed(&self, server: &ServerId, position: Lsn) {
        *self.committed.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((server.clone(), position));
    }
}

/// The metrics of exactly-once delivery, registered once per process and
/// only in that mode.
#[derive(Clone)]
pub struct TransactionMetrics {
    outcomes: IntCounterVec,
    events: Histogram,
    commit_seconds: Histogram,
    skipped: IntCounter,
}

impl TransactionMetrics {
    pub fn register(metrics: &Metrics) -> Self {
        let outcomes = IntCounterVec::new(
            Opts::new(
                "walrelay_kafka_transactions_total",
                "Kafka transactions closed, by outcome: committed, or aborted (their records \
                 are never seen by read_committed consumers and are sent again).",
            ),
            &["outcome"],
        )
        .expect("valid metric");
        let events = Histogram::with_opts(
            HistogramOpts::new(
                "walrelay_kafka_transaction_events",
                "Events (dead-letter copies included) per committed Kafka transaction.",
            )
            .buckets(prometheus::exponential_buckets(1.0, 4.0, 12).expect("valid buckets")),
        )
        .expect("valid metric");
        let commit_seconds = Histogram::with_opts(
            HistogramOpts::new(
                "walrelay_kafka_transaction_commit_seconds",
                "Time from asking Kafka to commit a transaction to its answer; reading waits \
                 meanwhile.",
            )
            .buckets(vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            ]),
        )
        .expect("valid metric");
        let skipped = IntCounter::new(
            "walrelay_kafka_transaction_skipped_events_total",
            "Events read again after a restart and not sent: a committed Kafka transaction \
             holds them already (the position topic says so).",
        )
        .expect("valid metric");
        for outcome in ["committed", "aborted"] {
            outcomes.with_label_values(&[outcome]);
        }
        let registry = metrics.registry();
        for collector in [
            Box::new(outcomes.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(events.clone()),
            Box::new(commit_seconds.clone()),
            Box::new(skipped.clone()),
        ] {
            registry.register(collector).expect("registered once");
        }
        TransactionMetrics {
            outcomes,
            events,
            commit_seconds,
            skipped,
        }
    }

    fn aborted(&self) {
        self.outcomes.with_label_values(&["aborted"]).inc();
    }
}

/// The Kafka transaction records go to now.
struct Open {
    /// The Postgres transaction held in `Progress` until the commit.
    first: TxnSeq,
    began: Instant,
    events: usize,
    /// The end of the last Postgres transaction whose records are all in
    /// it: what its commit records as the position.
    position: Option<Lsn>,
    /// Records of a Postgres transaction whose Commit has not been read
    /// are in it: it cannot close now.
    split: bool,
}

/// A Kafka transaction being closed.
struct Close {
    closing: Closing,
    /// None for an abort: nothing is released.
    commit: Option<Open>,
    asked: Instant,
}

/// The publisher's book of the sink's transactions.
pub struct Transactions {
    limits: ExactlyOnce,
    run: Run,
    open: Option<Open>,
    close: Option<Close>,
    /// Events read past this session, said once at the first sent one.
    skipped: u64,
}

impl Transactions {
    pub fn new(limits: ExactlyOnce, run: Run) -> Self {
        if let Some(lsn) = run.skip_below {
            info!(
                position = %lsn,
                "exactly once: Kafka holds every Postgres transaction that committed before \
                 this position; reading past them without sending"
            );
        }
        Transactions {
            limits,
            run,
            open: None,
            close: None,
            skipped: 0,
        }
    }

    /// Whether an event of the transaction that commits at `commit_lsn`
    /// is in Kafka already. Counted as read past.
    fn skips(&mut self, commit_lsn: Lsn) -> bool {
        let skip = self.run.skip_below.is_some_and(|below| commit_lsn < below);
        if skip {
            self.skipped += 1;
            self.run.metrics.skipped.inc();
        } else if self.skipped > 0 {
            info!(
                events = self.skipped,
                "read past the events Kafka already holds; sending from here"
            );
            self.skipped = 0;
        }
        skip
    }

    /// The outcome of the Kafka transaction being closed, if one is.
    pub(super) fn closing(&mut self) -> Option<&mut Closing> {
        self.close.as_mut().map(|close| &mut close.closing)
    }

    /// Whether a Kafka transaction is being closed: nothing may be sent.
    pub fn is_closing(&self) -> bool {
        self.close.is_some()
    }

    /// A Kafka transaction that may close now: no Postgres transaction is
    /// split across it, and it has a position to record.
    fn closable(&self) -> Option<&Open> {
        self.open
            .as_ref()
            .filter(|open| !open.split && open.position.is_some() && self.close.is_none())
    }
}

impl<S: Sink<Ticket>> Publisher<'_, S> {
    /// Runs exactly once for this session (the sink writes in transactions).
    pub fn exactly_once(&mut self, limits: ExactlyOnce, run: Run) {
        self.transactions = Some(Transactions::new(limits, run));
    }

    /// Whether an event of `txn` is read past: a committed Kafka
    /// transaction holds it already.
    pub(super) fn skips(&mut self, commit_lsn: Lsn) -> bool {
        self.transactions
            .as_mut()
            .is_some_and(|t| t.skips(commit_lsn))
    }

    /// What Kafka said of this event in an earlier session, if anything (once).
    pub(super) fn remembered(
        &self,
        commit_lsn: Lsn,
        event_id: Option<&Bytes>,
    ) -> Option<Remembered> {
        self.transactions
            .as_ref()
            .and_then(|t| t.run.memory.take(commit_lsn, event_id))
    }

    /// Before a record of `seq` goes to the sink: the first record of a
    /// Kafka transaction holds its Postgres transaction unconfirmed.
    pub(super) fn opening(&mut self, progress: &mut Progress, seq: TxnSeq) {
        if let Some(t) = &mut self.transactions {
            if t.open.is_none() {
                progress.hold(seq);
                t.open = Some(Open {
                    first: seq,
                    began: Instant::now(),
                    events: 0,
                    position: None,
                    split: false,
                });
            }
        }
    }

    /// A record went into the open Kafka transaction.
    pub(super) fn entered(&mut self) {
        if let Some(open) = self.transactions.as_mut().and_then(|t| t.open.as_mut()) {
            open.events += 1;
            open.split = true;
        }
    }

    /// A record Kafka refused inside a transaction, for which the policy
    /// would send something: remembered for the next session, which this
    /// error starts. None at-least-once, or when the policy sends nothing.
    pub(super) fn doomed(&self, ticket: &Ticket, verdict: Remembered) -> Option<Error> {
        let t = self.transactions.as_ref()?;
        t.run.metrics.aborted();
        let what = match &verdict {
            Remembered::Alone => "refused its batch for size".to_string(),
            Remembered::Refused(refusal) => format!("refused it ({refusal})"),
        };
        let Some(id) = ticket.event_id.clone() else {
            return Some(Error::permanent(format!(
                "Kafka {what} for an event without an id (transaction at LSN {}), inside a Kafka \
                 transaction: walrelay cannot tell that event apart when it reads it again, so \
                 it stopped; the slot stays before it. Give every event an id, or run with \
                 --on-poison halt",
                ticket.commit_lsn
            )));
        };
        t.run.memory.put(ticket.commit_lsn, id, verdict);
        Some(Error::transient(format!(
            "Kafka {what} for event {} (transaction at LSN {}): its Kafka transaction is \
             aborted, and its Postgres transactions are read again and sent in a new one, with \
             the poison policy applied to that event first",
            text(ticket.event_id.as_ref()),
            ticket.commit_lsn
        )))
    }

    /// The Commit of `txn` was read, at `end_lsn`: a boundary the Kafka
    /// transaction may close on.
    pub fn end_transaction(&mut self, progress: &mut Progress, txn: TxnRef, end_lsn: Lsn) {
        progress.commit(txn.seq, end_lsn);
        let Some(t) = &mut self.transactions else {
            return;
        };
        let Some(open) = &mut t.open else {
            return;
        };
        // A message outside any transaction ends where it begins: one past
        // it, so that it is read past when read again.
        open.position = Some(end_lsn.max(Lsn(txn.commit_lsn.0 + 1)));
        open.split = false;
        let due = open.events >= t.limits.max_events
            || open.began.elapsed() >= t.limits.max_duration
            // Transactions wait for the commit: reading must not stop for
            // them in the middle of the next one.
            || progress.pending_transactions() * 2 >= self.settings.flow.max_pending_transactions;
        if due {
            self.close_transaction();
        }
    }

    /// When an open Kafka transaction should close though no Postgres
    /// commit comes: its time is up between Postgres transactions.
    pub fn close_at(&self) -> Option<Instant> {
        let t = self.transactions.as_ref()?;
        t.closable().map(|open| open.began + t.limits.max_duration)
    }

    /// Commits the open Kafka transaction, if it may close now.
    pub fn close_transaction(&mut self) {
        let Some(t) = &mut self.transactions else {
            return;
        };
        let Some(position) = t.closable().and_then(|open| open.position) else {
            return;
        };
        let open = t.open.take();
        t.close = Some(Close {
            closing: self.sink.commit(position),
            commit: open,
            asked: Instant::now(),
        });
    }

    /// Books the outcome of the closing Kafka transaction.
    pub(super) fn on_closed(&mut self, progress: &mut Progress, outcome: Result<()>) -> Result<()> {
        let Some(t) = &mut self.transactions else {
            return Ok(());
        };
        let Some(close) = t.close.take() else {
            return Ok(());
        };
        let metrics = &t.run.metrics;
        match (outcome, close.commit) {
            (Ok(()), Some(open)) => {
                metrics.outcomes.with_label_values(&["committed"]).inc();
                metrics.events.observe(open.events as f64);
                metrics
                    .commit_seconds
                    .observe(close.asked.elapsed().as_secs_f64());
                debug!(
                    events = open.events,
                    position = %open.position.unwrap_or(Lsn::ZERO),
                    took = ?close.asked.elapsed(),
                    "Kafka transaction committed"
                );
                if let Some(position) = open.position {
                    t.run.memory.committed(&t.run.server, position);
                }
                progress.release(open.first);
                Ok(())
            }
            (Ok(()), None) => {
                metrics.aborted();
                Ok(())
            }
            (Err(e), _) => {
                metrics.aborted();
                Err(e)
            }
        }
    }

    /// At shutdown, once deliveries are in: commits what holds whole
    /// Postgres transactions, aborts what splits one (the next start sends
    /// it again), and waits for the outcome until `deadline`.
    pub async fn finish(&mut self, progress: &mut Progress, deadline: Instant) -> Result<()> {
        let Some(t) = &mut self.transactions else {
            return Ok(());
        };
        if t.close.is_none() {
            match &t.open {
                Some(open) if open.split || progress.inflight_events() > 0 => {
                    info!(
                        events = open.events,
                        "stopping inside a Postgres transaction: aborting the Kafka transaction \
                         that holds part of it; the next start sends it again"
                    );
                    t.open = None;
                    t.close = Some(Close {
                        closing: self.sink.abort(),
                        commit: None,
                        asked: Instant::now(),
                    });
                }
                Some(_) => self.close_transaction(),
                None => return Ok(()),
            }
        }
        loop {
            tokio::select! {
                // Late deliveries too: booked, so that the checkpoint is
                // right when it is reported.
                Some(outcome) = self.delivery() => match outcome {
                    Outcome::Closed(outcome) => return self.on_closed(progress, outcome),
                    delivery => self.on_delivery(progress, delivery)?,
                },
                _ = sleep_until(deadline) => {
                    warn!(
                        "the Kafka transaction did not close within --shutdown-timeout; Kafka \
                         aborts it (at the latest after transaction.timeout.ms) and the next \
                         start sends it again"
                    );
                    return Ok(());
                }
            }
        }
    }
}
