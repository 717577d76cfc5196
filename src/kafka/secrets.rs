//! Which `-X` values may be shown. walrelay shows a librdkafka property's
//! value only when it knows the key to hold no secret: a key the table of
//! properties (`properties`) marks shown. Every other value (a password, a private key, a client secret,
//! and a key librdkafka does not know, which may be a misspelt password) is
//! masked in log lines, in `walrelay check`'s report and in every error
//! built from a Kafka client error. rust-rdkafka's `KafkaError::ClientConfig`
//! prints the refused property's value, so `-X sasl.pasword=hunter3` (a
//! typo) would otherwise print `hunter3`.

use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;

use super::aliases::canonical;
use super::properties::{self, Level};
use crate::error::Error;
use crate::logging::{Redactor, MASK};
use crate::percent::url_password;

/// Whether walrelay knows `key`'s value to hold no secret.
pub fn is_public(key: &str) -> bool {
    properties::is_shown(key) || is_shown_topic_spelling(key)
}

/// `topic.` and the name of a topic property that is also a global one,
/// so spelt to reach the topic one (`aliases`): as public as the property.
fn is_shown_topic_spelling(key: &str) -> bool {
    key.strip_prefix("topic.").is_some_and(|rest| {
        properties::at(Level::Topic, rest).is_some()
            && canonical(key) == key
            && properties::is_shown(rest)
    })
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
            if !public && !properties::is_secret(key) {
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
fn nearest_property(key: &str) -> Option<String> {
    let key = key.to_ascii_lowercase();
    let topic_spellings = properties::names_at(Level::Topic)
        .into_iter()
        .map(|name| format!("topic.{name}"))
        .filter(|key| is_shown_topic_spelling(key));
    properties::names()
        .map(str::to_string)
        .chain(topic_spellings)
        .map(|known| (edit_distance(&key, &known), known))
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
        for key in properties::PROPERTIES
            .iter()
            .filter(|p| p.value == properties::Value::Secret)
        {
            assert!(!is_public(key.name), "{}", key.name);
        }
        assert_eq!(
            nearest_property("ssl.keystore.pasword").as_deref(),
            Some("ssl.keystore.password")
        );
        assert_eq!(nearest_property("sasl.jaas.config"), None);
        assert_eq!(
            nearest_property("SASL.Password").as_deref(),
            Some("sasl.password")
        );
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
