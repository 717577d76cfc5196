//! `walrelay redrive`: publishes the records of the dead-letter topic again
//! to the topics they were meant for, once their cause is fixed.
//!
//! Each record goes to the topic in its `walrelay.original-topic` header
//! with its key, value and headers, walrelay's own `walrelay.*` headers
//! taken off: the event as `run` would have sent it. Records are read in
//! order per partition of the dead-letter topic, and a key's records are
//! all in one partition, so a key's events are sent in order (the
//! producer is `run`'s idempotent one, which keeps order per partition).
//!
//! The position is kept in a consumer group (`--group`), committed only
//! over records that are *settled*: Kafka acknowledged what took their
//! place (`position.rs`). A second run therefore sends nothing again, and
//! a run stopped at any point sends again at most what was not yet
//! committed (consumers dedupe by id). Nothing is ever left behind the
//! position unsent: a record that is not redriven goes back to the end of
//! the dead-letter topic, whole, before the group moves past it:
//!
//! - one that fails again (Kafka refuses it, or its topic may not be used,
//!   or it never had a topic) with the new `walrelay.reason`;
//! - one that `--filter-event-type` does not select, unchanged. A filtered
//!   run thus moves the group past everything, and a later run with
//!   another filter (or none) finds the skipped records at the end. The
//!   order of a key's events is only kept among the records a run sends.
//!
//! Reading stops at each partition's end as of the start, so records put
//! back are not read again in the same run. `--dry-run` reads the same
//! records and prints what would happen to each, sending nothing and
//! committing nothing.

mod position;
mod reader;
mod record;
mod report;

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::clock;
use crate::config::{RedriveArgs, RedriveSettings};
use crate::error::{Error, Result};
use crate::kafka::producer::KafkaSink;
use crate::metrics::Metrics;
use crate::sink::{Delivery, Rejection, SendError, Sink, TopicAccess, TopicInfo};
use position::Positions;
use reader::DeadLetterReader;
use record::{DeadLetter, Plan};
use report::Report;

/// Records handed to the producer and not yet acknowledged, at most.
const WINDOW: usize = 1000;
/// How often the group's position is committed while records settle.
const COMMIT_EVERY: Duration = Duration::from_secs(1);
const PROGRESS_EVERY: Duration = Duration::from_secs(10);
/// How long a stop request waits for records already handed over.
const STOP_GRACE: Duration = Duration::from_secs(10);

pub async fn run(args: RedriveArgs, shutdown: watch::Receiver<bool>) -> Result<()> {
    let settings = args.settings()?;
    let mut report = Report::new(settings.json, settings.dry_run);
    let (topic, group) = (&settings.dead_letter_topic, &settings.group);
    let Some(reader) = DeadLetterReader::open(&settings).await? else {
        report.plan(topic, group, None);
        return Ok(());
    };
    report.plan(topic, group, Some(&reader.ranges));
    let start: std::collections::BTreeMap<i32, i64> =
        reader.ranges.iter().map(|(&p, r)| (p, r.start)).collect();
    if settings.dry_run {
        let result = dry_run(reader, &settings, &mut report, shutdown).await;
        report.summary(topic, group, &start);
        return result;
    }
    let (fatal_tx, fatal_rx) = mpsc::channel(1);
    let sink = KafkaSink::new(
        &settings.producer,
        &settings.topics,
        Metrics::new(),
        fatal_tx,
    )?;
    let mut positions = Positions::default();
    for (&partition, range) in &reader.ranges {
        positions.start(partition, range.start);
    }
    let mut redrive = Redrive {
        settings: &settings,
        sink,
        reader,
        positions,
        report,
        topics: HashMap::new(),
        dead_letter: None,
        in_flight: 0,
    };
    let result = redrive.run(shutdown, fatal_rx).await;
    // Whatever happened, what is settled is committed.
    let committed = redrive.commit().await;
    redrive
        .report
        .summary(topic, group, &redrive.positions.committed());
    result?;
    committed?;
    match redrive.report.failed_again {
        0 => Ok(()),
        n => Err(Error::permanent(format!(
            "{n} record{} failed again and {} back in {topic} with the new walrelay.reason \
             (listed above); fix the cause it names and run walrelay redrive again",
            if n == 1 { "" } else { "s" },
            if n == 1 { "is" } else { "are" },
        ))),
    }
}

/// Reads what a run would read and says what would happen to each record.
async fn dry_run(
    mut reader: DeadLetterReader,
    settings: &RedriveSettings,
    report: &mut Report,
    mut shutdown: watch::Receiver<bool>,
) -> Result<()> {
    loop {
        let next = tokio::select! {
            next = reader.next() => next?,
            _ = shutdown.wait_for(|stop| *stop) => return Err(interrupted()),
        };
        let Some(record) = next else {
            return Ok(());
        };
        let plan = record.plan(&settings.event_types);
        report.would(&record, &plan);
    }
}

fn interrupted() -> Error {
    Error::permanent(
        "redrive was stopped; what Kafka acknowledged is committed, the rest is read again by \
         the next run: run walrelay redrive again",
    )
}

/// What took a dead-letter record's place, travelling with it through the
/// producer. The record travels without its value (the producer hands the
/// refused record back whole).
#[derive(Debug, Clone)]
struct Ticket {
    record: DeadLetter,
    sent: Sent,
}

#[derive(Debug, Clone)]
enum Sent {
    /// The event, to its original topic.
    Redriven(String),
    /// The record back in the dead-letter topic unchanged: not selected.
    Skipped,
    /// The record back in the dead-letter topic with a new reason.
    FailedAgain {
        topic: Option<String>,
        reason: String,
    },
}

struct Redrive<'a> {
    settings: &'a RedriveSettings,
    sink: KafkaSink<'a, Ticket>,
    reader: DeadLetterReader,
    positions: Positions,
    report: Report,
    /// Original topics already opened: their limit, or why they cannot be used.
    topics: HashMap<String, std::result::Result<TopicInfo, String>>,
    dead_letter: Option<TopicInfo>,
    in_flight: usize,
}

impl Redrive<'_> {
    async fn run(
        &mut self,
        mut shutdown: watch::Receiver<bool>,
        mut fatal: mpsc::Receiver<Error>,
    ) -> Result<()> {
        let total = self.reader.remaining();
        let mut reading = true;
        let mut committed_at = Instant::now();
        let mut progress_at = Instant::now();
        while reading || self.in_flight > 0 {
            if reading && self.in_flight < WINDOW {
                tokio::select! {
                    next = self.reader.next() => match next? {
                        Some(record) => self.take(record).await?,
                        None => reading = false,
                    },
                    Some(delivery) = self.sink.delivery(), if self.in_flight > 0 => {
                        self.on_delivery(delivery).await?
                    }
                    Some(e) = fatal.recv() => return Err(e),
                    _ = shutdown.wait_for(|stop| *stop) => return self.stop().await,
                }
            } else {
                tokio::select! {
                    Some(delivery) = self.sink.delivery() => self.on_delivery(delivery).await?,
                    Some(e) = fatal.recv() => return Err(e),
                    _ = shutdown.wait_for(|stop| *stop) => return self.stop().await,
                }
            }
            for (partition, end) in self.reader.take_reached() {
                self.positions.reached(partition, end);
            }
            if committed_at.elapsed() >= COMMIT_EVERY {
                self.commit().await?;
                committed_at = Instant::now();
            }
            if progress_at.elapsed() >= PROGRESS_EVERY {
                info!(read = self.report.read, of = total, "redrive in progress");
                progress_at = Instant::now();
            }
        }
        Ok(())
    }

    /// A stop request: the records handed over get a little time, what is
    /// settled is committed by the caller.
    async fn stop(&mut self) -> Result<()> {
        let deadline = Instant::now() + STOP_GRACE;
        while self.in_flight > 0 {
            match tokio::time::timeout_at(deadline, self.sink.delivery()).await {
                Ok(Some(delivery)) => self.on_delivery(delivery).await?,
                _ => break,
            }
        }
        Err(interrupted())
    }

    async fn commit(&mut self) -> Result<()> {
        let moved = self.positions.moved();
        self.reader.commit(moved).await
    }

    /// One record read: send it where it belongs, or put it back.
    async fn take(&mut self, record: DeadLetter) -> Result<()> {
        self.positions.read(record.partition, record.offset);
        self.report.read += 1;
        let topic = match record.plan(&self.settings.event_types) {
            Plan::Send { topic } => topic,
            Plan::Skip => return self.put_back(record, Sent::Skipped).await,
            Plan::Fail(reason) => {
                let sent = Sent::FailedAgain {
                    topic: None,
                    reason,
                };
                return self.put_back(record, sent).await;
            }
        };
        let info = match self.open(&topic).await? {
            Ok(info) => info,
            Err(reason) => {
                let reason = format!("redrive: walrelay may not use topic {topic}: {reason}");
                let sent = Sent::FailedAgain {
                    topic: Some(topic),
                    reason,
                };
                return self.put_back(record, sent).await;
            }
        };
        let event = record.redriven(&topic);
        let timestamp = record
            .event_timestamp_ms()
            .unwrap_or_else(|| clock::unix_now_us() / 1000);
        let wire_size = event.as_record(timestamp).wire_size();
        let over = info.refuse_size(&topic, wire_size);
        if let Some(why) = over.filter(|_| !info.assumed && !self.settings.topics.compressed) {
            let sent = Sent::FailedAgain {
                topic: Some(topic),
                reason: format!("redrive: {why}"),
            };
            return self.put_back(record, sent).await;
        }
        let ticket = Ticket {
            record: DeadLetter {
                value: None,
                ..record
            },
            sent: Sent::Redriven(topic),
        };
        self.send(&event, timestamp, ticket).await
    }

    /// Opens an original topic once: its limit, or why it cannot be used.
    async fn open(&mut self, topic: &str) -> Result<std::result::Result<TopicInfo, String>> {
        if let Some(known) = self.topics.get(topic) {
            return Ok(known.clone());
        }
        let access = match self.sink.open_topic(topic).await? {
            TopicAccess::Open(info) => Ok(info),
            TopicAccess::Closed(why) => Err(why),
        };
        self.topics.insert(topic.to_string(), access.clone());
        Ok(access)
    }

    /// The whole record back at the end of the dead-letter topic.
    async fn put_back(&mut self, record: DeadLetter, sent: Sent) -> Result<()> {
        let info = match self.dead_letter {
            Some(info) => info,
            None => {
                let info = self.sink.open_dead_letter_topic().await?;
                *self.dead_letter.insert(info)
            }
        };
        let reason = match &sent {
            Sent::FailedAgain { reason, .. } => Some(reason.as_str()),
            _ => None,
        };
        let copy = record.returned(&self.settings.dead_letter_topic, reason);
        let now_ms = clock::unix_now_us() / 1000;
        if let Some(why) = info.refuse_size(&copy.topic, copy.as_record(now_ms).wire_size()) {
            return Err(cannot_put_back(&record, &why));
        }
        let ticket = Ticket {
            record: DeadLetter {
                value: None,
                ..record
            },
            sent,
        };
        self.send(&copy, now_ms, ticket).await
    }

    /// Hands a record to the producer, taking deliveries while it is full.
    async fn send(
        &mut self,
        record: &crate::sink::OwnedRecord,
        timestamp_ms: i64,
        mut ticket: Ticket,
    ) -> Result<()> {
        loop {
            // A refusal at hand-over does not give the ticket back.
            let kept = ticket.clone();
            match self.sink.send(&record.as_record(timestamp_ms), ticket) {
                Ok(()) => {
                    self.in_flight += 1;
                    return Ok(());
                }
                Err(SendError::Full(back)) => {
                    ticket = back;
                    if self.in_flight == 0 {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                    if let Some(delivery) = self.sink.delivery().await {
                        Box::pin(self.on_delivery(delivery)).await?;
                    }
                }
                Err(SendError::Refused(refusal)) => {
                    return Box::pin(self.refused(kept, Some(record.clone()), refusal)).await;
                }
            }
        }
    }

    async fn on_delivery(&mut self, delivery: Delivery<Ticket>) -> Result<()> {
        self.in_flight -= 1;
        let Delivery { ticket, result, .. } = delivery;
        match result {
            Ok(()) => {
                let record = &ticket.record;
                match ticket.sent {
                    Sent::Redriven(topic) => *self.report.redriven.entry(topic).or_default() += 1,
                    Sent::Skipped => self.report.skipped += 1,
                    Sent::FailedAgain { topic, reason } => {
                        warn!(
                            event_id = %text(record.event_id()),
                            topic = topic.as_deref().unwrap_or(""),
                            reason = %reason,
                            "a dead-letter record failed again; it is back in the dead-letter topic"
                        );
                        self.report.failed(record, topic.as_deref(), &reason);
                    }
                }
                self.positions.settled(record.partition, record.offset);
                Ok(())
            }
            Err(failure) => {
                let failure = *failure;
                self.refused(ticket, Some(failure.record), failure.refusal)
                    .await
            }
        }
    }

    /// Kafka refused what took a record's place.
    async fn refused(
        &mut self,
        ticket: Ticket,
        sent: Option<crate::sink::OwnedRecord>,
        refusal: crate::sink::Refusal,
    ) -> Result<()> {
        let Sent::Redriven(topic) = ticket.sent else {
            return Err(cannot_put_back(
                &ticket.record,
                &format!("Kafka refused it: {refusal}"),
            ));
        };
        match refusal.rejection {
            Rejection::Poison | Rejection::Oversized | Rejection::UnknownPartition(_) => {
                let record = match sent {
                    Some(sent) => ticket.record.with_refused(sent),
                    None => ticket.record,
                };
                let reason = format!("redrive: Kafka rejected it again: {refusal}");
                let sent = Sent::FailedAgain {
                    topic: Some(topic),
                    reason,
                };
                self.put_back(record, sent).await
            }
            Rejection::Configuration => Err(Error::permanent(format!(
                "Kafka refused event {} for topic {topic}: {refusal}. This is a permission or \
                 configuration problem, so redrive stopped; grant its principal WRITE on the \
                 topic ({}) or fix the -X properties, and run walrelay redrive again",
                text(ticket.record.event_id()),
                crate::kafka::grant_command(
                    &crate::kafka::principal(&self.settings.producer),
                    "Write",
                    &format!("--topic {topic}")
                ),
            ))),
            Rejection::Retriable => Err(Error::permanent(format!(
                "Kafka could not take event {} for topic {topic} now: {refusal}; redrive \
                 stopped with its position before it: run walrelay redrive again",
                text(ticket.record.event_id()),
            ))),
        }
    }
}

fn cannot_put_back(record: &DeadLetter, why: &str) -> Error {
    Error::permanent(format!(
        "cannot put dead-letter record {}@{} (event {}) back in the dead-letter topic: {why}; \
         redrive stopped with the group's position before it, so nothing is lost: fix the \
         cause (for a size, raise --dead-letter-max-message-bytes and the topic's \
         max.message.bytes) and run walrelay redrive again",
        record.partition,
        record.offset,
        text(record.event_id()),
    ))
}

fn text(value: Option<&[u8]>) -> String {
    value
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .unwrap_or_else(|| "(none)".into())
}
