//! The position topic of exactly-once delivery (`--position-topic`): each
//! Kafka transaction writes, as its last record, where its last Postgres
//! transaction ended; a session reads the last such record back with
//! `read_committed` and reads past every Postgres transaction below it.
//!
//! One record per slot survives compaction: the key is the database's
//! system identifier and the slot (a slot is one cluster's), and the value
//! names the timeline too, since a promoted standby's WAL reuses positions
//! the old primary wrote; a position of another timeline is never used.
//! Every record goes to partition 0, whatever the topic's partition count.
//!
//! Reading "to the end" under `read_committed` is subtle: a transaction of
//! another writer still open holds back the last stable offset, and records
//! committed after it stay invisible until it closes. So the reader writes
//! a sync record of its own in a transaction (after fencing every older
//! producer of its slot) and reads until it sees it: every transaction that
//! wrote before it is then committed or aborted, and read.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tracing::{info, warn};

use super::msk_iam::TokenContext;
use crate::error::{Error, Result};
use crate::postgres::lsn::Lsn;
use crate::postgres::state::ServerId;

/// Every position record goes to this partition.
pub const PARTITION: i32 = 0;

const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

/// The position topic's configuration when walrelay creates it: one record
/// per key kept, segments rolled every ten minutes so that compaction runs
/// soon (a session reads the whole partition back at its start).
const TOPIC_CONFIG: &[(&str, &str)] = &[("cleanup.policy", "compact"), ("segment.ms", "600000")];

/// What a position record says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    pub slot: String,
    pub system_id: String,
    pub timeline: u32,
    /// The end of the last Postgres transaction of the Kafka transaction
    /// that wrote it: every transaction that committed before it is in Kafka.
    pub lsn: Lsn,
}

impl Position {
    pub fn server(&self) -> ServerId {
        ServerId {
            system_id: self.system_id.clone(),
            timeline: self.timeline,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a position serializes")
    }

    pub fn decode(bytes: &[u8]) -> std::result::Result<Position, String> {
        serde_json::from_slice(bytes).map_err(|e| e.to_string())
    }
}

/// The key of a slot's position records.
pub fn key(system_id: &str, slot: &str) -> String {
    format!("{system_id}/{slot}")
}

/// The key of a slot's sync records (see the module doc).
pub fn sync_key(system_id: &str, slot: &str) -> String {
    format!("{}/sync", key(system_id, slot))
}

/// Creates the position topic (compacted, one partition) if it is missing,
/// and says so when an existing one is not compacted.
pub async fn ensure_topic(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
    replication_factor: Option<i32>,
) -> Result<()> {
    let new_topic = TOPIC_CONFIG.iter().fold(
        NewTopic::new(
            topic,
            1,
            TopicReplication::Fixed(replication_factor.unwrap_or(-1)),
        ),
        |t, (key, value)| t.set(key, value),
    );
    let options = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT));
    let results = admin
        .create_topics([&new_topic], &options)
        .await
        .map_err(|e| {
            Error::transient(format!(
                "cannot reach Kafka to create position topic {topic}"
            ))
            .with_source(e)
        })?;
    for result in results {
        match result {
            Ok(_) => info!(
                topic,
                "created the position topic (compacted, one partition)"
            ),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {
                warn_unless_compacted(admin, topic).await
            }
            Err((
                _,
                code @ (RDKafkaErrorCode::TopicAuthorizationFailed
                | RDKafkaErrorCode::ClusterAuthorizationFailed),
            )) => {
                return Err(Error::permanent(format!(
                    "the position topic {topic} of --delivery exactly-once cannot be created \
                     ({code}): create it (cleanup.policy=compact, one partition), or grant \
                     walrelay's principal CREATE on it"
                )))
            }
            Err((_, code)) => {
                return Err(Error::transient(format!(
                    "Kafka could not create the position topic {topic}: {code}"
                )))
            }
        }
    }
    Ok(())
}

/// A position topic that deletes old records loses a quiet slot's position.
async fn warn_unless_compacted(admin: &AdminClient<DefaultClientContext>, topic: &str) {
    let options = AdminOptions::new().request_timeout(Some(ADMIN_TIMEOUT));
    let Ok(results) = admin
        .describe_configs([&ResourceSpecifier::Topic(topic)], &options)
        .await
    else {
        return;
    };
    let policy = results
        .into_iter()
        .flatten()
        .find_map(|config| config.get("cleanup.policy")?.value.clone());
    if let Some(policy) = policy.filter(|p| !p.contains("compact")) {
        warn!(
            topic,
            cleanup_policy = %policy,
            "the position topic is not compacted: a slot quiet for longer than its retention \
             loses its position, and a restart may then send again what the slot had not \
             confirmed; set cleanup.policy=compact"
        );
    }
}

/// The consumer that reads the position topic back: the client's own
/// properties (security, addresses), read_committed, no group of its own.
pub fn reader_config(client: &ClientConfig) -> ClientConfig {
    super::factory::consumer_config(
        &[],
        client.config_map(),
        &[
            ("isolation.level", "read_committed"),
            ("group.id", "walrelay.positions"),
            ("enable.auto.commit", "false"),
            ("enable.partition.eof", "false"),
            ("fetch.wait.max.ms", "50"),
        ],
    )
}

/// Reads the position topic's partition from its start until the sync
/// record `sync` (a value walrelay just committed under `sync_key`) shows,
/// and returns the last position recorded under `key` before it. Blocking;
/// gives up at `deadline`.
pub fn read(
    config: &ClientConfig,
    topic: &str,
    key: &str,
    sync_key: &str,
    sync: &[u8],
    deadline: Instant,
) -> Result<Option<Position>> {
    let mut last = None;
    let read = scan_to(config, topic, sync_key, sync, deadline, |message| {
        if message.key() != Some(key.as_bytes()) {
            return Ok(());
        }
        match message.payload().map(Position::decode) {
            Some(Ok(position)) => last = Some(position),
            // A tombstone (an operator forgetting the slot's position) or a
            // record walrelay cannot read: what stood before no longer holds.
            Some(Err(e)) => {
                warn!(topic, offset = message.offset(), error = %e, "a position record walrelay cannot read; ignoring the ones before it");
                last = None;
            }
            None => last = None,
        }
        Ok(())
    })?;
    info!(
        topic,
        records = read,
        "read the position topic back to this session's sync record"
    );
    Ok(last)
}

/// The value of the record each session writes under its sync key in a
/// transaction it aborts (closing what an older producer left open), and
/// the start-up probe under its own key: no read_committed reader may ever
/// see it.
pub const ABORTED: &[u8] = b"aborted";

/// Stops the read if `message` is a record walrelay aborted: a broker that
/// shows aborted records to read_committed readers (tansu 0.6's memory
/// engine commits and aborts alike) would publish every aborted Kafka
/// transaction to consumers as phantom events, and could hand walrelay a
/// position whose events it never committed, skipping them on resume.
fn refuse_aborted(message: &BorrowedMessage<'_>, key: &str, topic: &str) -> Result<()> {
    if message.key() == Some(key.as_bytes()) && message.payload() == Some(ABORTED) {
        return Err(Error::permanent(format!(
            "the Kafka broker does not support transactions as exactly once needs them: a \
             read_committed consumer of {topic} was shown a record of a transaction walrelay \
             aborted (offset {}), so aborted transactions would reach consumers as phantom \
             events and a position read back could name events never committed. Run with \
             --delivery at-least-once, whose consumers dedupe by event id, or use a broker \
             with Kafka's transactions (Apache Kafka 0.11 or later)",
            message.offset()
        )));
    }
    Ok(())
}

/// Reads the position topic's partition from its start, read_committed,
/// handing each record to `visit` until the record `sync` under `sync_key`
/// shows; returns how many records were read. An aborted record under
/// `sync_key` on the way stops it (`refuse_aborted`). Blocking; gives up at
/// `deadline`.
pub fn scan_to(
    config: &ClientConfig,
    topic: &str,
    sync_key: &str,
    sync: &[u8],
    deadline: Instant,
    mut visit: impl FnMut(&BorrowedMessage<'_>) -> Result<()>,
) -> Result<u64> {
    let consumer: BaseConsumer<TokenContext> =
        super::factory::consumer(config, "the Kafka consumer of the position topic")?;
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, PARTITION, Offset::Beginning)
        .and_then(|()| consumer.assign(&assignment))
        .map_err(|e| {
            Error::transient(format!("cannot read position topic {topic}")).with_source(e)
        })?;
    let mut read = 0u64;
    while Instant::now() < deadline {
        let Some(message) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let message = message.map_err(|e| {
            let authorization = matches!(
                e.rdkafka_error_code(),
                Some(
                    RDKafkaErrorCode::TopicAuthorizationFailed
                        | RDKafkaErrorCode::GroupAuthorizationFailed
                )
            );
            let error = format!("cannot read position topic {topic}");
            if authorization {
                Error::permanent(format!(
                    "{error}: grant walrelay's principal READ on topic {topic} and on group \
                     walrelay.positions"
                ))
                .with_source(e)
            } else {
                Error::transient(error).with_source(e)
            }
        })?;
        read += 1;
        if message.key() == Some(sync_key.as_bytes()) && message.payload() == Some(sync) {
            return Ok(read);
        }
        refuse_aborted(&message, sync_key, topic)?;
        visit(&message)?;
    }
    Err(Error::transient(format!(
        "the position topic {topic} did not show this session's sync record in time: a \
         transaction of another producer on its partition may be open (it holds back what \
         read_committed readers see until it closes, at the latest after its \
         transaction.timeout.ms)"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_reads_back_as_written_and_names_its_server_history() {
        let written = Position {
            slot: "walrelay".into(),
            system_id: "7412345678901234567".into(),
            timeline: 2,
            lsn: Lsn(0x1_6B37_4D48),
        };
        let bytes = written.encode();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.contains(r#""lsn":"1/6B374D48""#), "{text}");
        assert_eq!(Position::decode(&bytes).unwrap(), written);
        assert_eq!(
            written.server(),
            ServerId {
                system_id: "7412345678901234567".into(),
                timeline: 2
            }
        );
        assert!(Position::decode(b"{}").is_err());
        assert_eq!(key("74", "s"), "74/s");
        assert_eq!(sync_key("74", "s"), "74/s/sync");
    }
}
