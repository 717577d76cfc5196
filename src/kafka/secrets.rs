//! Which `-X` values may be shown. walrelay shows a librdkafka property's
//! value only when it knows the key to hold no secret: a key on the list
//! below. Every other value (a password, a private key, a client secret,
//! and a key librdkafka does not know, which may be a misspelt password) is
//! masked in log lines, in `walrelay check`'s report and in every error
//! built from a Kafka client error. rust-rdkafka's `KafkaError::ClientConfig`
//! prints the refused property's value, so `-X sasl.pasword=hunter3` (a
//! typo) would otherwise print `hunter3`.

use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;

use crate::error::Error;
use crate::logging::{Redactor, MASK};
use crate::percent::url_password;

/// librdkafka's properties that hold no secret: every property of
/// CONFIGURATION.md (librdkafka 2.12.1, vendored by rdkafka-sys
/// 4.10.0+2.12.1) that takes a string, except those in [`SECRET`]. The
/// OAuth client id is here: RFC 6749 section 2.2 says it "is not a secret";
/// the SASL user name too, which walrelay prints in the ACL commands it
/// suggests. A URL is shown without the password of its user info.
const PUBLIC: &[&str] = &[
    "builtin.features",
    "client.id",
    "metadata.broker.list",
    "bootstrap.servers",
    "message.max.bytes",
    "message.copy.max.bytes",
    "receive.message.max.bytes",
    "max.in.flight.requests.per.connection",
    "max.in.flight",
    "metadata.recovery.strategy",
    "metadata.recovery.rebootstrap.trigger.ms",
    "topic.metadata.refresh.interval.ms",
    "metadata.max.age.ms",
    "topic.metadata.refresh.fast.interval.ms",
    "topic.metadata.refresh.fast.cnt",
    "topic.metadata.refresh.sparse",
    "topic.metadata.propagation.max.ms",
    "topic.blacklist",
    "debug",
    "socket.timeout.ms",
    "socket.blocking.max.ms",
    "socket.send.buffer.bytes",
    "socket.receive.buffer.bytes",
    "socket.keepalive.enable",
    "socket.nagle.disable",
    "socket.max.fails",
    "broker.address.ttl",
    "broker.address.family",
    "socket.connection.setup.timeout.ms",
    "connections.max.idle.ms",
    "reconnect.backoff.jitter.ms",
    "reconnect.backoff.ms",
    "reconnect.backoff.max.ms",
    "statistics.interval.ms",
    "enabled_events",
    "log_level",
    "log.queue",
    "log.thread.name",
    "enable.random.seed",
    "log.connection.close",
    "internal.termination.signal",
    "api.version.request",
    "api.version.request.timeout.ms",
    "api.version.fallback.ms",
    "broker.version.fallback",
    "allow.auto.create.topics",
    "security.protocol",
    "ssl.cipher.suites",
    "ssl.curves.list",
    "ssl.sigalgs.list",
    "ssl.key.location",
    "ssl.certificate.location",
    "ssl.certificate.pem",
    "ssl.ca.location",
    "https.ca.location",
    "https.ca.pem",
    "ssl.ca.pem",
    "ssl.ca.certificate.stores",
    "ssl.crl.location",
    "ssl.keystore.location",
    "ssl.providers",
    "ssl.engine.location",
    "ssl.engine.id",
    "enable.ssl.certificate.verification",
    "ssl.endpoint.identification.algorithm",
    "sasl.mechanisms",
    "sasl.mechanism",
    "sasl.kerberos.service.name",
    "sasl.kerberos.principal",
    "sasl.kerberos.keytab",
    "sasl.kerberos.min.time.before.relogin",
    "sasl.username",
    "enable.sasl.oauthbearer.unsecure.jwt",
    "sasl.oauthbearer.method",
    "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.credentials.client.id",
    "sasl.oauthbearer.scope",
    "sasl.oauthbearer.token.endpoint.url",
    "sasl.oauthbearer.grant.type",
    "sasl.oauthbearer.assertion.algorithm",
    "sasl.oauthbearer.assertion.private.key.file",
    "sasl.oauthbearer.assertion.file",
    "sasl.oauthbearer.assertion.claim.aud",
    "sasl.oauthbearer.assertion.claim.exp.seconds",
    "sasl.oauthbearer.assertion.claim.iss",
    "sasl.oauthbearer.assertion.claim.jti.include",
    "sasl.oauthbearer.assertion.claim.nbf.seconds",
    "sasl.oauthbearer.assertion.claim.sub",
    "sasl.oauthbearer.assertion.jwt.template.file",
    "sasl.oauthbearer.metadata.authentication.type",
    "plugin.library.paths",
    "group.id",
    "group.instance.id",
    "partition.assignment.strategy",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "group.protocol.type",
    "group.protocol",
    "group.remote.assignor",
    "coordinator.query.interval.ms",
    "max.poll.interval.ms",
    "enable.auto.commit",
    "auto.commit.interval.ms",
    "enable.auto.offset.store",
    "queued.min.messages",
    "queued.max.messages.kbytes",
    "fetch.wait.max.ms",
    "fetch.queue.backoff.ms",
    "fetch.message.max.bytes",
    "max.partition.fetch.bytes",
    "fetch.max.bytes",
    "fetch.min.bytes",
    "fetch.error.backoff.ms",
    "offset.store.method",
    "isolation.level",
    "enable.partition.eof",
    "check.crcs",
    "client.rack",
    "transactional.id",
    "transaction.timeout.ms",
    "enable.idempotence",
    "enable.gapless.guarantee",
    "queue.buffering.max.messages",
    "queue.buffering.max.kbytes",
    "queue.buffering.max.ms",
    "linger.ms",
    "message.send.max.retries",
    "retries",
    "retry.backoff.ms",
    "retry.backoff.max.ms",
    "queue.buffering.backpressure.threshold",
    "compression.codec",
    "compression.type",
    // Topic properties named as global ones, as kafka::aliases reads them
    // with `topic.` before them.
    "topic.compression.type",
    "topic.auto.commit.interval.ms",
    "topic.offset.store.method",
    "batch.num.messages",
    "batch.size",
    "delivery.report.only.error",
    "sticky.partitioning.linger.ms",
    "client.dns.lookup",
    "enable.metrics.push",
    // Topic properties.
    "request.required.acks",
    "acks",
    "request.timeout.ms",
    "message.timeout.ms",
    "delivery.timeout.ms",
    "queuing.strategy",
    "produce.offset.report",
    "partitioner",
    "compression.level",
    "auto.commit.enable",
    "auto.offset.reset",
    "offset.store.path",
    "offset.store.sync.interval.ms",
    "consume.callback.max.messages",
];

/// librdkafka's properties (same source) whose value is a secret or may
/// carry one: passwords, private keys, client secrets, the unsecured JWT's
/// configuration and the token's extensions (free text), and the kinit
/// command line.
const SECRET: &[&str] = &[
    "ssl.key.password",
    "ssl.key.pem",
    "ssl.keystore.password",
    "sasl.password",
    "sasl.kerberos.kinit.cmd",
    "sasl.oauthbearer.config",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.client.credentials.client.secret",
    "sasl.oauthbearer.extensions",
    "sasl.oauthbearer.assertion.private.key.passphrase",
    "sasl.oauthbearer.assertion.private.key.pem",
];

/// Whether walrelay knows `key`'s value to hold no secret.
pub fn is_public(key: &str) -> bool {
    PUBLIC.contains(&key)
}

/// The secret values among `properties` (key, value): the value of every
/// key not known to be public, and the password of a URL's user info.
pub fn secret_values<'a>(properties: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<String> {
    let mut secrets = Vec::new();
    for (key, value) in properties {
        if !is_public(key) {
            secrets.push(value.to_string());
        } else if let Some(password) = url_password(value) {
            // As written, and as the server reads it.
            secrets.push(crate::percent::decode(&password));
            secrets.push(password);
        }
    }
    secrets
}

/// A mask for every secret value of a client configuration.
pub fn redactor(config: &ClientConfig) -> Redactor {
    let keys: Vec<&str> = config.config_map().into_keys().collect();
    let pairs = keys
        .into_iter()
        .filter_map(|key| config.get(key).map(|value| (key, value)));
    Redactor::new(secret_values(pairs))
}

/// `text` (a librdkafka error or log line) with every secret of `config` masked.
pub fn mask(text: &str, config: &ClientConfig) -> String {
    redactor(config).redact(text.to_string())
}

/// A Kafka client error as text fit for any output. A refused property is
/// named with its value only when the key is public, with the nearest
/// property librdkafka knows when the key is not one.
pub fn describe(error: &KafkaError, config: &ClientConfig) -> String {
    let text = match error {
        KafkaError::ClientConfig(_, reason, key, value) => {
            let public = is_public(key);
            let shown = if public { value.as_str() } else { MASK };
            let mut text = format!("librdkafka refused -X {key}={shown}: {reason}");
            if !public && !SECRET.contains(&key.as_str()) {
                if let Some(near) = nearest_property(key) {
                    text.push_str(&format!(" (did you mean {near}?)"));
                }
            }
            if public {
                text
            } else {
                // librdkafka may quote the value in its reason.
                Redactor::new(vec![value.clone()]).redact(text)
            }
        }
        other => other.to_string(),
    };
    mask(&text, config)
}

/// The permanent error for a client librdkafka would not create from
/// `config` (`what`: "the Kafka producer"), with no secret in it.
pub fn client_refused(what: &str, error: &KafkaError, config: &ClientConfig) -> Error {
    Error::permanent(format!(
        "cannot create {what}: {}; fix the -X properties (names and values as in librdkafka's \
         CONFIGURATION.md)",
        describe(error, config)
    ))
}

/// The librdkafka property `key` was most likely meant to be: one or two
/// edits away, in any case (librdkafka's names are case-sensitive).
fn nearest_property(key: &str) -> Option<&'static str> {
    let key = key.to_ascii_lowercase();
    PUBLIC
        .iter()
        .chain(SECRET)
        .map(|known| (edit_distance(&key, known), *known))
        .filter(|(distance, _)| *distance <= 2)
        .min()
        .map(|(_, known)| known)
}

/// Levenshtein distance, by bytes (property names are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, &x) in a.iter().enumerate() {
        let mut current = vec![i + 1];
        for (j, &y) in b.iter().enumerate() {
            let substitute = previous[j] + usize::from(x != y);
            current.push(substitute.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::types::RDKafkaConfRes;

    fn config(pairs: &[(&str, &str)]) -> ClientConfig {
        let mut config = ClientConfig::new();
        for (key, value) in pairs {
            config.set(*key, *value);
        }
        config
    }

    #[test]
    fn a_misspelt_property_is_refused_without_its_value_and_with_the_property_meant() {
        let config = config(&[("bootstrap.servers", "k:9092"), ("sasl.pasword", "hunter3")]);
        let error = config
            .create::<rdkafka::producer::BaseProducer>()
            .err()
            .expect("librdkafka refuses an unknown property");
        assert!(
            error.to_string().contains("hunter3"),
            "rust-rdkafka: {error}"
        );
        let text = describe(&error, &config);
        assert!(!text.contains("hunter3"), "{text}");
        assert!(text.contains("-X sasl.pasword=<redacted>"), "{text}");
        assert!(text.contains("did you mean sasl.password?"), "{text}");
    }

    #[test]
    fn a_public_propertys_bad_value_is_shown() {
        let config = config(&[("bootstrap.servers", "k:9092"), ("acks", "most")]);
        let error = config
            .create::<rdkafka::producer::BaseProducer>()
            .err()
            .unwrap();
        let text = describe(&error, &config);
        assert!(text.contains("-X acks=most"), "{text}");
    }

    #[test]
    fn a_secret_value_is_masked_even_where_librdkafka_quotes_it() {
        let config = config(&[("sasl.password", "s3cret-Value")]);
        let error = KafkaError::ClientConfig(
            RDKafkaConfRes::RD_KAFKA_CONF_INVALID,
            "Invalid value \"s3cret-Value\" for configuration property \"sasl.password\"".into(),
            "sasl.password".into(),
            "s3cret-Value".into(),
        );
        let text = describe(&error, &config);
        assert!(!text.contains("s3cret-Value"), "{text}");
        assert!(!text.contains("did you mean"), "{text}");
        let creation = KafkaError::ClientCreation("bad key s3cret-Value".into());
        assert_eq!(
            describe(&creation, &config),
            "Client creation error: bad key <redacted>"
        );
    }

    #[test]
    fn unknown_and_secret_keys_hold_secrets_and_a_urls_password_is_one() {
        let found = secret_values([
            ("linger.ms", "50"),
            ("sasl.username", "relay"),
            ("sasl.oauthbearer.client.id", "walrelay-client"),
            ("sasl.jaas.config", "jaas-value"),
            ("ssl.key.password", "key-pass"),
            ("Sasl.Password", "cased"),
            (
                "sasl.oauthbearer.token.endpoint.url",
                "https://id:url%2Fpass@idp/token",
            ),
        ]);
        assert_eq!(
            found,
            ["jaas-value", "key-pass", "cased", "url/pass", "url%2Fpass"]
        );
    }

    #[test]
    fn every_key_is_either_public_or_secret_never_both() {
        for key in SECRET {
            assert!(!is_public(key), "{key}");
        }
        assert_eq!(
            nearest_property("ssl.keystore.pasword"),
            Some("ssl.keystore.password")
        );
        assert_eq!(nearest_property("sasl.jaas.config"), None);
        assert_eq!(nearest_property("SASL.Password"), Some("sasl.password"));
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
