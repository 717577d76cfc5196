//! Kafka as the relay's sink: an idempotent producer with `acks=all`, so
//! retries neither duplicate nor reorder within a partition, plus the topic
//! manager. Many records are in flight at once; librdkafka reports each
//! outcome on its own thread, and the report travels back to the apply loop
//! on a channel with the record's ticket.
//!
//! With `--delivery exactly-once` the session makes its producer
//! transactional once it holds the slot (`KafkaSink::exactly_once`), and the
//! records go in transactions (`kafka::transaction`).

mod handles;
mod transactional;

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::polled::{self, Polled};
use super::reachability;
use super::topics::{TopicManager, TopicPolicy, DEFAULT_BATCH_SIZE};
use super::transaction::{self, TransactionalId};
use super::{error_reason, is_login_refusal, refusal, LoginAdvice};
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::postgres::lsn::Lsn;
use crate::sink::{
    Closing, Delivery, Failure, OwnedRecord, Record, Refusal, Rejection, SendError, Sink,
    TopicAccess, TopicInfo,
};
use handles::TopicHandles;
use transactional::Transactional;

/// A record's ticket on its way through librdkafka; none for walrelay's own
/// records (positions), whose outcome is their transaction's.
pub(super) struct InFlight<T> {
    ticket: Option<T>,
    sent_at: Instant,
}

pub(super) struct DeliveryContext<T> {
    deliveries: mpsc::UnboundedSender<Delivery<T>>,
    metrics: Metrics,
    repeats: Mutex<Repeats>,
    /// Stops walrelay: a refused login would otherwise be retried forever,
    /// each event waiting out a metadata timeout.
    fatal: mpsc::Sender<Error>,
    /// What a refused login names: its properties, and a failed kinit.
    login: LoginAdvice,
    /// Why the broker refused the producer an id, if it did: librdkafka
    /// then fails every record with a fatal error, which says nothing of
    /// the permission missing.
    refused_id: Mutex<Option<String>>,
    /// The transactional.id of an exactly-once producer: a fatal error
    /// (fenced by another producer of the slot) stops walrelay, unless it
    /// is a fence of a transaction the coordinator timed out itself.
    transactional_id: Option<Arc<TransactionalId>>,
    /// The session that made it has ended: its errors no longer matter,
    /// and a commit it still retries gives up.
    retired: AtomicBool,
    /// An exactly-once producer holds its slot's lane for as long as it
    /// exists (`kafka::transaction::Lane`).
    _lane: Option<transaction::LanePermit>,
}

impl<T> DeliveryContext<T> {
    /// Whether the session that made this producer has ended.
    pub(super) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Relaxed)
    }
}

impl<T> DeliveryContext<T> {
    /// A produce error as the sink's refusal. A producer refused its id
    /// (InitProducerId, ClusterAuthorizationFailed: a principal that may
    /// write no topic at all) fails each record with Fatal or, for those
    /// queued, PurgeQueue: a permission problem, not a retriable one.
    fn refusal(&self, error: &KafkaError, partition: Option<i32>) -> Refusal {
        use RDKafkaErrorCode::{Fatal, PurgeQueue};
        let refused_id = self.refused_id.lock().unwrap_or_else(|e| e.into_inner());
        match (error.rdkafka_error_code(), refused_id.as_deref()) {
            (Some(Fatal | PurgeQueue), Some(reason)) => Refusal {
                rejection: Rejection::Configuration,
                message: format!(
                    "the broker refused walrelay's idempotent producer an id (InitProducerId): \
                     {reason}; on Kafka 2.8 and later WRITE on the topic allows it (before 2.8, \
                     IDEMPOTENT_WRITE on the cluster)"
                ),
            },
            _ => refusal(error, partition),
        }
    }
}

impl<T: Send + Sync + 'static> ClientContext for DeliveryContext<T> {
    super::msk_iam::oauth_token_hook!();

    // librdkafka reconnects to brokers by itself; count a connection that
    // was up and went down, and say so, once per kind of error and minute
    // rather than at every retry.
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::BrokerTransportFailure)
            && reachability::lost_an_established_connection(reason)
        {
            self.metrics.record_reconnect("kafka");
        }
        let kind = format!("{error}");
        let seen = self
            .repeats
            .lock()
            .map(|mut r| r.seen(&kind, Instant::now()));
        match seen {
            Ok(None) => {}
            Ok(Some(0)) | Err(_) => warn!(error = %error, reason, "Kafka client error"),
            Ok(Some(repeated)) => warn!(
                error = %error,
                reason,
                repeated,
                "Kafka client error (repeated {repeated} times since last logged)"
            ),
        }
        if is_login_refusal(&error) {
            // Full when an error already stops walrelay: one is enough.
            let _ = self.fatal.try_send(self.login.refused(reason));
        }
        // librdkafka reports it before it purges the queued records.
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::ClusterAuthorizationFailed) {
            *self.refused_id.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason.to_string());
        }
        // A fenced or failed transactional producer can never write again:
        // stop now, before a delivery's error starts a new session instead.
        // Not for a fence of its own timed-out transaction: the failing
        // call or delivery turns that into a new session
        // (`transaction::error`).
        let code = error.rdkafka_error_code();
        if let (Some(id), Some(code)) = (&self.transactional_id, code) {
            if !self.is_retired() && transaction::stops_at_once(code, id) {
                let cause = (code, reason.to_string());
                let stop = transaction::error("producing", id, error, Some(cause));
                let _ = self.fatal.try_send(stop);
            }
        }
    }

    // A failed connection also reaches `error` above: logged there, once.
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        self.login.observe_log(level, fac, log_message);
        if fac == "FAIL" {
            debug!(target: "librdkafka", "{fac}: {log_message}");
        } else {
            DefaultClientContext.log(level, fac, log_message);
        }
    }
}

/// When each kind of Kafka client error was last logged, and how many
/// times it came again since without being logged. The kinds are
/// librdkafka's error codes: a handful.
#[derive(Default)]
struct Repeats(std::collections::HashMap<String, (Instant, u64)>);

impl Repeats {
    /// A repeat is logged at most once a minute.
    const QUIET: std::time::Duration = std::time::Duration::from_secs(60);

    /// None to stay quiet; otherwise how many repeats of this kind went
    /// unlogged since it was last logged.
    fn seen(&mut self, kind: &str, now: Instant) -> Option<u64> {
        match self.0.get_mut(kind) {
            Some((at, suppressed)) if now.duration_since(*at) < Self::QUIET => {
                *suppressed += 1;
                None
            }
            Some((at, suppressed)) => {
                *at = now;
                Some(std::mem::take(suppressed))
            }
            None => {
                self.0.insert(kind.to_string(), (now, 0));
                Some(0)
            }
        }
    }
}

impl<T: Send + Sync + 'static> ProducerContext for DeliveryContext<T> {
    type DeliveryOpaque = Box<InFlight<T>>;

    // Runs on librdkafka's polling thread: keep it short.
    fn delivery(&self, result: &DeliveryResult<'_>, in_flight: Box<InFlight<T>>) {
        let Some(ticket) = in_flight.ticket else {
            return;
        };
        let result = match result {
            Ok(_) => Ok(()),
            Err((error, message)) => {
                self.metrics.record_publish_error(&error_reason(error));
                let partition = (message.partition() >= 0).then(|| message.partition());
                Err(Box::new(Failure {
                    refusal: self.refusal(error, partition),
                    record: OwnedRecord {
                        topic: message.topic().to_string(),
                        key: message.key().map(Bytes::copy_from_slice),
                        value: message.payload().map(Bytes::copy_from_slice),
                        headers: message
                            .headers()
                            .map(|headers| {
                                headers
                                    .iter()
                                    .map(|h| {
                                        let name = Cow::Owned(h.key.to_string());
                                        (name, h.value.map(Bytes::copy_from_slice))
                                    })
                                    .collect()
                            })
                            .unwrap_or_default(),
                        partition,
                    },
                }))
            }
        };
        // The receiver is gone only when the session has ended; its events
        // will be read again from the slot.
        let at = Instant::now();
        let _ = self.deliveries.send(Delivery {
            ticket,
            took: at.saturating_duration_since(in_flight.sent_at),
            at,
            result,
        });
    }
}

pub struct KafkaSink<'a, T: Send + Sync + 'static> {
    /// Before `producer`: its handles go first.
    handles: TopicHandles<DeliveryContext<T>>,
    pub(super) producer: Polled<DeliveryContext<T>>,
    deliveries: mpsc::UnboundedReceiver<Delivery<T>>,
    topics: TopicManager<'a>,
    /// Tells /readyz and the watchdog whether a broker answers.
    _probe: reachability::BrokerProbe,
    /// What a transactional producer is made of later in the session.
    pub(super) parts: Parts<T>,
    /// Exactly once: the producer writes in transactions.
    pub(super) transaction: Option<Transactional>,
}

/// What a producer of the session is made of.
pub(super) struct Parts<T> {
    pub(super) config: ClientConfig,
    deliveries: mpsc::UnboundedSender<Delivery<T>>,
    metrics: Metrics,
    fatal: mpsc::Sender<Error>,
}

impl<T: Send + Sync + 'static> Parts<T> {
    /// A producer of the session; an exactly-once one with its id and the
    /// lane it holds until it is destroyed.
    pub(super) fn producer(
        &self,
        transactional: Option<(&Arc<TransactionalId>, transaction::LanePermit)>,
    ) -> Result<Polled<DeliveryContext<T>>> {
        let (config, lane, transactional_id) = match transactional {
            Some((id, lane)) => (transaction::config(&self.config, id), Some(lane), Some(id)),
            None => (self.config.clone(), None, None),
        };
        let context = DeliveryContext {
            deliveries: self.deliveries.clone(),
            metrics: self.metrics.clone(),
            repeats: Mutex::default(),
            fatal: self.fatal.clone(),
            login: LoginAdvice::new(&config),
            refused_id: Mutex::new(None),
            transactional_id: transactional_id.cloned(),
            retired: AtomicBool::new(false),
            _lane: lane,
        };
        super::factory::producer(&config, context)
    }
}

impl<'a, T: Send + Sync + 'static> KafkaSink<'a, T> {
    /// A producer and a topic manager for one session: per session, so a
    /// topic deleted under a running relay is created again. A refused
    /// login is reported on `fatal`.
    pub fn new(
        config: &ClientConfig,
        policy: &'a TopicPolicy,
        metrics: Metrics,
        fatal: mpsc::Sender<Error>,
    ) -> Result<Self> {
        let (tx, rx) = mpsc::unbounded_channel();
        // One batch.size for every topic, whatever their limits: a topic
        // whose limit is below it has its records sent alone instead
        // (TopicManager::fit_batches).
        let batch_size = config
            .get("batch.size")
            .and_then(|v| v.parse().ok())
            .unwrap_or(DEFAULT_BATCH_SIZE);
        let parts = Parts {
            config: config.clone(),
            deliveries: tx,
            metrics: metrics.clone(),
            fatal,
        };
        let producer = parts.producer(None)?;
        debug!(batch_size, "created the Kafka producer of the session");
        warm_up(producer.clone());
        let topics = TopicManager::new(&parts.config, policy, metrics.clone(), batch_size)?;
        let brokers = parts
            .config
            .get("bootstrap.servers")
            .unwrap_or_default()
            .to_string();
        Ok(KafkaSink {
            handles: TopicHandles::new(producer.clone()),
            producer,
            deliveries: rx,
            _probe: reachability::watch(topics.admin(), brokers, metrics),
            topics,
            parts,
            transaction: None,
        })
    }
}

/// The opaque of a record of walrelay's own: no ticket, no delivery report.
pub(super) fn own_record<T>() -> Box<InFlight<T>> {
    Box::new(InFlight {
        ticket: None,
        sent_at: Instant::now(),
    })
}

impl<T: Send + Sync + 'static> Drop for KafkaSink<'_, T> {
    fn drop(&mut self) {
        // A later session fences this producer; that is no reason to stop.
        self.producer
            .context()
            .retired
            .store(true, Ordering::Relaxed);
    }
}

/// Gets the idempotent producer its id now rather than in a second.
///
/// librdkafka asks for the producer id when a metadata response finds a
/// broker connected, or else on a 500 ms timer. A new producer learns the
/// broker from the bootstrap connection, which it then drops, so without
/// help the id comes one or two timer rounds later and no record can be
/// sent until then (measured: the first acknowledgement after a restart took
/// about 1.07 s). A second metadata request connects to the broker itself,
/// and its response finds it connected. Best effort, off the async runtime.
fn warm_up<T: Send + Sync + 'static>(producer: Polled<DeliveryContext<T>>) {
    const WAIT: std::time::Duration = std::time::Duration::from_secs(5);
    let spawned = std::thread::Builder::new()
        .name("walrelay-kafka-warm-up".into())
        .spawn(move || {
            for _ in 0..2 {
                if producer.client().fetch_metadata(None, WAIT).is_err() {
                    return;
                }
            }
        });
    if let Err(e) = spawned {
        warn!(error = %e, "cannot start the Kafka producer's warm-up; the first record may wait up to a second");
    }
}

impl<T: Send + Sync + 'static> Sink<T> for KafkaSink<'_, T> {
    async fn open_topic(&mut self, topic: &str) -> Result<TopicAccess> {
        self.topics.ensure(topic).await
    }

    async fn open_dead_letter_topic(&mut self) -> Result<TopicInfo> {
        self.topics.ensure_dead_letter().await
    }

    async fn partition_count(&mut self, topic: &str) -> Result<Option<usize>> {
        self.topics.partition_count(topic).await
    }

    fn send(
        &mut self,
        record: &Record<'_>,
        ticket: T,
        now: Instant,
    ) -> std::result::Result<(), SendError<T>> {
        if let Err(refusal) = self.begin() {
            return Err(SendError::Refused(refusal));
        }
        let in_flight = Box::new(InFlight {
            ticket: Some(ticket),
            sent_at: now,
        });
        match self.handles.produce(record, in_flight) {
            Ok(()) => Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), in_flight)) => {
                let ticket = in_flight.ticket.expect("an event's record has a ticket");
                Err(SendError::Full(ticket))
            }
            Err((e, _)) => Err(SendError::Refused(
                self.producer.context().refusal(&e, record.partition),
            )),
        }
    }

    async fn delivery(&mut self) -> Option<Delivery<T>> {
        self.deliveries.recv().await
    }

    fn try_delivery(&mut self) -> Option<Delivery<T>> {
        self.deliveries.try_recv().ok()
    }

    fn transactional(&self) -> bool {
        self.transaction.is_some()
    }

    fn commit(&mut self, lsn: Lsn) -> Closing {
        self.commit_transaction(lsn)
    }

    fn abort(&mut self) -> Closing {
        self.abort_transaction()
    }
}

#[cfg(test)]
mod tests {
    use super::Repeats;
    use std::time::{Duration, Instant};

    #[test]
    fn a_repeated_client_error_is_logged_once_a_minute_with_its_count() {
        let mut repeats = Repeats::default();
        let t0 = Instant::now();
        assert_eq!(repeats.seen("down", t0), Some(0));
        for s in 1..=12 {
            assert_eq!(repeats.seen("down", t0 + Duration::from_secs(s)), None);
        }
        assert_eq!(repeats.seen("down", t0 + Duration::from_secs(61)), Some(12));
        // Two kinds taking turns are each logged once, too.
        assert_eq!(repeats.seen("other", t0 + Duration::from_secs(62)), Some(0));
        assert_eq!(repeats.seen("down", t0 + Duration::from_secs(63)), None);
        assert_eq!(repeats.seen("other", t0 + Duration::from_secs(64)), None);
    }
}
