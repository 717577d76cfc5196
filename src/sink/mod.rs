//! The seam between the apply loop and the place events go.
//!
//! The apply loop hands a sink records, each with a ticket the sink never
//! looks inside, and gets back one delivery per record, carrying its ticket.
//! Kafka is one sink (`kafka::producer::KafkaSink`); `memory::MemorySink`
//! holds records in memory and acknowledges them when a test says so, so the
//! apply path can be tested without a broker.
//!
//! A sink speaks records, not events: the outbox layer has already built
//! the key, the value and every header.
//!
//! A sink may also write in transactions (`Sink::transactional`, exactly
//! once): then a delivery says only that a record is in the open
//! transaction, and nothing of it counts until `Sink::commit` succeeds, with
//! the position of the transaction's last Postgres commit written in it.

pub mod memory;

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::postgres::lsn::Lsn;

/// A record header: a name and a value that may be null.
pub type Header = (Cow<'static, str>, Option<Bytes>);

/// One record to write.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    pub topic: &'a str,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'a [Header],
    /// An explicit partition; else the sink picks one by key.
    pub partition: Option<i32>,
    /// Milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
}

impl Record<'_> {
    /// Key and value bytes: what flow control counts.
    pub fn size(&self) -> usize {
        self.key.map_or(0, <[u8]>::len) + self.value.map_or(0, <[u8]>::len)
    }

    /// The record's bytes as a broker counts them against a topic's limit
    /// (uncompressed, without batch framing).
    pub fn wire_size(&self) -> usize {
        self.size()
            + self
                .headers
                .iter()
                .map(|(name, value)| name.len() + value.as_ref().map_or(0, Bytes::len) + 10)
                .sum::<usize>()
    }

    pub fn to_owned(&self) -> OwnedRecord {
        OwnedRecord {
            topic: self.topic.to_string(),
            key: self.key.map(Bytes::copy_from_slice),
            value: self.value.map(Bytes::copy_from_slice),
            headers: self.headers.to_vec(),
            partition: self.partition,
        }
    }
}

/// A record held after the fact: one the sink could not deliver, or a
/// dead-letter copy being built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedRecord {
    pub topic: String,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<Header>,
    pub partition: Option<i32>,
}

impl OwnedRecord {
    pub fn as_record(&self, timestamp_ms: i64) -> Record<'_> {
        Record {
            topic: &self.topic,
            key: self.key.as_deref(),
            value: self.value.as_deref(),
            headers: &self.headers,
            partition: self.partition,
            timestamp_ms,
        }
    }

    /// The value of the first header called `name`.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_deref())
    }
}

/// What a refusal means for walrelay, whoever refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// The record itself is the problem: no retry can fix it, so it goes to
    /// the poison policy.
    Poison,
    /// The record asked for a partition the sink does not know: poison once
    /// fresh metadata confirms the topic really has fewer partitions.
    UnknownPartition(i32),
    /// Too large: the record, or the batch it travelled in. A broker
    /// refuses a whole batch for one oversized record, so the record is
    /// poison only if it is refused when sent alone.
    Oversized,
    /// Configuration or permissions: every record would fail the same way,
    /// so walrelay halts even under `--on-poison dead-letter`.
    Configuration,
    /// Worth another attempt: the session starts over from the slot.
    Retriable,
}

/// A sink's refusal of one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub rejection: Rejection,
    /// The sink's own words, for people.
    pub message: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Refusal {}

/// Why `send` did not take a record.
#[derive(Debug)]
pub enum SendError<T> {
    /// The sink's queue is full: take deliveries, then send again with the ticket.
    Full(T),
    Refused(Refusal),
}

/// The outcome of one record.
#[derive(Debug)]
pub struct Delivery<T> {
    pub ticket: T,
    /// From `send` to the outcome, as the sink measured it.
    pub took: Duration,
    /// When the sink learned the outcome: the loop may take it later.
    pub at: std::time::Instant,
    pub result: std::result::Result<(), Box<Failure>>,
}

/// A record the sink could not deliver, handed back whole.
#[derive(Debug)]
pub struct Failure {
    pub refusal: Refusal,
    pub record: OwnedRecord,
}

/// Whether records may go to a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicAccess {
    Open(TopicInfo),
    /// Why records cannot go there: the event is poison.
    Closed(String),
}

/// What the sink knows of a topic it may write to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TopicInfo {
    /// The topic's largest record, when known (Kafka: `max.message.bytes`).
    pub max_record_bytes: Option<usize>,
    /// The limit is the broker's default, assumed because the topic's own
    /// could not be read: a record over it may still fit.
    pub assumed: bool,
    /// The limit is below the producer's batches: each record to the topic
    /// travels alone, in a batch of its own, so that no batch of it is
    /// refused for size (the producer's batch size is one for all topics).
    pub send_alone: bool,
}

/// Kafka's RecordBatch header (61 bytes) plus one record's framing (varints
/// for length, timestamp and offset deltas, key and value lengths).
const RECORD_OVERHEAD: usize = 61 + 40;

impl TopicInfo {
    /// Why a record of `wire_size` bytes cannot go to `topic`, if it cannot.
    pub fn refuse_size(&self, topic: &str, wire_size: usize) -> Option<String> {
        let limit = self.max_record_bytes?;
        (wire_size + RECORD_OVERHEAD > limit).then(|| {
            format!(
                "the record is {wire_size} bytes, over max.message.bytes ({limit}) of topic \
                 {topic}"
            )
        })
    }
}

/// Where the apply loop's records go. Calls come from one task, so methods
/// take `&mut self`; walrelay calls sinks through generics only, which is
/// why the `async fn`s here need no `Send` bound.
///
/// # The contract
///
/// walrelay confirms a Postgres commit to the slot only from what a sink
/// says here, and a confirmed commit is never read again. So every sink
/// owes the caller (`delivery::publish` and `delivery::progress`) the
/// following; `MemorySink` keeps it in memory, `KafkaSink` with Kafka.
///
/// **Accepted.** `Ok(())` from `send` means the sink has taken the record
/// and will report it exactly once: one `Delivery` carrying the ticket
/// given, from `delivery` or `try_delivery`, whatever the outcome, unless
/// the sink ends first (then `delivery` returns None and the caller starts
/// over from the slot). Accepted says nothing of where the record is: the
/// slot does not move for it. `SendError::Full` hands the ticket back
/// unused: the record was not taken and no delivery will come for it.
/// `SendError::Refused` is a refusal of this record alone, with no delivery
/// either.
///
/// **Durable.** A delivery with `Ok(())` means the record is stored as
/// durably as the sink can make it (Kafka: acknowledged by every in-sync
/// replica, `acks=all`), so that losing this process, or the sink's own
/// process, does not lose it. For a transactional sink (`transactional`)
/// it means less: the record is in the open transaction, and becomes
/// durable only when `commit` returns `Ok`; an abort, or a failed commit,
/// takes it back. Only then may the caller count it: `progress` makes a
/// Postgres transaction confirmable once every one of its records is
/// durable, and confirms it once every earlier one is too.
///
/// **Order.** Deliveries may come in any order, across topics and
/// partitions alike; the caller orders them by Postgres commit itself
/// (`delivery::checkpoint`). What the sink must keep is the order of the
/// records: two records `send` took for the same topic and partition are
/// stored, and read back, in the order they were taken, also across
/// retries inside the sink (Kafka: the idempotent producer with one request
/// in flight, `kafka::client`). Consumers' order per aggregate rests on it.
///
/// **Failure.** A delivery with an error hands the record back whole
/// (`Failure`) with what the refusal means (`Rejection`): `Retriable` ends
/// the session, and the next one reads again from the slot's confirmed
/// position, which is still before the record's transaction; a record
/// `Oversized` in a batch is sent again alone (`publish::oversized`), and
/// what is still refused (`Poison`, `Oversized` alone, `UnknownPartition`)
/// goes to the poison policy: a halt, or a dead-letter copy that must
/// itself be delivered `Ok` before the transaction counts;
/// `Configuration` halts walrelay. In every case the
/// slot stays before the transaction that holds the record until the
/// record, or its dead-letter copy, is durable: a failed send may cause a
/// duplicate, never a loss.
#[allow(async_fn_in_trait)]
pub trait Sink<T> {
    /// Makes `topic` ready (checks it, creates it if allowed), or says why
    /// records cannot go there.
    async fn open_topic(&mut self, topic: &str) -> Result<TopicAccess>;

    /// The dead-letter topic, created if missing.
    async fn open_dead_letter_topic(&mut self) -> Result<TopicInfo>;

    /// The topic's partition count from fresh metadata; None if it does not exist.
    async fn partition_count(&mut self, topic: &str) -> Result<Option<usize>>;

    /// Takes a record; its delivery comes back later with `ticket`, and
    /// with the time it took from `now`, the caller's reading of the clock
    /// as it hands the record over (one reading serves both).
    fn send(
        &mut self,
        record: &Record<'_>,
        ticket: T,
        now: std::time::Instant,
    ) -> std::result::Result<(), SendError<T>>;

    /// The next delivery; None once the sink can deliver nothing more.
    /// Cancel-safe.
    async fn delivery(&mut self) -> Option<Delivery<T>>;

    /// A delivery already at hand, without waiting for one (and without
    /// asking to be woken by the next).
    fn try_delivery(&mut self) -> Option<Delivery<T>>;

    /// Whether records go in transactions that `commit` closes. A delivery
    /// then means only that the record is in the open transaction: it is
    /// settled by the commit, and lost with an abort. A transactional sink
    /// opens a transaction with the first record `send` takes after a
    /// commit or an abort.
    fn transactional(&self) -> bool {
        false
    }

    /// Commits the open transaction with `position`, the end of its last
    /// Postgres transaction, written in it. Nothing may be sent until the
    /// outcome is known; an error means the transaction is aborted (or
    /// will be), and says whether to try again (transient) or stop.
    fn commit(&mut self, position: Lsn) -> Closing {
        let _ = position;
        Closing::ready(Err(Error::permanent(
            "this sink does not write in transactions",
        )))
    }

    /// Aborts the open transaction, if one is open: none of its records
    /// is ever seen by a read_committed reader.
    fn abort(&mut self) -> Closing {
        Closing::ready(Ok(()))
    }
}

/// The outcome of closing a sink's transaction (a commit or an abort),
/// once the sink knows it. Cancel-safe: it may be polled again after a
/// `select!` dropped the poll.
pub struct Closing(oneshot::Receiver<Result<()>>);

impl Closing {
    /// An outcome to be told through the sender.
    pub fn pending() -> (oneshot::Sender<Result<()>>, Closing) {
        let (tx, rx) = oneshot::channel();
        (tx, Closing(rx))
    }

    /// An outcome known now.
    pub fn ready(outcome: Result<()>) -> Closing {
        let (tx, closing) = Self::pending();
        let _ = tx.send(outcome);
        closing
    }
}

impl Future for Closing {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        Pin::new(&mut self.0).poll(cx).map(|told| {
            told.unwrap_or_else(|_| {
                Err(Error::transient(
                    "the sink ended before it said how its transaction closed",
                ))
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_over_the_topic_limit_is_refused_with_both_sizes() {
        let info = TopicInfo {
            max_record_bytes: Some(1000),
            ..TopicInfo::default()
        };
        assert!(info.refuse_size("t", 800).is_none());
        let why = info.refuse_size("t", 1000).unwrap();
        assert!(
            why.contains("1000 bytes") && why.contains("(1000)"),
            "{why}"
        );
        let unknown = TopicInfo::default();
        assert!(unknown.refuse_size("t", usize::MAX / 2).is_none());
    }

    #[test]
    fn the_wire_size_counts_key_value_and_every_header() {
        let headers = [
            (Cow::Borrowed("id"), Some(Bytes::from_static(b"e-1"))),
            (Cow::Borrowed("trace"), None),
        ];
        let record = Record {
            topic: "t",
            key: Some(b"k"),
            value: Some(b"value"),
            headers: &headers,
            partition: None,
            timestamp_ms: 0,
        };
        assert_eq!(record.size(), 6);
        assert_eq!(record.wire_size(), 6 + (2 + 3 + 10) + (5 + 10));
    }
}
