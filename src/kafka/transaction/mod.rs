//! Kafka transactions for `--delivery exactly-once` (KIP-98): what each
//! transaction API error means for walrelay, and the blocking calls, each
//! on a thread of its own. The transactional producer's id is `id`'s.
//!
//! The `transactional.id` is derived from the database's system identifier
//! and the slot, so every walrelay that streams from one slot (an
//! active/passive pair, a restart, a promoted standby of the same cluster)
//! shares it: `init_transactions` bumps its epoch, which aborts whatever
//! transaction an older producer left open and fences that producer out
//! for good. walrelay calls it only once it holds the slot (after
//! `START_REPLICATION`), so a standby never fences the active instance.
//!
//! Only one producer of the id may exist in the process at a time (`Lane`):
//! a producer that a session left behind still commits or aborts on a
//! thread of its own, and its epoch bump, reaching the coordinator after
//! the next session's `init_transactions`, would abort that session's
//! transaction and fence it (measured on Apache Kafka 4.4).
//!
//! A broker without transactions is found before anything is created by a
//! probe under an id of its own: a transaction of one record aborted, then
//! one committed, read back read_committed. A broker that refuses the
//! commit, or shows the aborted record (the tansu the tests fetch commits
//! and aborts alike), is refused.
//!
//! A fence stops walrelay, except one reported for a transaction older
//! than `transaction.timeout.ms`: the coordinator fenced its own timed-out
//! transaction (`id`), and a new session takes the id again once it holds
//! the slot.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tracing::{info, warn};

mod id;

pub use id::{config, probe_id, transactional_id, TransactionalId};

use super::msk_iam::TokenContext;
use super::position;
use crate::error::{Error, Result};

/// One attempt to commit: a commit that times out is tried again, until
/// its records time out (`transaction.timeout.ms`) and it must abort.
const COMMIT_ATTEMPT: Duration = Duration::from_secs(10);
const ABORT_TIMEOUT: Duration = Duration::from_secs(30);
/// A commit still unanswered after this long is aborted (and sent again).
const COMMIT_GIVE_UP: Duration = Duration::from_secs(300);
/// Between attempts that failed at once.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// The right to have a transactional producer of the slot's id in this
/// process: one at a time, across sessions.
#[derive(Clone)]
pub struct Lane(Arc<Semaphore>);

/// Held by a transactional producer until librdkafka destroys it.
pub type LanePermit = OwnedSemaphorePermit;

impl Default for Lane {
    fn default() -> Self {
        Lane(Arc::new(Semaphore::new(1)))
    }
}

impl Lane {
    /// Waits, until `deadline`, for the producer an earlier session left to
    /// finish its last commit or abort and be destroyed.
    pub async fn take(&self, deadline: Instant) -> Result<LanePermit> {
        let acquire = self.0.clone().acquire_owned();
        match tokio::time::timeout_at(deadline, acquire).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) => Err(Error::permanent(
                "the transactional producer lane was closed",
            )),
            Err(_) => Err(Error::transient(
                "the Kafka producer of the previous session is still finishing its transaction \
                 (a commit waits up to -X transaction.timeout.ms, then aborts): starting again",
            )),
        }
    }
}

/// What a transaction API error means: fenced or otherwise fatal (stop),
/// a broker without transactions (stop, naming the fix), an abortable one
/// (the transaction is aborted; sent again), anything else (a new session).
pub fn error(
    what: &str,
    id: &TransactionalId,
    e: KafkaError,
    fatal: Option<(RDKafkaErrorCode, String)>,
) -> Error {
    let (code, fatal_error, abortable) = match &e {
        KafkaError::Transaction(t) => (Some(t.code()), t.is_fatal(), t.txn_requires_abort()),
        other => (other.rdkafka_error_code(), false, false),
    };
    let text = e.to_string();
    let fenced_code = |c: Option<RDKafkaErrorCode>| {
        matches!(
            c,
            Some(
                RDKafkaErrorCode::Fenced
                    | RDKafkaErrorCode::ProducerFenced
                    | RDKafkaErrorCode::InvalidProducerEpoch
            )
        )
    };
    // An epoch the coordinator bumped itself (a transaction it timed out)
    // is abortable; only librdkafka's verdict makes it a fence.
    let fenced = matches!(
        code,
        Some(RDKafkaErrorCode::Fenced | RDKafkaErrorCode::ProducerFenced)
    ) || (fatal_error && fenced_code(code))
        || fenced_code(fatal.as_ref().map(|(c, _)| *c));
    if fenced {
        let reason = fatal.map_or(text, |(_, reason)| reason);
        if let Some((age, timeout)) = id.outlived() {
            return Error::transient(format!(
                "the Kafka coordinator fenced walrelay's producer {id} while {what}, after its \
                 transaction had run {age:.1?}, longer than transaction.timeout.ms \
                 ({timeout:?}): the coordinator aborted that transaction itself and bumped the \
                 producer's epoch, so walrelay's next request under the old epoch was \
                 answered as a fence, though no other producer took the id. None of its records \
                 is seen by read_committed consumers; a new session takes the id again once it \
                 holds the slot, and sends its Postgres transactions again; if they take longer \
                 to send than -X transaction.timeout.ms, raise it ({reason})"
            ));
        }
        return Error::permanent(format!(
            "walrelay was fenced out of Kafka: another producer with transactional.id {id} \
             started since (another walrelay took over slot streaming, or was started on it), \
             so this one stopped while {what}; its open Kafka transaction is aborted and the \
             instance that fenced it goes on from the last committed position ({reason})"
        ))
        .with_cause(crate::error::StopCause::Fenced);
    }
    if code == Some(RDKafkaErrorCode::UnsupportedFeature)
        || text.contains("not supported by broker")
    {
        return Error::permanent(format!(
            "the Kafka broker does not support transactions ({text}): --delivery exactly-once \
             needs Kafka's transactions (KIP-98, Apache Kafka 0.11 or later, with \
             transaction.state.log settings a single node can meet). Run \
             with --delivery at-least-once, whose consumers dedupe by event id"
        ));
    }
    if code == Some(RDKafkaErrorCode::TransactionalIdAuthorizationFailed) {
        return Error::permanent(format!(
            "Kafka refused walrelay the transactional.id {id} ({text}): grant its principal \
             WRITE and DESCRIBE on transactional ids with the prefix walrelay- ({})",
            super::grant_command(
                "User:WALRELAY_PRINCIPAL",
                "Write --operation Describe",
                "--transactional-id walrelay- --resource-pattern-type prefixed"
            )
        ));
    }
    if code == Some(RDKafkaErrorCode::InvalidTransactionTimeout) {
        return Error::permanent(format!(
            "Kafka refused walrelay's transaction.timeout.ms ({text}): it must not exceed the \
             broker's transaction.max.timeout.ms (15 minutes by default); lower -X \
             transaction.timeout.ms"
        ));
    }
    if fatal_error {
        let reason = fatal.map_or(text, |(_, reason)| reason);
        return Error::permanent(format!(
            "the transactional Kafka producer failed for good while {what} ({reason}); \
             walrelay stopped, and nothing past Kafka's last committed transaction is confirmed"
        ));
    }
    if abortable {
        return Error::transient(format!(
            "the Kafka transaction was aborted while {what} ({text}): none of its records is \
             seen by read_committed consumers, and its Postgres transactions are read again \
             and sent in a new one; if a single Postgres transaction takes longer to send than \
             -X transaction.timeout.ms, raise it"
        ));
    }
    Error::transient(format!("Kafka transactions failed while {what}")).with_source(e)
}

/// Whether an error the client reports of a transactional producer stops
/// walrelay at once, before a delivery's error could start a new session:
/// every fatal one, but a fence of a transaction the coordinator timed
/// out itself, which ends the session through the failing call instead.
pub fn stops_at_once(code: RDKafkaErrorCode, id: &TransactionalId) -> bool {
    match code {
        RDKafkaErrorCode::Fenced => id.outlived().is_none(),
        RDKafkaErrorCode::Fatal => true,
        _ => false,
    }
}

/// What a failed call of `producer` while `what` means (`error`).
pub(super) fn failed<'a, C: ProducerContext + 'static>(
    producer: &'a BaseProducer<C>,
    what: &'a str,
    id: &'a TransactionalId,
) -> impl FnOnce(KafkaError) -> Error + 'a {
    move |e| error(what, id, e, producer.client().fatal_error())
}

/// Runs `call` on a thread of the blocking pool: librdkafka's transaction
/// calls block until the broker answers.
pub async fn blocking<T: Send + 'static>(
    call: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(call)
        .await
        .map_err(|e| Error::transient("a Kafka transaction call failed").with_source(e))?
}

/// init_transactions: fences every older producer of the id and aborts
/// what it left open.
pub fn init<C: ProducerContext + 'static>(
    producer: &BaseProducer<C>,
    id: &TransactionalId,
    deadline: Instant,
) -> Result<()> {
    let left = deadline.saturating_duration_since(Instant::now());
    producer
        .init_transactions(left)
        .map_err(failed(producer, "starting its transactions", id))
}

/// Commits the open transaction; a commit that times out is tried again
/// (librdkafka allows it) for up to `COMMIT_GIVE_UP`, or until `gone` says
/// its session ended; one that must abort is aborted.
pub fn commit<C: ProducerContext + 'static>(
    producer: &BaseProducer<C>,
    id: &TransactionalId,
    gone: impl Fn() -> bool,
) -> Result<()> {
    let started = Instant::now();
    let mut said = None::<Instant>;
    loop {
        delivered(producer, COMMIT_ATTEMPT);
        let e = match producer.commit_transaction(COMMIT_ATTEMPT) {
            Ok(()) => {
                id.ended();
                return Ok(());
            }
            Err(e) => e,
        };
        let retriable = match &e {
            KafkaError::Transaction(t) => t.is_retriable(),
            // Its records are still in flight (a broker away): they succeed
            // or time out with the transaction, which then must abort.
            KafkaError::Flush(_) => true,
            _ => false,
        };
        let aborting = matches!(&e, KafkaError::Transaction(t) if t.txn_requires_abort());
        let text = e.to_string();
        let error = failed(producer, "committing a transaction", id)(e);
        if retriable && error.is_transient() && started.elapsed() < COMMIT_GIVE_UP && !gone() {
            if said.is_none_or(|at| at.elapsed() >= Duration::from_secs(10)) {
                warn!(
                    waited = ?started.elapsed(),
                    error = %text,
                    "the Kafka commit has no answer yet; asking again (reading waits meanwhile)"
                );
                said = Some(Instant::now());
            }
            std::thread::sleep(RETRY_PAUSE);
            continue;
        }
        // The next session's init_transactions aborts it too, at the latest.
        if (aborting || retriable) && error.is_transient() {
            if let Err(e) = abort(producer, id) {
                warn!(error = %e.report(), "cannot abort the Kafka transaction; the next session's producer aborts it");
            }
        }
        return Err(error);
    }
}

/// Waits until every record was delivered (or failed), up to `limit`.
/// commit_transaction flushes first too, but rust-rdkafka's flush polls
/// in steps of up to 100 ms that the producer's own polling thread can
/// leave unanswered: measured, every commit took 103 ms.
fn delivered<C: ProducerContext + 'static>(producer: &BaseProducer<C>, limit: Duration) {
    let until = Instant::now() + limit;
    while producer.in_flight_count() > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// Aborts the open transaction.
pub fn abort<C: ProducerContext + 'static>(
    producer: &BaseProducer<C>,
    id: &TransactionalId,
) -> Result<()> {
    producer.abort_transaction(ABORT_TIMEOUT).map_err(failed(
        producer,
        "aborting a transaction",
        id,
    ))?;
    id.ended();
    Ok(())
}

/// Writes `record(position::ABORTED)` in a transaction it aborts, then
/// `record(committed)` in one it commits: the start-up probe under its own
/// key, and a session's sync record (kafka::position). A read_committed
/// reader must see the second and never the first.
pub fn abort_then_commit<'a, C: ProducerContext + 'static>(
    producer: &BaseProducer<C>,
    id: &TransactionalId,
    record: impl Fn(&'a [u8]) -> BaseRecord<'a, [u8], [u8], C::DeliveryOpaque>,
    committed: &'a [u8],
) -> Result<()> {
    abort_alone(producer, id, record(position::ABORTED))?;
    write_alone(producer, id, record(committed))
}

/// Writes one record in a transaction of its own and commits it.
fn write_alone<C: ProducerContext + 'static>(
    producer: &BaseProducer<C>,
    id: &TransactionalId,
    record: BaseRecord<'_, [u8], [u8], C::DeliveryOpaque>,
) -> Result<()> {
    open_with(producer, id, record)?;
    commit(producer, id, || false)
}

/// Opens a transaction holding `record` alone.
fn open_with<C: ProducerContext + 'static>(
    producer: &BaseProducer<C>,
    id: &TransactionalId,
    record: BaseRecord<'_, [u8], [u8], C::DeliveryOpaque>,
) -> Result<()> {
    producer
        .begin_transaction()
        .map_err(failed(producer, "opening a transaction", id))?;
    id.begun();
    if let Err((e, _)) = producer.send(record) {
        let _ = producer.abort_transaction(ABORT_TIMEOUT);
        return Err(failed(producer, "writing a record", id)(e));
    }
    Ok(())
}

/// Writes one record in a transaction and aborts it. The abort marker
/// closes whatever an older producer of the id left open on that
/// partition: records of a transaction the coordinator completed without
/// writing its markers (a broker restarted uncleanly skips the partitions
/// it finds without a leader) are aborted, not committed by the next
/// marker, so that the position read back never claims them.
fn abort_alone<C: ProducerContext + 'static>(
    producer: &BaseProducer<C>,
    id: &TransactionalId,
    record: BaseRecord<'_, [u8], [u8], C::DeliveryOpaque>,
) -> Result<()> {
    open_with(producer, id, record)?;
    delivered(producer, COMMIT_ATTEMPT);
    abort(producer, id)
}

/// Before anything is created: the position topic exists (created if
/// missing), and the broker runs transactions, which two under a probe id
/// of its own show: one record aborted and one committed, read back with
/// read_committed (a broker without them refuses the commit, or shows the
/// aborted record).
pub async fn probe(
    config: &ClientConfig,
    position_topic: &str,
    replication_factor: Option<i32>,
    slot: &str,
    deadline: Instant,
) -> Result<()> {
    let admin = super::factory::admin_client(config)?;
    position::ensure_topic(&admin, position_topic, replication_factor).await?;
    let id = TransactionalId::new(probe_id(slot), config);
    let producer_config = self::config(config, &id);
    let producer = super::factory::producer(&producer_config, TokenContext)?;
    let (topic, key) = (position_topic.to_string(), format!("probe/{slot}"));
    let reader = position::reader_config(config);
    blocking(move || {
        init(&producer, &id, deadline).map_err(coordinator_unavailable)?;
        let record = |payload| {
            BaseRecord::to(&topic)
                .partition(position::PARTITION)
                .key(key.as_bytes())
                .payload(payload)
        };
        let committed = id.as_str().as_bytes();
        abort_then_commit(&producer, &id, record, committed)?;
        position::scan_to(&reader, &topic, &key, committed, deadline, |_| Ok(())).map(drop)
    })
    .await?;
    info!(
        position_topic,
        "the Kafka broker runs transactions: delivering exactly once"
    );
    Ok(())
}

/// What fixes a broker that answers (the position topic was made) yet
/// never starts a transaction.
const COORDINATOR_FIX: &str = "set the brokers' transaction.state.log.replication.factor and \
     transaction.state.log.min.isr to at most the number of brokers (1 on a single node) and \
     restart them, or run --delivery at-least-once";

/// The probe's producer could not start its transactions in time, though a
/// broker answered: the transaction coordinator is not available, most
/// often because `__transaction_state` cannot be created with the
/// replication factor the brokers ask for. Said as such, not retried as a
/// connection problem (a start would otherwise blame Postgres after a
/// minute of silence).
fn coordinator_unavailable(e: Error) -> Error {
    if !e.is_transient() {
        return e;
    }
    Error::permanent(format!(
        "the Kafka broker answers but did not start walrelay's transactions in time: its \
         transaction coordinator is not available (a cluster with fewer brokers than \
         transaction.state.log.replication.factor, 3 by default, cannot create \
         __transaction_state); {COORDINATOR_FIX}"
    ))
    .with_fix(COORDINATOR_FIX)
    .with_source(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_coordinator_that_never_answers_is_named_with_its_fix_not_retried() {
        let timed_out = Error::transient("Kafka transactions failed while starting");
        let e = coordinator_unavailable(timed_out);
        assert!(!e.is_transient());
        assert!(
            e.report()
                .contains("transaction.state.log.replication.factor"),
            "{}",
            e.report()
        );
        assert_eq!(e.fix(), Some(COORDINATOR_FIX));
        let fenced = Error::permanent("fenced");
        assert_eq!(coordinator_unavailable(fenced).report(), "fenced");
    }

    /// A commit refused because a newer producer took the id.
    fn fenced_by_a_newer_producer(id: &TransactionalId) -> Error {
        error(
            "committing a transaction",
            id,
            KafkaError::Global(RDKafkaErrorCode::Fatal),
            Some((
                RDKafkaErrorCode::ProducerFenced,
                "Producer fenced by newer instance".into(),
            )),
        )
    }

    #[test]
    fn a_fenced_producer_and_a_broker_without_transactions_stop_walrelay_naming_why() {
        let id = TransactionalId::new("walrelay-1-s".into(), &ClientConfig::new());
        let fenced = fenced_by_a_newer_producer(&id);
        assert!(!fenced.is_transient());
        assert!(
            fenced.report().contains("fenced") && fenced.report().contains("walrelay-1-s"),
            "{}",
            fenced.report()
        );
        let unsupported = error(
            "committing a transaction",
            &id,
            KafkaError::Global(RDKafkaErrorCode::UnsupportedFeature),
            None,
        );
        assert!(!unsupported.is_transient());
        assert!(
            unsupported.report().contains("--delivery at-least-once"),
            "{}",
            unsupported.report()
        );
        let other = error(
            "x",
            &id,
            KafkaError::Global(RDKafkaErrorCode::AllBrokersDown),
            None,
        );
        assert!(other.is_transient());
    }

    #[test]
    fn a_fence_of_a_transaction_older_than_its_timeout_starts_a_new_session_naming_the_timeout() {
        let mut config = ClientConfig::new();
        config.set("transaction.timeout.ms", "6000");
        let id = TransactionalId::new("walrelay-1-s".into(), &config);
        let fence = || {
            error(
                "aborting a transaction",
                &id,
                KafkaError::Global(RDKafkaErrorCode::Fatal),
                Some((
                    RDKafkaErrorCode::Fenced,
                    "Failed to end transaction: Local: This instance has been fenced by a \
                     newer instance"
                        .into(),
                )),
            )
        };
        // Open 5 s: younger than the timeout, so another producer did it.
        id.begun_ago(Duration::from_secs(5));
        assert!(!fence().is_transient(), "{}", fence().report());
        // Open 9 s: the coordinator aborted it and bumped the epoch itself.
        id.begun_ago(Duration::from_secs(9));
        let own = fence();
        assert!(own.is_transient(), "{}", own.report());
        assert!(
            own.report().contains("transaction.timeout.ms (6s)")
                && own.report().contains("new session"),
            "{}",
            own.report()
        );
        // Once it ended, a fence is another producer's again.
        id.ended();
        assert!(!fence().is_transient());
    }

    #[test]
    fn the_client_stops_walrelay_at_every_fatal_error_but_a_fence_of_a_timed_out_transaction() {
        let mut config = ClientConfig::new();
        config.set("transaction.timeout.ms", "6000");
        let id = TransactionalId::new("walrelay-1-s".into(), &config);
        assert!(
            stops_at_once(RDKafkaErrorCode::Fenced, &id),
            "no transaction open"
        );
        assert!(stops_at_once(RDKafkaErrorCode::Fatal, &id));
        assert!(!stops_at_once(RDKafkaErrorCode::AllBrokersDown, &id));
        id.begun_ago(Duration::from_secs(5));
        assert!(
            stops_at_once(RDKafkaErrorCode::Fenced, &id),
            "younger than the timeout"
        );
        id.begun_ago(Duration::from_secs(9));
        assert!(!stops_at_once(RDKafkaErrorCode::Fenced, &id));
        // A fatal error whose cause the client did not name still stops.
        assert!(stops_at_once(RDKafkaErrorCode::Fatal, &id));
    }

    #[test]
    fn a_fence_by_another_producer_is_the_fenced_stop_cause() {
        let id = TransactionalId::new("walrelay-1-s".into(), &ClientConfig::new());
        let fenced = fenced_by_a_newer_producer(&id);
        assert_eq!(fenced.stop_cause(), Some(crate::error::StopCause::Fenced));
    }
}
