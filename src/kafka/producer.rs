//! The Kafka producer: idempotent with `acks=all`, so retries neither
//! duplicate nor reorder within a partition. Many events are in flight at
//! once; delivery reports come back on a channel, tagged with the
//! transaction they belong to.

use bytes::Bytes;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;
use tokio::sync::mpsc;
use tracing::warn;

use crate::checkpoint::TxnSeq;
use crate::error::{Error, Result};
use crate::metrics::{Metrics, Stage};
use crate::postgres::lsn::Lsn;

/// Settings walrelay relies on for ordering and no loss. `-X` may override
/// them, with a warning.
const REQUIRED: &[(&str, &str)] = &[("enable.idempotence", "true"), ("acks", "all")];

/// Defaults chosen for low latency without giving up batching; `-X` overrides them.
const DEFAULTS: &[(&str, &str)] = &[
    // 0 means librdkafka retries a delivery forever: a broker that is down
    // delays events, it never fails them.
    ("message.timeout.ms", "0"),
    ("linger.ms", "5"),
    ("batch.num.messages", "10000"),
    ("queue.buffering.max.messages", "1000000"),
    ("queue.buffering.max.kbytes", "1048576"),
    ("client.id", "walrelay"),
    // The Java producer's partitioner (murmur2 of the key bytes), so a keyed
    // event lands where Debezium would have put it; librdkafka's own default
    // (consistent_random, CRC32) places keys elsewhere.
    ("partitioner", "murmur2_random"),
];

/// What a default Kafka broker accepts (its message.max.bytes): the client's
/// limit unless the dead-letter topic needs more.
const DEFAULT_MESSAGE_MAX_BYTES: usize = 1_048_588;

/// What comes back for each produced event.
#[derive(Debug)]
pub struct Delivery {
    pub txn: TxnSeq,
    pub bytes: usize,
    /// True for a record sent to the dead-letter topic.
    pub dead_letter: bool,
    pub result: std::result::Result<(), Box<DeliveryFailure>>,
}

/// A failed delivery, with a copy of the message so it can be dead-lettered.
#[derive(Debug)]
pub struct DeliveryFailure {
    pub error: KafkaError,
    pub commit_lsn: Lsn,
    pub topic: String,
    pub key: Option<Bytes>,
    pub payload: Option<Bytes>,
    pub event_id: Option<Bytes>,
    pub event_type: Option<Bytes>,
    /// Headers beyond `id` and `event_type`, kept for the dead-letter copy.
    pub extra_headers: Vec<(String, Option<Bytes>)>,
    /// The explicit partition the event asked for, if any.
    pub partition: Option<i32>,
}

/// Carried through librdkafka with each message.
pub struct Ticket {
    txn: TxnSeq,
    commit_lsn: Lsn,
    bytes: usize,
    dead_letter: bool,
    /// Microseconds since the Unix epoch at which the transaction committed.
    commit_time_us: i64,
    produced_at: std::time::Instant,
}

pub struct DeliveryContext {
    deliveries: mpsc::UnboundedSender<Delivery>,
    metrics: Metrics,
}

impl ClientContext for DeliveryContext {
    // librdkafka reconnects to brokers by itself; count it and say so.
    fn error(&self, error: KafkaError, reason: &str) {
        if matches!(
            error.rdkafka_error_code(),
            Some(RDKafkaErrorCode::BrokerTransportFailure | RDKafkaErrorCode::AllBrokersDown)
        ) {
            self.metrics.record_reconnect("kafka");
        }
        warn!(error = %error, reason, "Kafka client error");
    }
}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Box<Ticket>;

    // Runs on librdkafka's polling thread: keep it short.
    fn delivery(&self, result: &DeliveryResult<'_>, ticket: Box<Ticket>) {
        let result = match result {
            Ok(message) => {
                self.metrics
                    .record_delivery(message.topic(), ticket.commit_time_us);
                self.metrics
                    .observe_stage(Stage::ProducedToAcked, ticket.produced_at.elapsed());
                Ok(())
            }
            Err((error, message)) => {
                self.metrics.record_publish_error(&super::error_reason(error));
                let header = |name: &str| {
                    message.headers().and_then(|h| {
                        h.iter()
                            .find(|h| h.key == name)
                            .and_then(|h| h.value.map(Bytes::copy_from_slice))
                    })
                };
                let extra_headers = message
                    .headers()
                    .map(|h| {
                        h.iter()
                            .filter(|h| h.key != "id" && h.key != "event_type")
                            .map(|h| (h.key.to_string(), h.value.map(Bytes::copy_from_slice)))
                            .collect()
                    })
                    .unwrap_or_default();
                Err(Box::new(DeliveryFailure {
                    error: error.clone(),
                    extra_headers,
                    partition: (message.partition() >= 0).then(|| message.partition()),
                    commit_lsn: ticket.commit_lsn,
                    topic: message.topic().to_string(),
                    key: message.key().map(Bytes::copy_from_slice),
                    payload: message.payload().map(Bytes::copy_from_slice),
                    event_id: header("id"),
                    event_type: header("event_type"),
                }))
            }
        };
        // The receiver is gone only when the session has ended; its events
        // will be read again from the slot.
        let _ = self.deliveries.send(Delivery {
            txn: ticket.txn,
            bytes: ticket.bytes,
            dead_letter: ticket.dead_letter,
            result,
        });
    }
}

/// One Kafka message for an outbox event.
pub struct Outgoing<'a> {
    pub topic: &'a str,
    pub key: Option<&'a Bytes>,
    pub payload: Option<&'a Bytes>,
    pub event_id: Option<&'a Bytes>,
    /// The `event_type` header; None sends no such header.
    pub event_type: Option<&'a Bytes>,
    /// Headers beyond `id` and `event_type`.
    pub extra_headers: &'a [(&'a str, Option<&'a [u8]>)],
    /// An explicit partition (a `column:partition` placement); else by key.
    pub partition: Option<i32>,
    /// The Kafka timestamp, in milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
    pub dead_letter: bool,
    pub commit_lsn: Lsn,
    /// Microseconds since the Unix epoch.
    pub commit_time_us: i64,
}

impl Outgoing<'_> {
    pub fn size(&self) -> usize {
        self.key.map_or(0, |k| k.len()) + self.payload.map_or(0, |p| p.len())
    }

    /// The record's bytes as the broker counts them against max.message.bytes
    /// (uncompressed), without batch framing.
    pub fn record_size(&self) -> usize {
        let header =
            |key: &str, value: Option<&[u8]>| key.len() + value.map_or(0, <[u8]>::len) + 10;
        self.size()
            + header("id", self.event_id.map(|v| &v[..]))
            + header("event_type", self.event_type.map(|v| &v[..]))
            + self
                .extra_headers
                .iter()
                .map(|(k, v)| header(k, *v))
                .sum::<usize>()
    }
}

pub enum SendError {
    /// librdkafka's local queue is full: wait for deliveries, then try again.
    QueueFull,
    Failed(KafkaError),
}

pub struct Producer {
    inner: ThreadedProducer<DeliveryContext>,
}

impl Producer {
    pub fn new(
        config: &ClientConfig,
        metrics: Metrics,
    ) -> Result<(Self, mpsc::UnboundedReceiver<Delivery>)> {
        let (tx, rx) = mpsc::unbounded_channel();
        let inner = config
            .create_with_context(DeliveryContext {
                deliveries: tx,
                metrics,
            })
            .map_err(|e| {
                Error::permanent("cannot create the Kafka producer; check the -X properties")
                    .with_source(e)
            })?;
        Ok((Producer { inner }, rx))
    }

    pub fn send(&self, txn: TxnSeq, event: &Outgoing<'_>) -> std::result::Result<(), SendError> {
        let mut headers = OwnedHeaders::new_with_capacity(2 + event.extra_headers.len());
        headers = headers.insert(Header {
            key: "id",
            value: event.event_id.map(|v| &v[..]),
        });
        // Only when there is an event type: Debezium's router sends no such
        // header, and `--field-event-type ''` reproduces that.
        if let Some(event_type) = event.event_type {
            headers = headers.insert(Header {
                key: "event_type",
                value: Some(&event_type[..]),
            });
        }
        for (key, value) in event.extra_headers {
            headers = headers.insert(Header { key, value: *value });
        }
        let ticket = Box::new(Ticket {
            txn,
            commit_lsn: event.commit_lsn,
            bytes: event.size(),
            dead_letter: event.dead_letter,
            commit_time_us: event.commit_time_us,
            produced_at: std::time::Instant::now(),
        });
        let mut record: BaseRecord<'_, [u8], [u8], Box<Ticket>> =
            BaseRecord::with_opaque_to(event.topic, ticket)
                .headers(headers)
                .timestamp(event.timestamp_ms);
        if let Some(partition) = event.partition {
            record = record.partition(partition);
        }
        if let Some(key) = event.key {
            record = record.key(&key[..]);
        }
        if let Some(payload) = event.payload {
            record = record.payload(&payload[..]);
        }
        match self.inner.send(record) {
            Ok(()) => Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                Err(SendError::QueueFull)
            }
            Err((e, _)) => Err(SendError::Failed(e)),
        }
    }

    /// The client configuration. `dead_letter_max_message_bytes` raises the
    /// client's own size limit, so a large event's dead-letter copy is not
    /// refused before it reaches the dead-letter topic; every other topic's
    /// limit is the broker's to enforce.
    pub fn client_config(
        brokers: &str,
        properties: &[(String, String)],
        dead_letter_max_message_bytes: usize,
    ) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", brokers);
        for (key, value) in DEFAULTS.iter().chain(REQUIRED) {
            config.set(*key, *value);
        }
        config.set(
            "message.max.bytes",
            DEFAULT_MESSAGE_MAX_BYTES
                .max(dead_letter_max_message_bytes)
                .to_string(),
        );
        for (key, value) in properties {
            if let Some((_, required)) = REQUIRED.iter().find(|(k, _)| k == key) {
                if value != required {
                    warn!(
                        property = key.as_str(),
                        "overriding {key}={required} weakens delivery guarantees: retries may reorder or lose events"
                    );
                }
            }
            if key == "message.max.bytes"
                && value.parse::<usize>().unwrap_or(0) < dead_letter_max_message_bytes
            {
                warn!(
                    "-X message.max.bytes={value} is below --dead-letter-max-message-bytes: \
                     walrelay halts on an event too large for it instead of dead-lettering it"
                );
            }
            config.set(key, value);
        }
        config
    }
}
