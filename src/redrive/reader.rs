//! Reads the dead-letter topic from the consumer group's position up to the
//! end it had when redrive started (each partition's high watermark, read
//! once), so records redrive puts back are not read again in the same run.
//!
//! The partitions are assigned, not subscribed: redrive is one process
//! reading every partition, so it needs no group membership and no
//! rebalance, only the group's committed offsets (OffsetFetch) and
//! commits of its own (OffsetCommit as a "simple" consumer, with no
//! generation). A group with live subscribed members refuses those.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use tracing::debug;

use super::record::DeadLetter;
use crate::config::RedriveSettings;
use crate::error::{Error, Result};
use crate::kafka::factory;
use crate::kafka::msk_iam::TokenContext;

/// The dead-letter topic's consumer, with the MSK IAM token hook.
type StreamConsumer = rdkafka::consumer::StreamConsumer<TokenContext>;

const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long no broker may be reachable before redrive gives up: long
/// enough for a connection's TLS and SASL handshakes, far below
/// `REQUEST_TIMEOUT`.
const UNREACHABLE: Duration = Duration::from_secs(5);
/// How long a read waits before checking whether a quiet partition is at
/// its end (the last offsets may not exist: compaction, transaction markers).
const QUIET: Duration = Duration::from_secs(1);

/// One partition's range: from the group's position to the end at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub start: i64,
    pub end: i64,
}

pub struct DeadLetterReader {
    consumer: Arc<StreamConsumer>,
    topic: String,
    group: String,
    pub ranges: BTreeMap<i32, Range>,
    /// Partitions not yet read to their end.
    open: BTreeMap<i32, i64>,
    /// Partitions read to their end since `take_reached`, with that end.
    reached: Vec<(i32, i64)>,
}

impl DeadLetterReader {
    /// The reader, or None when the dead-letter topic does not exist.
    pub async fn open(settings: &RedriveSettings) -> Result<Option<Self>> {
        let consumer: StreamConsumer = factory::consumer(&settings.consumer, "the Kafka consumer")?;
        let consumer = Arc::new(consumer);
        let topic = settings.dead_letter_topic.clone();
        let group = settings.group.clone();
        let ranges = blocking(&consumer, {
            let (topic, group) = (topic.clone(), group.clone());
            move |c| ranges(c, &topic, &group)
        })
        .await?;
        let Some(ranges) = ranges else {
            return Ok(None);
        };
        let mut assignment = TopicPartitionList::new();
        for (&partition, range) in &ranges {
            assignment
                .add_partition_offset(&topic, partition, Offset::Offset(range.start))
                .map_err(|e| read_error(&topic, &group, e))?;
        }
        consumer
            .assign(&assignment)
            .map_err(|e| read_error(&topic, &group, e))?;
        let open = ranges
            .iter()
            .filter(|(_, r)| r.start < r.end)
            .map(|(&p, r)| (p, r.end))
            .collect();
        Ok(Some(DeadLetterReader {
            consumer,
            topic,
            group,
            ranges,
            open,
            reached: Vec::new(),
        }))
    }

    /// Records between the group's position and the end, in every partition.
    pub fn remaining(&self) -> u64 {
        self.ranges
            .values()
            .map(|r| (r.end - r.start).max(0) as u64)
            .sum()
    }

    /// Partitions read to their end since the last call, with that end.
    pub fn take_reached(&mut self) -> Vec<(i32, i64)> {
        std::mem::take(&mut self.reached)
    }

    /// Closes a partition once `next` is at its end.
    fn reach(&mut self, partition: i32, next: i64) {
        if let Some(&end) = self.open.get(&partition) {
            if next >= end {
                self.open.remove(&partition);
                self.reached.push((partition, end));
            }
        }
    }

    /// The next record before the end, or None once every partition is
    /// read to its end. Cancel-safe.
    pub async fn next(&mut self) -> Result<Option<DeadLetter>> {
        loop {
            if self.open.is_empty() {
                return Ok(None);
            }
            let message = match tokio::time::timeout(QUIET, self.consumer.recv()).await {
                Ok(Ok(message)) => message,
                Ok(Err(e)) => return Err(read_error(&self.topic, &self.group, e)),
                Err(_) => {
                    // Quiet: a partition whose position is at its end is done.
                    let positions = self
                        .consumer
                        .position()
                        .map_err(|e| read_error(&self.topic, &self.group, e))?;
                    for element in positions.elements() {
                        if let Offset::Offset(next) = element.offset() {
                            self.reach(element.partition(), next);
                        }
                    }
                    continue;
                }
            };
            let (partition, offset) = (message.partition(), message.offset());
            let Some(&end) = self.open.get(&partition) else {
                continue;
            };
            if offset >= end {
                // Written after the start (redrive's own copies among them).
                self.reach(partition, offset);
                continue;
            }
            let headers = message
                .headers()
                .map(|headers| {
                    headers
                        .iter()
                        .map(|h| {
                            let name: Cow<'static, str> = Cow::Owned(h.key.to_string());
                            (name, h.value.map(Bytes::copy_from_slice))
                        })
                        .collect()
                })
                .unwrap_or_default();
            let record = DeadLetter::new(
                partition,
                offset,
                message.key().map(Bytes::copy_from_slice),
                message.payload().map(Bytes::copy_from_slice),
                headers,
                message.timestamp().to_millis(),
            );
            self.reach(partition, offset + 1);
            return Ok(Some(record));
        }
    }

    /// Commits the group's position in these partitions.
    pub async fn commit(&self, positions: Vec<(i32, i64)>) -> Result<()> {
        if positions.is_empty() {
            return Ok(());
        }
        let (topic, group) = (self.topic.clone(), self.group.clone());
        blocking(&self.consumer, move |c| {
            let mut list = TopicPartitionList::new();
            for (partition, offset) in positions {
                list.add_partition_offset(&topic, partition, Offset::Offset(offset))
                    .map_err(|e| commit_error(&group, e))?;
            }
            c.commit(&list, CommitMode::Sync)
                .map_err(|e| commit_error(&group, e))
        })
        .await
    }
}

/// The partitions of `topic` with the group's position and the current
/// end of each; None when the topic does not exist.
fn ranges(
    consumer: &StreamConsumer,
    topic: &str,
    group: &str,
) -> Result<Option<BTreeMap<i32, Range>>> {
    let metadata = metadata(consumer, topic, group)?;
    let Some(found) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Ok(None);
    };
    match found.error() {
        None => {}
        Some(code) if RDKafkaErrorCode::from(code) == RDKafkaErrorCode::UnknownTopicOrPartition => {
            return Ok(None)
        }
        Some(code) => {
            return Err(read_error(
                topic,
                group,
                KafkaError::MetadataFetch(code.into()),
            ))
        }
    }
    if found.partitions().is_empty() {
        return Ok(None);
    }
    let mut wanted = TopicPartitionList::new();
    for p in found.partitions() {
        wanted.add_partition(topic, p.id());
    }
    let committed = consumer
        .committed_offsets(wanted, REQUEST_TIMEOUT)
        .map_err(|e| read_error(topic, group, e))?;
    let mut ranges = BTreeMap::new();
    for p in found.partitions() {
        let (low, high) = consumer
            .fetch_watermarks(topic, p.id(), REQUEST_TIMEOUT)
            .map_err(|e| read_error(topic, group, e))?;
        let position = committed
            .find_partition(topic, p.id())
            .and_then(|e| match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            });
        // Records before the low watermark are gone (the topic's retention).
        let start = position.unwrap_or(low).max(low);
        debug!(
            partition = p.id(),
            low,
            high,
            ?position,
            "dead-letter partition"
        );
        ranges.insert(p.id(), Range { start, end: high });
    }
    Ok(Some(ranges))
}

/// The topic's metadata, asked for a second at a time: librdkafka answers
/// "broker transport failure" while it has no broker to ask, and when
/// that lasts `UNREACHABLE` the cluster is out of reach, and redrive ends
/// at once rather than after the whole request timeout.
fn metadata(
    consumer: &StreamConsumer,
    topic: &str,
    group: &str,
) -> Result<rdkafka::metadata::Metadata> {
    let asked = Instant::now();
    let mut wait = QUIET;
    loop {
        let e = match consumer.fetch_metadata(Some(topic), wait) {
            Ok(metadata) => return Ok(metadata),
            Err(e) => e,
        };
        let unreachable = e.rdkafka_error_code() == Some(RDKafkaErrorCode::BrokerTransportFailure);
        let left = REQUEST_TIMEOUT.saturating_sub(asked.elapsed());
        if left.is_zero() || (unreachable && asked.elapsed() >= UNREACHABLE) {
            return Err(read_error(topic, group, e));
        }
        // A broker that answers, slowly, gets the rest of the time.
        wait = if unreachable { QUIET } else { left };
    }
}

/// Runs a blocking librdkafka call off the async runtime.
async fn blocking<T: Send + 'static>(
    consumer: &Arc<StreamConsumer>,
    f: impl FnOnce(&StreamConsumer) -> Result<T> + Send + 'static,
) -> Result<T> {
    let consumer = consumer.clone();
    tokio::task::spawn_blocking(move || f(&consumer))
        .await
        .map_err(|e| Error::permanent("a Kafka request of redrive failed").with_source(e))?
}

fn read_error(topic: &str, group: &str, e: KafkaError) -> Error {
    let authorization = matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::TopicAuthorizationFailed | RDKafkaErrorCode::GroupAuthorizationFailed
        )
    );
    let message = if authorization {
        format!(
            "Kafka refused redrive reading {topic} in group {group}: grant its principal READ \
             on the topic and on the group ({}; {})",
            crate::kafka::grant_command("PRINCIPAL", "Read", &format!("--topic {topic}")),
            crate::kafka::grant_command("PRINCIPAL", "Read", &format!("--group {group}")),
        )
    } else {
        format!(
            "cannot read the dead-letter topic {topic} (group {group}); nothing was committed \
             past what Kafka acknowledged: run walrelay redrive again"
        )
    };
    Error::permanent(message).with_source(e)
}

fn commit_error(group: &str, e: KafkaError) -> Error {
    Error::permanent(format!(
        "cannot commit redrive's position in consumer group {group}; the records after the \
         last committed position will be sent again by the next run (consumers dedupe by \
         id). A group with subscribed members refuses redrive's commits: give redrive a \
         --group of its own"
    ))
    .with_source(e)
}
