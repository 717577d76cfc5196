//! The Kafka side of `walrelay check`, with the client configuration `run`
//! uses (the same -X properties), so a SASL or TLS mistake shows here.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::metadata::Metadata;
use rdkafka::producer::{BaseProducer, Producer as _, ProducerContext};
use rdkafka::statistics::Statistics;
use rdkafka::types::RDKafkaRespErr;

use super::Check;
use crate::config::{OnPoison, Settings};
use crate::kafka::client::LoginWatch;
use crate::kafka::factory;
use crate::kafka::login::LoginFailure;
use crate::kafka::secrets;

const TIMEOUT: Duration = Duration::from_secs(10);

pub async fn checks(settings: &Settings) -> Vec<Check> {
    let mut out = Vec::new();
    let mut config = settings.kafka.clone();
    // A metadata request for a topic must never create it.
    config.set("allow.auto.create.topics", "false");
    let admin = match factory::admin(&config) {
        Ok(admin) => admin,
        Err(e) => {
            out.push(Check::fail(
                "kafka.brokers",
                format!(
                    "cannot create a Kafka client: {}",
                    secrets::describe(&e, &config)
                ),
                "fix the -X properties (names and values as in librdkafka's CONFIGURATION.md)",
            ));
            return out;
        }
    };

    let metadata = {
        let admin = admin.clone();
        tokio::task::spawn_blocking(move || admin.inner().fetch_metadata(None, TIMEOUT)).await
    };
    let metadata = match metadata {
        Ok(Ok(m)) if !m.brokers().is_empty() => m,
        Ok(Ok(_)) | Ok(Err(_)) | Err(_) => {
            // A refused login shows here as a transport failure or a
            // timeout, without its reason.
            let probe = config.clone();
            let refused = tokio::task::spawn_blocking(move || login_refusal(&probe)).await;
            if let Ok(Some((reason, failure))) = refused {
                out.push(login_check(
                    &config,
                    &settings.kafka_brokers,
                    &reason,
                    failure,
                ));
                skip_after_brokers(&mut out);
                return out;
            }
            let reason = match metadata {
                Ok(Err(e)) => secrets::describe(&e, &config),
                _ => "no broker answered".into(),
            };
            let mut fix = String::from(
                "check --kafka-brokers, the network path, and -X security.protocol / sasl.* / \
                 ssl.* against the listener's settings",
            );
            if let Some(url) = token_endpoint(&config) {
                // A provider that answers 5xx is asked again for about a
                // minute before librdkafka gives up: longer than the check waits.
                fix.push_str(&format!(
                    "; walrelay gets its OAUTHBEARER token from {url}: check that it answers"
                ));
            }
            out.push(Check::fail(
                "kafka.brokers",
                format!(
                    "no metadata from {} within {TIMEOUT:?}: {reason}",
                    settings.kafka_brokers
                ),
                fix,
            ));
            skip_after_brokers(&mut out);
            return out;
        }
    };
    let brokers: Vec<String> = metadata
        .brokers()
        .iter()
        .map(|b| format!("{}@{}:{}", b.id(), b.host(), b.port()))
        .collect();
    out.push(Check::pass(
        "kafka.brokers",
        format!(
            "{} broker(s): {}; {} topic(s) visible",
            brokers.len(),
            brokers.join(", "),
            metadata.topics().len()
        ),
    ));

    let probe = probe_topic(settings);
    let (describe, probe_existed) = describe_topics(&admin, &probe).await;
    out.push(describe);
    let mut create = create_topics(&admin, &probe, settings).await;
    if !probe_existed && create.status == super::Status::Pass {
        undo_ignored_validate_only(&admin, &probe, &mut create).await;
    }
    out.push(create);
    let producer_config = config.clone();
    out.push(
        tokio::task::spawn_blocking(move || idempotent_write(&producer_config))
            .await
            .unwrap_or_else(|e| {
                Check::fail(
                    "kafka.idempotent_write",
                    format!("the check did not finish: {e}"),
                    "run walrelay check again; report a bug if it persists",
                )
            }),
    );
    out.push(transactions(settings).await);
    out.push(topics(&admin, &metadata, settings).await);
    let routed = route_pattern(settings.router.replacement());
    out.push(super::durability::check(&admin, &metadata, settings, &routed, TIMEOUT).await);
    out
}

/// A failed login: the broker refused it, or with OAUTHBEARER OIDC the
/// identity provider gave no token, named by its token endpoint.
fn login_check(config: &ClientConfig, brokers: &str, reason: &str, failure: LoginFailure) -> Check {
    let reason = secrets::mask(reason, config);
    let detail = match token_endpoint(config) {
        Some(url) if failure == LoginFailure::NoToken => {
            format!("the token endpoint {url} gave walrelay no OAUTHBEARER token ({reason})")
        }
        _ => failure.describe(brokers, &reason),
    };
    Check::fail("kafka.brokers", detail, failure.fix())
}

/// The identity provider's token endpoint, with OAUTHBEARER OIDC; without
/// the password of its user info.
fn token_endpoint(config: &ClientConfig) -> Option<String> {
    let method = config.get("sasl.oauthbearer.method")?;
    let url = config.get("sasl.oauthbearer.token.endpoint.url")?;
    method
        .eq_ignore_ascii_case("oidc")
        .then(|| secrets::mask(url, config))
}

/// librdkafka's reason for refusing a login with `config`, if it does, and
/// which failure it is: a producer that is polled (the admin client's
/// errors reach no context) logs in at once to get its producer id.
fn login_refusal(config: &ClientConfig) -> Option<(String, LoginFailure)> {
    let producer: BaseProducer<LoginWatch> =
        factory::probe_producer(config, LoginWatch::new(config)).ok()?;
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        producer.poll(Duration::from_millis(100));
        if let Some(reason) = producer.context().refused() {
            let failure = producer.context().failure(&reason);
            return Some((reason, failure));
        }
    }
    None
}

/// The checks that need a broker that answers.
fn skip_after_brokers(out: &mut Vec<Check>) {
    for name in [
        "kafka.describe_topics",
        "kafka.create_topics",
        "kafka.idempotent_write",
        "kafka.transactions",
        "kafka.topics",
        "kafka.durability",
    ] {
        out.push(Check::skip(name, "needs a reachable broker"));
    }
}

/// With --delivery exactly-once, the probe `run` makes before it creates
/// anything: the broker runs transactions, and the position topic exists
/// (created, as `run` would, if missing).
async fn transactions(settings: &Settings) -> Check {
    let Some(eos) = &settings.exactly_once else {
        return Check::skip("kafka.transactions", "--delivery at-least-once uses none");
    };
    let deadline = tokio::time::Instant::now() + 3 * TIMEOUT;
    let probed = crate::kafka::transaction::probe(
        &settings.kafka,
        &eos.position_topic,
        settings.topics.replication_factor,
        &settings.slot,
        deadline,
    )
    .await;
    match probed {
        Ok(()) => Check::pass(
            "kafka.transactions",
            format!(
                "the broker committed a transaction; position topic {} is ready",
                eos.position_topic
            ),
        ),
        Err(e) => Check::from_error("kafka.transactions", &e),
    }
}

/// A topic name walrelay's routing could produce, so ACLs on its prefix apply.
fn probe_topic(settings: &Settings) -> String {
    settings
        .router
        .topic("WalrelayCheck")
        .unwrap_or_else(|_| "walrelay.check".into())
}

/// Describing a missing topic is answered with "unknown topic" when allowed
/// and "authorization failed" when not.
/// Also says whether the topic exists.
async fn describe_topics(
    admin: &Arc<AdminClient<DefaultClientContext>>,
    probe: &str,
) -> (Check, bool) {
    let result = topic_metadata(admin, probe).await;
    let exists = matches!(&result, Ok(Ok(m)) if m.topics().first()
        .is_some_and(|t| t.error().is_none() && !t.partitions().is_empty()));
    (describe_check(result, probe), exists)
}

async fn topic_metadata(
    admin: &Arc<AdminClient<DefaultClientContext>>,
    topic: &str,
) -> Result<rdkafka::error::KafkaResult<Metadata>, tokio::task::JoinError> {
    let admin = admin.clone();
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || admin.inner().fetch_metadata(Some(&topic), TIMEOUT)).await
}

fn describe_check(
    result: Result<rdkafka::error::KafkaResult<Metadata>, tokio::task::JoinError>,
    probe: &str,
) -> Check {
    let error = match &result {
        Ok(Ok(m)) => m.topics().first().and_then(|t| t.error()),
        Ok(Err(KafkaError::MetadataFetch(code))) => Some(code_to_resp(*code)),
        _ => None,
    };
    match (result, error) {
        (_, Some(RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED)) => Check::fail(
            "kafka.describe_topics",
            format!("the broker refuses to describe topic {probe}"),
            "grant walrelay's principal DESCRIBE on the topics it routes to (e.g. kafka-acls \
             --add --allow-principal User:walrelay --operation Describe --topic outbox.event. \
             --resource-pattern-type prefixed)",
        ),
        (Ok(Ok(_)), _) => Check::pass(
            "kafka.describe_topics",
            format!("may describe topics (asked for {probe})"),
        ),
        (Ok(Err(e)), _) => Check::fail(
            "kafka.describe_topics",
            format!("describing topic {probe} failed: {e}"),
            "check the broker's log and walrelay's principal's ACLs",
        ),
        (Err(e), _) => Check::fail(
            "kafka.describe_topics",
            format!("the check did not finish: {e}"),
            "run walrelay check again",
        ),
    }
}

/// Some brokers (tansu 0.6) create the topic despite validate_only: a
/// pre-flight must leave nothing behind, so the probe topic is deleted.
async fn undo_ignored_validate_only(
    admin: &Arc<AdminClient<DefaultClientContext>>,
    probe: &str,
    check: &mut Check,
) {
    let created = matches!(topic_metadata(admin, probe).await, Ok(Ok(m)) if m.topics().first()
        .is_some_and(|t| t.error().is_none() && !t.partitions().is_empty()));
    if !created {
        return;
    }
    let options = AdminOptions::new().operation_timeout(Some(TIMEOUT));
    let deleted = admin.delete_topics(&[probe], &options).await;
    if matches!(deleted.as_deref(), Ok([Ok(_)])) {
        check.detail.push_str(&format!(
            "; the broker ignored validate_only and created {probe}, which was deleted again"
        ));
    } else {
        *check = Check::warn(
            "kafka.create_topics",
            format!(
                "may create topics, but the broker ignored validate_only and created {probe},                  which could not be deleted"
            ),
            format!("delete topic {probe} (kafka-topics --delete --topic {probe})"),
        );
    }
}

fn code_to_resp(code: RDKafkaErrorCode) -> RDKafkaRespErr {
    match code {
        RDKafkaErrorCode::TopicAuthorizationFailed => {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED
        }
        _ => RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN,
    }
}

/// CreateTopics with validate_only: the broker checks the request and the
/// principal's right without creating anything.
async fn create_topics(
    admin: &AdminClient<DefaultClientContext>,
    probe: &str,
    settings: &Settings,
) -> Check {
    let policy = &settings.topics;
    let topic = NewTopic::new(
        probe,
        policy.partitions,
        TopicReplication::Fixed(policy.replication_factor.unwrap_or(-1)),
    );
    let options = AdminOptions::new()
        .validate_only(true)
        .operation_timeout(Some(TIMEOUT))
        .request_timeout(Some(TIMEOUT));
    let results = admin.create_topics([&topic], &options).await;
    let detail = format!(
        "may create topics ({probe}: {} partitions, replication factor {}, validated only)",
        policy.partitions,
        policy
            .replication_factor
            .map_or("the broker's default".to_string(), |r| r.to_string())
    );
    match results.as_deref() {
        Ok([Ok(_)]) | Ok([Err((_, RDKafkaErrorCode::TopicAlreadyExists))]) => {
            Check::pass("kafka.create_topics", detail)
        }
        Ok([Err((_, code))])
            if matches!(
                code,
                RDKafkaErrorCode::TopicAuthorizationFailed
                    | RDKafkaErrorCode::ClusterAuthorizationFailed
            ) =>
        {
            Check::fail(
                "kafka.create_topics",
                format!("the broker refuses to create topic {probe}: {code}"),
                "grant walrelay's principal CREATE on the cluster (or on the topic prefix), or \
                 create every topic walrelay routes to before it starts",
            )
        }
        Ok([Err((_, code))]) => Check::fail(
            "kafka.create_topics",
            format!("the broker rejects topic {probe} as walrelay would create it: {code}"),
            "adjust --topic-partitions / --topic-replication-factor to what the cluster allows",
        ),
        Ok(other) => Check::fail(
            "kafka.create_topics",
            format!("unexpected answer to CreateTopics: {other:?}"),
            "check the broker's log",
        ),
        Err(e) => Check::fail(
            "kafka.create_topics",
            format!("CreateTopics failed: {e}"),
            "check the broker's log and walrelay's principal's ACLs",
        ),
    }
}

/// librdkafka's statistics report the idempotent producer's state; an
/// assigned producer id means InitProducerId succeeded.
#[derive(Default)]
struct IdempotenceWatch {
    state: Mutex<(Option<String>, Option<String>)>,
}

impl ClientContext for IdempotenceWatch {
    crate::kafka::msk_iam::oauth_token_hook!();

    fn stats(&self, statistics: Statistics) {
        if let Some(eos) = statistics.eos {
            self.state.lock().expect("not poisoned").0 = Some(eos.idemp_state);
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.state.lock().expect("not poisoned").1 = Some(format!("{error}: {reason}"));
    }
}

impl ProducerContext for IdempotenceWatch {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &rdkafka::message::DeliveryResult<'_>, _: ()) {}
}

fn idempotent_write(config: &ClientConfig) -> Check {
    let mut config = config.clone();
    config.set("statistics.interval.ms", "100");
    let producer: BaseProducer<IdempotenceWatch> =
        match factory::probe_producer(&config, IdempotenceWatch::default()) {
            Ok(p) => p,
            Err(e) => {
                return Check::fail(
                    "kafka.idempotent_write",
                    format!(
                        "cannot create the idempotent producer: {}",
                        secrets::describe(&e, &config)
                    ),
                    "fix the -X properties",
                )
            }
        };
    let deadline = Instant::now() + TIMEOUT;
    let mut last_state = None;
    while Instant::now() < deadline {
        producer.poll(Duration::from_millis(100));
        if let Some((code, reason)) = producer.client().fatal_error() {
            return Check::fail(
                "kafka.idempotent_write",
                format!("the broker refused a producer id (InitProducerId): {code}: {reason}"),
                "grant walrelay's principal IDEMPOTENT_WRITE on the cluster (needed before Kafka \
                 3.0; WRITE on the topics suffices later)",
            );
        }
        let state = producer
            .context()
            .state
            .lock()
            .expect("not poisoned")
            .0
            .clone();
        if state.as_deref() == Some("Assigned") {
            return Check::pass(
                "kafka.idempotent_write",
                "an idempotent producer got its producer id (InitProducerId)",
            );
        }
        last_state = state;
    }
    let error = producer
        .context()
        .state
        .lock()
        .expect("not poisoned")
        .1
        .clone();
    Check::fail(
        "kafka.idempotent_write",
        format!(
            "no producer id within {TIMEOUT:?} (idempotence state {}{})",
            last_state.as_deref().unwrap_or("unknown"),
            error.map(|e| format!("; {e}")).unwrap_or_default()
        ),
        "walrelay needs enable.idempotence: check the broker supports it (Kafka 0.11+) and \
         grants walrelay's principal IDEMPOTENT_WRITE (before Kafka 3.0)",
    )
}

/// Existing topics walrelay routes to: their partitions and max.message.bytes.
async fn topics(
    admin: &AdminClient<DefaultClientContext>,
    metadata: &Metadata,
    settings: &Settings,
) -> Check {
    let replacement = settings.router.replacement();
    let pattern = route_pattern(replacement);
    let mut names: Vec<(String, usize)> = metadata
        .topics()
        .iter()
        .filter(|t| {
            pattern.is_match(t.name())
                || (settings.on_poison == OnPoison::DeadLetter
                    && t.name() == settings.dead_letter_topic())
        })
        .map(|t| (t.name().to_string(), t.partitions().len()))
        .collect();
    names.sort();
    if names.is_empty() {
        return Check::pass(
            "kafka.topics",
            format!(
                "no topic matching {} exists yet; walrelay creates them with {} partitions",
                replacement, settings.topics.partitions
            ),
        );
    }
    let limit = settings.event_max_bytes as i64;
    let specifiers: Vec<ResourceSpecifier<'_>> = names
        .iter()
        .map(|(n, _)| ResourceSpecifier::Topic(n))
        .collect();
    let options = AdminOptions::new().request_timeout(Some(TIMEOUT));
    let configs = match admin.describe_configs(&specifiers, &options).await {
        Ok(c) => c,
        Err(e) => {
            return Check::fail(
                "kafka.topics",
                format!(
                    "cannot describe the configs of {} topic(s): {e}",
                    names.len()
                ),
                "grant walrelay's principal DESCRIBE_CONFIGS on its topics",
            )
        }
    };
    let mut listed = Vec::new();
    let mut small = Vec::new();
    let mut refused = Vec::new();
    for ((name, partitions), config) in names.iter().zip(configs) {
        match config {
            Ok(resource) => {
                let max = resource
                    .get("max.message.bytes")
                    .and_then(|e| e.value.as_deref())
                    .and_then(|v| v.parse::<i64>().ok());
                listed.push(format!(
                    "{name} ({partitions} partitions, max.message.bytes {})",
                    max.map_or("?".to_string(), |m| m.to_string())
                ));
                if let Some(max) = max.filter(|&m| m < limit) {
                    small.push(format!("{name} ({max})"));
                }
            }
            Err(code) => refused.push(format!("{name} ({code})")),
        }
    }
    if !refused.is_empty() {
        return Check::fail(
            "kafka.topics",
            format!("cannot describe the configs of {}", refused.join(", ")),
            "grant walrelay's principal DESCRIBE_CONFIGS on its topics",
        );
    }
    if !small.is_empty() {
        return Check::warn(
            "kafka.topics",
            format!(
                "max.message.bytes below the producer's message.max.bytes ({limit}) on {}: \
                 larger events are rejected and halt walrelay (or go to the dead-letter topic)",
                small.join(", ")
            ),
            format!(
                "raise it (kafka-configs --alter --entity-type topics --entity-name TOPIC \
                 --add-config max.message.bytes={limit}), or set -X message.max.bytes to the \
                 topics' limit so oversized events fail fast"
            ),
        );
    }
    Check::pass("kafka.topics", listed.join("; "))
}

/// The topics --topic-replacement can produce: its ${...} and $n parts match anything.
fn route_pattern(replacement: &str) -> regex::Regex {
    let mut pattern = String::from("^");
    let mut chars = replacement.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            ('$', Some('{')) => {
                for c in chars.by_ref() {
                    if c == '}' {
                        break;
                    }
                }
                pattern.push_str(".+");
            }
            ('$', Some(d)) if d.is_ascii_digit() => {
                while chars.peek().is_some_and(|d| d.is_ascii_digit()) {
                    chars.next();
                }
                pattern.push_str(".+");
            }
            (c, _) => pattern.push_str(&regex::escape(&c.to_string())),
        }
    }
    pattern.push('$');
    regex::Regex::new(&pattern).expect("escaped pattern is valid")
}

#[cfg(test)]
mod tests {
    use super::route_pattern;

    #[test]
    fn route_pattern_matches_what_the_replacement_can_produce() {
        let p = route_pattern("outbox.event.${routedByValue}");
        assert!(p.is_match("outbox.event.OrderPlaced"));
        assert!(!p.is_match("outboxXevent.OrderPlaced"));
        assert!(!p.is_match("other.OrderPlaced"));
        let p = route_pattern("events-$1-v$2");
        assert!(p.is_match("events-order-v2"));
        assert!(!p.is_match("events-order"));
    }
}
