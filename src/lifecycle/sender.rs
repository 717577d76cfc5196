//! Rows read from the table, published the way `run` publishes streamed
//! ones: each tuple goes through `OutboxSchema::event` and the relay's own
//! `Publisher` (routing, topic checks, size checks, the poison policy, the
//! sink), with the same in-flight window (`--max-inflight-events`,
//! `--max-inflight-bytes`). Only the books differ: a batch of rows stands in
//! for a transaction, and it has no commit LSN (0/0) and no commit time
//! (the time it was read stamps records without a `--field-timestamp`).

use std::time::Duration;

use tokio::time::Instant;

use super::rows::RowCursor;
use crate::clock;
use crate::config::Settings;
use crate::delivery::progress::{Progress, Ticket, TxnRef};
use crate::delivery::publish::Publisher;
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::outbox::cloudevents::Change;
use crate::outbox::mapping::OutboxSchema;
use crate::postgres::lsn::Lsn;
use crate::postgres::pgoutput::Tuple;
use crate::sink::Sink;

/// Rows between two reports of progress within a batch.
const PROGRESS_EVERY: u64 = 100;

pub struct RowSender<'a, S> {
    publisher: Publisher<'a, S>,
    progress: Progress,
    /// Rows handed to the publisher (each one record, or its dead-letter copy).
    handed: u64,
    /// At most this many rows a second.
    max_rate: Option<f64>,
    started: Instant,
}

impl<'a, S: Sink<Ticket>> RowSender<'a, S> {
    /// `start` is what the books count as confirmed at the start (the
    /// slot's consistent point for a snapshot, 0/0 for a replay).
    pub fn new(
        settings: &'a Settings,
        sink: S,
        metrics: Metrics,
        start: Lsn,
        max_rate: Option<f64>,
    ) -> Self {
        RowSender {
            publisher: Publisher::new(settings, sink, metrics.clone()),
            progress: Progress::new(start, settings.flow, metrics),
            handed: 0,
            max_rate,
            started: Instant::now(),
        }
    }

    /// Rows Kafka has acknowledged (or whose dead-letter copy it has).
    pub fn done(&self) -> u64 {
        self.handed
            .saturating_sub(self.progress.inflight_events() as u64)
    }

    /// Publishes one batch of rows mapped by `schema`, waiting for Kafka
    /// whenever the window is full; `progress` hears the rows done every
    /// so often.
    pub async fn send(
        &mut self,
        schema: &OutboxSchema,
        tuples: Vec<Tuple>,
        progress: &mut impl FnMut(u64),
    ) -> Result<()> {
        let seq = self.progress.begin();
        let txn = TxnRef {
            seq,
            commit_lsn: Lsn::ZERO,
            commit_time_us: clock::unix_now_us(),
        };
        let read = Change::read_at(txn.commit_time_us);
        for tuple in tuples {
            self.publisher.settle_rejected(&mut self.progress).await?;
            while !(self.progress.has_room() && self.publisher.ready_for_more()) {
                self.take_delivery().await?;
                self.publisher.settle_rejected(&mut self.progress).await?;
            }
            self.pace().await;
            let mapped = schema.event(tuple, &read);
            self.publisher
                .publish_mapped(&mut self.progress, txn, mapped, Instant::now())
                .await?;
            self.handed += 1;
            if self.handed.is_multiple_of(PROGRESS_EVERY) {
                progress(self.done());
            }
        }
        // Sealed at an LSN of its own, so the books let it go once acknowledged.
        self.progress.commit(seq, Lsn(seq + 1));
        self.publisher.flush_timings();
        Ok(())
    }

    /// Publishes every row of `cursor`, reading the next batch while this
    /// one is sent; `progress` hears the rows done after each batch.
    pub async fn send_all(
        &mut self,
        cursor: &mut RowCursor<'_>,
        schema: &OutboxSchema,
        mut progress: impl FnMut(u64),
    ) -> Result<()> {
        let mut next = cursor.next_batch().await?;
        while let Some(batch) = next {
            let sending = self.send(schema, batch, &mut progress);
            let (fetched, sent) = tokio::join!(cursor.next_batch(), sending);
            sent?;
            next = fetched?;
            progress(self.done());
        }
        Ok(())
    }

    /// Waits until Kafka has acknowledged every row handed so far;
    /// `progress` hears the rows done meanwhile.
    pub async fn drain(&mut self, mut progress: impl FnMut(u64)) -> Result<()> {
        while self.waiting() {
            self.poll(Duration::from_millis(200)).await?;
            progress(self.done());
        }
        Ok(())
    }

    /// Some row is not acknowledged yet.
    pub fn waiting(&self) -> bool {
        self.progress.inflight_events() > 0
    }

    /// Takes the deliveries that come within `wait` (at least one, if any
    /// is due), and applies the poison policy to those refused.
    pub async fn poll(&mut self, wait: Duration) -> Result<()> {
        let deadline = Instant::now() + wait;
        while self.waiting() {
            self.publisher.flush_timings();
            tokio::select! {
                Some(delivery) = self.publisher.delivery() => {
                    self.publisher.on_delivery(&mut self.progress, delivery)?;
                    self.publisher.settle_rejected(&mut self.progress).await?;
                }
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        Ok(())
    }

    async fn take_delivery(&mut self) -> Result<()> {
        self.publisher.flush_timings();
        let delivery =
            self.publisher.delivery().await.ok_or_else(|| {
                Error::transient("the Kafka producer stopped reporting deliveries")
            })?;
        self.publisher.on_delivery(&mut self.progress, delivery)
    }

    /// Holds the next row back while `--max-rate` says it is early.
    async fn pace(&self) {
        if let Some(rate) = self.max_rate {
            let due = self.started + Duration::from_secs_f64(self.handed as f64 / rate);
            tokio::time::sleep_until(due).await;
        }
    }
}
