//! The topics walrelay produces to: which routed topics it may use, creating
//! them (within a budget) or finding them, and each topic's size limit.
//! Production clusters usually disable auto-creation; a writer bug that puts
//! an id into the route-by column must not create a topic per row, so
//! creation can be turned off, limited to an allow-list and capped per minute.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::RDKafkaErrorCode;
use regex::Regex;
use tracing::{info, warn};

use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::sink::{TopicAccess, TopicInfo};

const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);
/// A topic found missing is looked up again after this long, so one created
/// by an operator is used without a restart.
const MISSING_TTL: Duration = Duration::from_secs(30);
const MINUTE: Duration = Duration::from_secs(60);
/// Reading a topic's configuration is an optional check: do not wait long.
/// A topic described with no entries is asked again this often, this many
/// times in all.
const DESCRIBE_ATTEMPTS: u32 = 6;
const DESCRIBE_RETRY: Duration = Duration::from_millis(200);
const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The operator's rules for topics, shared by every session.
pub struct TopicPolicy {
    /// Create missing topics (`--topic-create`); otherwise a missing topic is poison.
    pub create: bool,
    /// Routed topics must match it whole (`--topic-allow-regex`).
    pub allow: Option<Regex>,
    /// Topics walrelay creates per minute at most; 0 for no cap.
    pub max_created_per_minute: u32,
    pub partitions: i32,
    /// None asks the broker for its default (KIP-464).
    pub replication_factor: Option<i32>,
    pub dead_letter_topic: String,
    /// `max.message.bytes` of the dead-letter topic walrelay creates.
    pub dead_letter_max_message_bytes: usize,
    /// Records are compressed: the broker checks the compressed size, so a
    /// record over a topic's limit before compression may still fit.
    pub compressed: bool,
    /// When walrelay created topics in the last minute; outlives sessions.
    pub created: CreationLog,
}

/// What a broker accepts unless a topic says otherwise (Kafka's default
/// `message.max.bytes`), assumed for a topic whose configuration cannot be read.
pub const DEFAULT_TOPIC_LIMIT: usize = 1_048_588;
/// librdkafka's default `batch.size`.
pub const DEFAULT_BATCH_SIZE: usize = 1_000_000;
/// Room between a batch and a topic's limit for the batch's own framing.
const BATCH_MARGIN: usize = 1024;

/// Whether the producer's batches (`batch.size`) may outgrow a topic's
/// `max.message.bytes`: the broker would refuse such a batch whole.
fn batches_outgrow(limit: usize, batch_size: usize) -> bool {
    batch_size.saturating_add(BATCH_MARGIN) > limit
}

/// When walrelay created topics in the last minute.
#[derive(Debug, Default)]
pub struct CreationLog(Mutex<VecDeque<Instant>>);

impl TopicPolicy {
    /// Takes one creation from this minute's budget, or says why not.
    fn take_creation(&self, topic: &str) -> std::result::Result<(), String> {
        if self.max_created_per_minute == 0 {
            return Ok(());
        }
        let mut created = self.created.0.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        while created
            .front()
            .is_some_and(|t| now.duration_since(*t) >= MINUTE)
        {
            created.pop_front();
        }
        if created.len() >= self.max_created_per_minute as usize {
            return Err(format!(
                "creating topic {topic} would exceed --topic-create-max-per-minute ({}): is a \
                 writer putting ids into the route-by column? Create the topic yourself, or \
                 raise the cap",
                self.max_created_per_minute
            ));
        }
        created.push_back(now);
        Ok(())
    }
}

/// Topics for one session: per session, so a topic deleted under a running
/// relay is created (or found missing) again.
pub struct TopicManager<'a> {
    /// Shared with the blocking metadata lookups.
    admin: Arc<AdminClient<DefaultClientContext>>,
    policy: &'a TopicPolicy,
    metrics: Metrics,
    known: HashMap<String, TopicInfo>,
    missing: HashMap<String, Instant>,
    /// The broker did not answer DescribeConfigs: do not ask again this session.
    cannot_describe: bool,
    /// The session's producer's batch.size.
    batch_size: usize,
    /// For the ACL commands in permission errors.
    principal: String,
}

impl<'a> TopicManager<'a> {
    pub fn new(
        config: &ClientConfig,
        policy: &'a TopicPolicy,
        metrics: Metrics,
        batch_size: usize,
    ) -> Result<Self> {
        Ok(TopicManager {
            admin: super::factory::admin_client(config)?,
            policy,
            metrics,
            known: HashMap::new(),
            missing: HashMap::new(),
            cannot_describe: false,
            batch_size,
            principal: super::principal(config),
        })
    }

    /// The admin client, for the broker probe (kafka::reachability).
    pub fn admin(&self) -> Arc<AdminClient<DefaultClientContext>> {
        self.admin.clone()
    }

    /// Makes sure a routed topic may be used and exists. Cheap after the first
    /// call for a topic.
    pub async fn ensure(&mut self, topic: &str) -> Result<TopicAccess> {
        if let Some(info) = self.known.get(topic) {
            return Ok(TopicAccess::Open(*info));
        }
        if let Some(allow) = &self.policy.allow {
            if !allow.is_match(topic) {
                return Ok(TopicAccess::Closed(format!(
                    "topic {topic} does not match --topic-allow-regex {:?}",
                    allow.as_str()
                )));
            }
        }
        if let Some(since) = self.missing.get(topic) {
            if since.elapsed() < MISSING_TTL {
                return Ok(TopicAccess::Closed(missing_reason(topic)));
            }
        }
        if self.partition_count(topic).await?.is_none() {
            if !self.policy.create {
                self.missing.insert(topic.to_string(), Instant::now());
                return Ok(TopicAccess::Closed(missing_reason(topic)));
            }
            if let Err(reason) = self.policy.take_creation(topic) {
                return Ok(TopicAccess::Closed(reason));
            }
            self.create(topic, &[]).await?;
        }
        self.missing.remove(topic);
        let mut info = self.describe(topic).await;
        self.fit_batches(topic, &mut info);
        self.known.insert(topic.to_string(), info);
        Ok(TopicAccess::Open(info))
    }

    /// A topic whose limit is below the producer's batches would have whole
    /// batches of good records refused. librdkafka's `batch.size` is one for
    /// all topics, so shrinking it would slow every other topic: instead
    /// each record to this topic is sent alone, in a batch of its own, and
    /// only this topic's records pay for it.
    fn fit_batches(&self, topic: &str, info: &mut TopicInfo) {
        let Some(limit) = info.max_record_bytes.filter(|_| !info.assumed) else {
            return;
        };
        if !batches_outgrow(limit, self.batch_size) {
            return;
        }
        info.send_alone = true;
        // Once per topic and session: `known` keeps the verdict.
        warn!(
            topic,
            max_message_bytes = limit,
            batch_size = self.batch_size,
            "topic accepts smaller batches (max.message.bytes) than the producer's batch.size: \
             each record to it is sent alone, so that a batch of it is never refused for size; \
             other topics keep their batches. Raise the topic's max.message.bytes above \
             batch.size if it carries many events"
        );
    }

    /// The dead-letter topic, created with room for large events. Exempt from
    /// the allow-list and the budget: the operator named it.
    pub async fn ensure_dead_letter(&mut self) -> Result<TopicInfo> {
        let topic = self.policy.dead_letter_topic.clone();
        if let Some(info) = self.known.get(&topic) {
            return Ok(*info);
        }
        if self.partition_count(&topic).await?.is_none() {
            if !self.policy.create {
                return Err(Error::permanent(format!(
                    "the dead-letter topic {topic} does not exist and --topic-create is false: \
                     create it (with max.message.bytes of at least --dead-letter-max-message-bytes)"
                )));
            }
            let limit = self.policy.dead_letter_max_message_bytes.to_string();
            self.create(&topic, &[("max.message.bytes", &limit)])
                .await?;
        }
        let mut info = self.describe(&topic).await;
        // Unknown (the broker does not say): assume the limit walrelay
        // creates it with, so a copy is refused here rather than lost later,
        // and taken as known, so copies travel alone if batches outgrow it.
        if info.assumed {
            info.max_record_bytes = Some(self.policy.dead_letter_max_message_bytes);
            info.assumed = false;
        }
        self.fit_batches(&topic, &mut info);
        self.known.insert(topic, info);
        Ok(info)
    }

    async fn create(&mut self, topic: &str, config: &[(&str, &str)]) -> Result<()> {
        let mut new_topic = NewTopic::new(
            topic,
            self.policy.partitions,
            TopicReplication::Fixed(self.policy.replication_factor.unwrap_or(-1)),
        );
        for (key, value) in config {
            new_topic = new_topic.set(key, value);
        }
        let options = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT));
        let results = self
            .admin
            .create_topics([&new_topic], &options)
            .await
            .map_err(|e| {
                Error::transient(format!("cannot reach Kafka to create topic {topic}"))
                    .with_source(e)
            })?;
        for result in results {
            match result {
                Ok(_) => {
                    info!(topic, partitions = self.policy.partitions, "created topic");
                    self.metrics.record_topic_created();
                }
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((_, code))
                    if matches!(
                        code,
                        RDKafkaErrorCode::TopicAuthorizationFailed
                            | RDKafkaErrorCode::ClusterAuthorizationFailed
                    ) =>
                {
                    return Err(Error::permanent(format!(
                        "topic {topic} does not exist and walrelay may not create it ({code}): \
                         create the topic, or grant walrelay's principal CREATE on it ({}; \
                         with --resource-pattern-type prefixed and the topics' common prefix \
                         it covers every routed topic) or on the cluster",
                        super::grant_command(
                            &self.principal,
                            "Create",
                            &format!("--topic {topic}")
                        )
                    )));
                }
                Err((_, code))
                    if matches!(
                        code,
                        RDKafkaErrorCode::InvalidReplicationFactor
                            | RDKafkaErrorCode::InvalidPartitions
                            | RDKafkaErrorCode::PolicyViolation
                            | RDKafkaErrorCode::InvalidConfig
                    ) =>
                {
                    return Err(Error::permanent(format!(
                        "Kafka refused to create topic {topic} ({code}): adjust \
                         --topic-partitions / --topic-replication-factor \
                         (/ --dead-letter-max-message-bytes), or create the topic yourself"
                    )));
                }
                Err((_, code)) => {
                    return Err(Error::transient(format!(
                        "Kafka could not create topic {topic}: {code}"
                    )))
                }
            }
        }
        Ok(())
    }

    /// The topic's partition count from fresh metadata, or None if it does
    /// not exist.
    pub async fn partition_count(&self, topic: &str) -> Result<Option<usize>> {
        // fetch_metadata blocks; it runs once per topic and session. On a
        // thread of its own, not in place: a fatal error (a refused login,
        // which makes it wait out its timeout) must be able to stop walrelay
        // meanwhile.
        let admin = self.admin.clone();
        let wanted = topic.to_string();
        let metadata = tokio::task::spawn_blocking(move || {
            admin.inner().fetch_metadata(Some(&wanted), ADMIN_TIMEOUT)
        })
        .await
        .map_err(|e| Error::transient(format!("the metadata lookup of topic {topic} failed: {e}")))?
        .map_err(|e| {
            Error::transient(format!("cannot read metadata of topic {topic}")).with_source(e)
        })?;
        let Some(found) = metadata.topics().iter().find(|t| t.name() == topic) else {
            return Ok(None);
        };
        // A topic walrelay may not describe is not a missing one: taking it
        // for missing would dead-letter every event routed there.
        if found.error()
            == Some(rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED)
        {
            return Err(Error::permanent(format!(
                "walrelay may not describe topic {topic} (TopicAuthorizationFailed): this is a \
                 permission problem, not the event (nor a missing topic: Kafka answers so for a \
                 topic it hides), so walrelay stopped and the slot stays before it; grant \
                 walrelay's principal DESCRIBE and WRITE on the topic ({}) and restart",
                super::grant_command(
                    &self.principal,
                    "Describe --operation Write",
                    &format!("--topic {topic}")
                )
            )));
        }
        Ok((found.error().is_none() && !found.partitions().is_empty())
            .then(|| found.partitions().len()))
    }

    /// The topic's `max.message.bytes`, or the broker default's, marked
    /// assumed, when the broker does not say (then a record over it is sent
    /// alone and the broker judges it).
    async fn describe(&mut self, topic: &str) -> TopicInfo {
        let assumed = TopicInfo {
            max_record_bytes: Some(DEFAULT_TOPIC_LIMIT),
            assumed: true,
            send_alone: false,
        };
        if self.cannot_describe {
            return assumed;
        }
        // A topic created a moment ago may not be described yet by the
        // broker that answers (Apache Kafka answers with no entries until
        // its metadata caught up): only repeated silence means refused.
        let mut limit = None;
        for attempt in 1..=DESCRIBE_ATTEMPTS {
            match self.max_message_bytes(topic).await {
                Ok(Some(found)) => {
                    limit = Some(found);
                    break;
                }
                Ok(None) if attempt < DESCRIBE_ATTEMPTS => {
                    tokio::time::sleep(DESCRIBE_RETRY).await;
                }
                Ok(None) => {}
                Err(e) => {
                    warn!(
                        topic,
                        error = %e,
                        assumed = DEFAULT_TOPIC_LIMIT,
                        "cannot read topics' max.message.bytes (grant DESCRIBE_CONFIGS); \
                         assuming the broker's default this session: a record over it is sent \
                         alone, so that a refusal is its own"
                    );
                    self.cannot_describe = true;
                    return assumed;
                }
            }
        }
        match limit {
            Some(limit) => TopicInfo {
                max_record_bytes: Some(limit),
                assumed: false,
                send_alone: false,
            },
            None => {
                warn!(
                    topic,
                    assumed = DEFAULT_TOPIC_LIMIT,
                    attempts = DESCRIBE_ATTEMPTS,
                    "Kafka described no configuration for this topic, asked again for a \
                     second (DESCRIBE_CONFIGS not granted on it?); assuming the broker's \
                     default max.message.bytes: a record over it is sent alone, so that a \
                     refusal is its own"
                );
                assumed
            }
        }
    }

    /// One DescribeConfigs request: the topic's `max.message.bytes`, or None
    /// when the broker gave no entries for it.
    async fn max_message_bytes(
        &self,
        topic: &str,
    ) -> std::result::Result<Option<usize>, rdkafka::error::KafkaError> {
        let options = AdminOptions::new().request_timeout(Some(DESCRIBE_TIMEOUT));
        let results = self
            .admin
            .describe_configs([&ResourceSpecifier::Topic(topic)], &options)
            .await?;
        // rust-rdkafka drops a resource's own error (DESCRIBE_CONFIGS not
        // granted on this topic) and hands back no entries; a topic Kafka
        // describes always has max.message.bytes, so none means refused or
        // not yet known.
        Ok(results
            .into_iter()
            .flatten()
            .find_map(|config| config.get("max.message.bytes")?.value.clone())
            .and_then(|value| value.parse::<usize>().ok()))
    }
}

fn missing_reason(topic: &str) -> String {
    format!(
        "topic {topic} does not exist and --topic-create is false: create the topic, or \
         route the event elsewhere"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(cap: u32) -> TopicPolicy {
        TopicPolicy {
            create: true,
            allow: None,
            max_created_per_minute: cap,
            partitions: 1,
            replication_factor: None,
            dead_letter_topic: "dlq".into(),
            dead_letter_max_message_bytes: 1 << 20,
            compressed: false,
            created: CreationLog::default(),
        }
    }

    #[test]
    fn creations_past_the_cap_are_refused_until_a_minute_has_passed() {
        let p = policy(2);
        assert!(p.take_creation("a").is_ok());
        assert!(p.take_creation("b").is_ok());
        let err = p.take_creation("c").unwrap_err();
        assert!(err.contains("--topic-create-max-per-minute (2)"), "{err}");
        // Age the window as if a minute had passed.
        for t in p.created.0.lock().unwrap().iter_mut() {
            *t -= MINUTE;
        }
        assert!(p.take_creation("c").is_ok());
        assert!(policy(0).take_creation("x").is_ok());
    }

    #[test]
    fn only_a_topic_whose_limit_is_below_the_batches_and_their_framing_is_outgrown() {
        assert!(batches_outgrow(2000, DEFAULT_BATCH_SIZE));
        assert!(batches_outgrow(DEFAULT_BATCH_SIZE, DEFAULT_BATCH_SIZE));
        assert!(!batches_outgrow(DEFAULT_TOPIC_LIMIT, DEFAULT_BATCH_SIZE));
        assert!(!batches_outgrow(2000, 2000 - BATCH_MARGIN));
    }
}
