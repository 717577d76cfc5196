//! The sending side of a redrive: each record read goes to its original
//! topic or back to the dead-letter topic, deliveries settle records, and
//! the group's position is committed over what is settled.

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::{info, warn};

use super::interrupted;
use super::position::Positions;
use super::reader::DeadLetterReader;
use super::record::{DeadLetter, Plan};
use super::report::Report;
use crate::clock;
use crate::config::RedriveSettings;
use crate::error::{Error, Result};
use crate::kafka::producer::KafkaSink;
use crate::sink::{
    Delivery, OwnedRecord, Refusal, Rejection, SendError, Sink, TopicAccess, TopicInfo,
};

/// Records handed to the producer and not yet acknowledged, at most.
const WINDOW: usize = 1000;
/// How often the group's position is committed while records settle.
const COMMIT_EVERY: Duration = Duration::from_secs(1);
const PROGRESS_EVERY: Duration = Duration::from_secs(10);
/// How long a stop request waits for records already handed over.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// What took a dead-letter record's place, travelling with it through the
/// producer. The record travels without its value (the producer hands the
/// refused record back whole).
#[derive(Debug, Clone)]
pub struct Ticket {
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

pub struct Redrive<'a> {
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

impl<'a> Redrive<'a> {
    /// Reads with `reader`, sends with `sink`; the group stands where the
    /// reader starts.
    pub fn new(
        settings: &'a RedriveSettings,
        sink: KafkaSink<'a, Ticket>,
        reader: DeadLetterReader,
        report: Report,
    ) -> Self {
        let mut positions = Positions::default();
        for (&partition, range) in &reader.ranges {
            positions.start(partition, range.start);
        }
        Redrive {
            settings,
            sink,
            reader,
            positions,
            report,
            topics: HashMap::new(),
            dead_letter: None,
            in_flight: 0,
        }
    }

    /// Prints the summary, with where the group stands now.
    pub fn summary(&self) {
        let settings = self.settings;
        self.report.summary(
            &settings.dead_letter_topic,
            &settings.group,
            &self.positions.committed(),
        );
    }

    pub fn failed_again(&self) -> u64 {
        self.report.failed_again
    }

    pub async fn run(
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

    pub async fn commit(&mut self) -> Result<()> {
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
        record: &OwnedRecord,
        timestamp_ms: i64,
        mut ticket: Ticket,
    ) -> Result<()> {
        loop {
            // A refusal at hand-over does not give the ticket back.
            let kept = ticket.clone();
            let now = std::time::Instant::now();
            match self.sink.send(&record.as_record(timestamp_ms), ticket, now) {
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
        sent: Option<OwnedRecord>,
        refusal: Refusal,
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
