//! The librdkafka configuration walrelay produces with: the settings its
//! guarantees rest on, defaults chosen from measurements, and the operator's
//! `-X` properties on top.

use std::sync::Mutex;

use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::error::KafkaError;
use rdkafka::producer::{DeliveryResult, ProducerContext};
use tracing::warn;

use super::{is_login_refusal, LoginAdvice};
use crate::error::{Error, Result};

/// A client context that remembers why the broker refused the login, if it
/// did: a request then only fails with a transport error or a timeout
/// (`walrelay check`).
pub struct LoginWatch {
    refused: Mutex<Option<String>>,
    advice: LoginAdvice,
}

impl LoginWatch {
    /// A watch on a client made from `config`.
    pub fn new(config: &ClientConfig) -> Self {
        LoginWatch {
            refused: Mutex::new(None),
            advice: LoginAdvice::new(config),
        }
    }

    /// librdkafka's reason for the last refused login, with a failed kinit
    /// before it.
    pub fn refused(&self) -> Option<String> {
        self.refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Which failure a refused login's `reason` describes.
    pub fn failure(&self, reason: &str) -> super::login::LoginFailure {
        self.advice.failure(reason)
    }
}

impl ProducerContext for LoginWatch {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &DeliveryResult<'_>, _: ()) {}
}

impl ClientContext for LoginWatch {
    super::msk_iam::oauth_token_hook!();

    fn error(&self, error: KafkaError, reason: &str) {
        if is_login_refusal(&error) {
            *self.refused.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(self.advice.reason(reason));
        }
        warn!(error = %error, reason, "Kafka client error");
    }

    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        self.advice.observe_log(level, fac, log_message);
        DefaultClientContext.log(level, fac, log_message);
    }
}

/// Settings walrelay relies on for ordering and no loss. `-X` may override
/// them, with a warning.
const REQUIRED: &[(&str, &str)] = &[("enable.idempotence", "true"), ("acks", "all")];

/// Defaults chosen for low latency without giving up batching; `-X` overrides them.
const DEFAULTS: &[(&str, &str)] = &[
    // 0 means librdkafka retries a delivery forever: a broker that is down
    // delays events, it never fails them.
    ("message.timeout.ms", "0"),
    // No wait: at the rate services write, --read-batch-window already
    // hands librdkafka a window's events at once, and a backlog fills each
    // batch while the one request in flight is out. A linger on top would
    // only add latency (docs/benchmarks.md, "One batch, not two").
    ("linger.ms", "0"),
    ("batch.num.messages", "10000"),
    ("queue.buffering.max.messages", "1000000"),
    ("queue.buffering.max.kbytes", "1048576"),
    ("client.id", "walrelay"),
    // The Java producer's partitioner (murmur2 of the key bytes), so a keyed
    // event lands where Debezium would have put it; librdkafka's own default
    // (consistent_random, CRC32) places keys elsewhere.
    ("partitioner", "murmur2_random"),
    // One produce request in flight per broker. With more, the idempotent
    // producer can lose a record without a word: when a partition's first
    // batch fails with a not-persisted error (NOT_LEADER on a topic just
    // created, or during a leader election) and the next batch succeeds,
    // the broker, which has no sequence state for the new producer yet,
    // accepts it, and librdkafka takes the first batch as implicitly
    // acknowledged (its IMPLICITACK; confluent-kafka-go issue 921). Seen on
    // Apache Kafka 4.4 in tests/poison.rs: 1 dead-letter copy in 3 acked
    // but never written, in half the runs.
    ("max.in.flight.requests.per.connection", "1"),
];

/// On a connection without TLS, a value larger than this goes into the
/// produce request by reference to the record's own copy (an iovec of its
/// own) rather than copied a second time on librdkafka's broker thread.
/// librdkafka's default, 65,535, copied all but the largest outbox payloads
/// twice; an 8 KB drain cost about a fifth more CPU per event with it
/// (docs/benchmarks.md). Not over TLS, where librdkafka writes each such
/// value with an `SSL_write`, a TLS record and a system call of its own
/// (rdkafka_ssl.c), which may cost more than the copy saves: not measured.
const PLAINTEXT_COPY_MAX_BYTES: &str = "4096";

/// What a default Kafka broker accepts (its message.max.bytes): the client's
/// limit unless the dead-letter topic needs more.
const DEFAULT_MESSAGE_MAX_BYTES: usize = 1_048_588;

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
        if key == "max.in.flight.requests.per.connection" && value.trim() != "1" {
            warn!(
                "-X max.in.flight.requests.per.connection={value}: with more than one produce \
                 request in flight, librdkafka can report a record delivered that the broker \
                 never wrote (docs/configuration.md)"
            );
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
    let tls = config
        .get("security.protocol")
        .is_some_and(|p| p.to_ascii_uppercase().ends_with("SSL"));
    if !tls
        && !properties
            .iter()
            .any(|(k, _)| k == "message.copy.max.bytes")
    {
        config.set("message.copy.max.bytes", PLAINTEXT_COPY_MAX_BYTES);
    }
    config
}

/// Refuses properties librdkafka takes but walrelay cannot work with,
/// before anything is created: otherwise walrelay would start, stream, and
/// never confirm the slot.
pub fn require_workable(config: &ClientConfig) -> Result<()> {
    // As librdkafka reads a boolean; any other value it refuses itself.
    let on = |key: &str| {
        config.get(key).is_some_and(|v| {
            v == "1" || v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("t")
        })
    };
    if on("delivery.report.only.error") {
        return Err(Error::permanent(
            "-X delivery.report.only.error=true: walrelay confirms the slot only from the \
             report of each record Kafka acknowledged, and librdkafka would then report \
             failures alone, so no event would ever be confirmed; remove it",
        ));
    }
    // librdkafka takes an empty value for none.
    if config
        .get("transactional.id")
        .is_some_and(|id| !id.is_empty())
    {
        return Err(Error::permanent(
            "-X transactional.id: walrelay makes its producer transactional itself where it \
             needs one (run --delivery exactly-once), under an id of its own for the database \
             and slot (walrelay-<system id>-<slot>). Given by -X, a producer would refuse every \
             record outside a transaction, and exactly-once would replace it. Remove -X \
             transactional.id",
        ));
    }
    Ok(())
}

/// The largest record the producer sends outside the dead-letter topic:
/// `-X message.max.bytes` if given, else what a default broker accepts.
pub fn event_max_bytes(properties: &[(String, String)]) -> usize {
    properties
        .iter()
        .rev()
        .find(|(k, _)| k == "message.max.bytes")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(DEFAULT_MESSAGE_MAX_BYTES)
}

#[cfg(test)]
mod tests {
    /// librdkafka's `builtin.features`: what its build turned on.
    #[cfg(any(feature = "oidc", feature = "gssapi"))]
    fn builtin_features() -> Vec<String> {
        let native = rdkafka::config::ClientConfig::new()
            .create_native_config()
            .unwrap();
        let features = native.get("builtin.features").unwrap();
        features.split(',').map(str::to_string).collect()
    }

    // librdkafka's configure turns a feature off without a word when its
    // check fails (libcurl's is "try"): a build must not lose one silently.
    #[cfg(feature = "oidc")]
    #[test]
    fn the_oidc_feature_builds_librdkafka_with_its_oidc_login() {
        let features = builtin_features();
        assert!(features.iter().any(|f| f == "oidc"), "{features:?}");
    }

    #[test]
    fn large_values_go_by_reference_without_tls_and_are_copied_over_it_unless_told() {
        let copy_max = |properties: &[(&str, &str)]| {
            let properties: Vec<(String, String)> = properties
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let config = super::client_config("b:9092", &properties, 0);
            config.get("message.copy.max.bytes").map(str::to_string)
        };
        assert_eq!(copy_max(&[]).as_deref(), Some("4096"));
        let sasl = [("security.protocol", "SASL_PLAINTEXT")];
        assert_eq!(copy_max(&sasl).as_deref(), Some("4096"));
        // librdkafka's own default over TLS.
        assert_eq!(copy_max(&[("security.protocol", "SASL_SSL")]), None);
        assert_eq!(copy_max(&[("security.protocol", "ssl")]), None);
        let told = [
            ("security.protocol", "SSL"),
            ("message.copy.max.bytes", "1024"),
        ];
        assert_eq!(copy_max(&told).as_deref(), Some("1024"));
    }

    #[test]
    fn only_error_reports_or_a_transactional_id_of_ones_own_are_refused_in_any_spelling() {
        let workable = |key: &str, value: &str| {
            let given = [(key.to_string(), value.to_string())];
            super::require_workable(&super::client_config("b:9092", &given, 0)).is_ok()
        };
        for value in ["true", "TRUE", "t", "1"] {
            assert!(!workable("delivery.report.only.error", value), "{value}");
        }
        // Values librdkafka refuses are left for it to name.
        for value in ["false", "False", "0", "yes", ""] {
            assert!(workable("delivery.report.only.error", value), "{value}");
        }
        assert!(!workable("transactional.id", "orders"));
        assert!(workable("transactional.id", ""));
        assert!(workable("linger.ms", "5"));
    }

    #[cfg(feature = "gssapi")]
    #[test]
    fn the_gssapi_feature_builds_librdkafka_with_kerberos() {
        let features = builtin_features();
        assert!(features.iter().any(|f| f == "sasl_gssapi"), "{features:?}");
    }
}
