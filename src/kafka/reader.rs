//! Reading a topic back over a time range, for `walrelay audit`: each
//! partition from the first record at or after a time (ListOffsets by
//! timestamp, Kafka's offsetsForTimes) up to its end, at least as it stood
//! when the read began. No consumer group is joined and no offset is
//! committed.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};

use crate::error::{Error, Result};

/// How long Kafka may stay silent before the read gives up.
const SILENCE: Duration = Duration::from_secs(30);
const REQUEST: Duration = Duration::from_secs(10);

pub struct TopicReader {
    consumer: BaseConsumer<super::msk_iam::TokenContext>,
    brokers: String,
}

impl TopicReader {
    /// A reader with the brokers and the `-X` properties (security, for
    /// instance) that `run` would use.
    pub fn new(brokers: &str, properties: &[(String, String)]) -> Result<Self> {
        let config = super::factory::consumer_config(
            &[("bootstrap.servers", brokers)],
            properties.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            &[
                ("group.id", "walrelay-audit"),
                ("enable.auto.commit", "false"),
                ("enable.partition.eof", "true"),
                ("client.id", "walrelay-audit"),
            ],
        );
        let consumer = super::factory::consumer(&config, "the Kafka consumer")?;
        Ok(TopicReader {
            consumer,
            brokers: brokers.to_string(),
        })
    }

    /// Calls `each` with every record of `topic` from the first at or after
    /// `from_ms` (Unix milliseconds, not negative: librdkafka takes a
    /// negative offset for a logical one) to the end of each partition (at
    /// least as it is now). Returns the number of records read, or None when
    /// the topic does not exist. Blocking: call it off the async runtime's
    /// workers.
    pub fn scan(
        &self,
        topic: &str,
        from_ms: i64,
        mut each: impl FnMut(&BorrowedMessage<'_>),
    ) -> Result<Option<u64>> {
        let failed = |what: &str, e: KafkaError| {
            Error::transient(format!(
                "cannot {what} topic {topic} at {}: is Kafka reachable?",
                self.brokers
            ))
            .with_source(e)
        };
        let metadata = self
            .consumer
            .fetch_metadata(Some(topic), REQUEST)
            .map_err(|e| failed("read the metadata of", e))?;
        let found = metadata.topics().iter().find(|t| t.name() == topic);
        let absent = found.is_none_or(|t| {
            t.error().is_some_and(|e| {
                RDKafkaErrorCode::from(e) == RDKafkaErrorCode::UnknownTopicOrPartition
            })
        });
        if absent {
            return Ok(None);
        }
        let partitions: Vec<i32> = found
            .iter()
            .filter(|t| t.error().is_none())
            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
            .collect();
        let mut by_time = TopicPartitionList::new();
        for p in &partitions {
            by_time
                .add_partition_offset(topic, *p, Offset::Offset(from_ms.max(0)))
                .map_err(|e| failed("look up the offsets of", e))?;
        }
        let starts = if partitions.is_empty() {
            TopicPartitionList::new()
        } else {
            self.consumer
                .offsets_for_times(by_time, REQUEST)
                .map_err(|e| failed("look up offsets by time in", e))?
        };
        let mut assigned = TopicPartitionList::new();
        let mut ends = std::collections::HashMap::new();
        for element in starts.elements() {
            let p = element.partition();
            let (_, high) = self
                .consumer
                .fetch_watermarks(topic, p, REQUEST)
                .map_err(|e| failed("read the end offsets of", e))?;
            tracing::debug!(topic, partition = p, start = ?element.offset(), end = high, "reading back");
            // No record at or after the time: nothing to read there.
            let Offset::Offset(start) = element.offset() else {
                continue;
            };
            if start < high {
                assigned
                    .add_partition_offset(topic, p, Offset::Offset(start))
                    .map_err(|e| failed("assign", e))?;
                ends.insert(p, high);
            }
        }
        if ends.is_empty() {
            return Ok(Some(0));
        }
        self.consumer
            .assign(&assigned)
            .map_err(|e| failed("assign the partitions of", e))?;
        let mut read = 0u64;
        let mut heard = Instant::now();
        while !ends.is_empty() {
            match self.consumer.poll(Duration::from_millis(200)) {
                Some(Ok(message)) => {
                    heard = Instant::now();
                    if ends.contains_key(&message.partition()) {
                        read += 1;
                        each(&message);
                    }
                }
                // A partition is read once the consumer has reached its end
                // and is past the end taken at the start. Not by counting
                // offsets up to that end: tansu 0.6 reported a high watermark
                // below the offsets it served (tests/audit.rs), and
                // compaction leaves gaps.
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    heard = Instant::now();
                    let position = self.position(topic, p);
                    if ends.get(&p).is_some_and(|end| position >= Some(*end)) {
                        ends.remove(&p);
                    }
                }
                Some(Err(e)) if heard.elapsed() > SILENCE => return Err(failed("read", e)),
                None if heard.elapsed() > SILENCE => {
                    return Err(Error::transient(format!(
                        "Kafka at {} sent nothing of topic {topic} for {SILENCE:?}",
                        self.brokers
                    )))
                }
                // A broker that is away for a moment: librdkafka reconnects.
                Some(Err(_)) | None => {}
            }
        }
        self.consumer
            .unassign()
            .map_err(|e| failed("unassign the partitions of", e))?;
        Ok(Some(read))
    }

    /// The consumer's next offset in a partition, if it has one.
    fn position(&self, topic: &str, partition: i32) -> Option<i64> {
        let positions = self.consumer.position().ok()?;
        match positions.find_partition(topic, partition)?.offset() {
            Offset::Offset(next) => Some(next),
            _ => None,
        }
    }
}
