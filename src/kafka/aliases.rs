//! Two names for one librdkafka property: an alias (`acks` for
//! `request.required.acks`, `max.in.flight` for
//! `max.in.flight.requests.per.connection`), or a topic property written
//! with `topic.` before it (`topic.partitioner`).
//!
//! rust-rdkafka keeps a client's properties in a `HashMap` and hands them to
//! librdkafka in the map's order, which is random in each process. With one
//! property given under two names, the value that won changed from one
//! start to the next: `-X max.in.flight=5` beside walrelay's own
//! `max.in.flight.requests.per.connection=1` ran with 5 in some starts and 1
//! in others, and `-X topic.partitioner` or `-X metadata.broker.list`
//! likewise. So every `-X` name is read under one spelling before any client
//! is made, and a later property wins over an earlier one whatever name
//! each used, as it does for one name given twice.

use std::borrow::Cow;

use super::properties::{at, Level};

/// The name walrelay reads a librdkafka property as: `key` itself unless
/// another name sets the same property (`properties::PROPERTIES`).
pub fn canonical(key: &str) -> Cow<'_, str> {
    if let Some(rest) = key.strip_prefix("topic.") {
        // Else a global property (topic.metadata.refresh.interval.ms) or
        // none that librdkafka knows, which it refuses by name. A topic
        // property whose name is also a global one's keeps its `topic.`:
        // without it the name sets the global one.
        if let Some(property) = at(Level::Topic, rest) {
            let name = property.reads_as.unwrap_or(property.name);
            return match at(Level::Client, name) {
                Some(_) => Cow::Owned(format!("topic.{name}")),
                None => Cow::Borrowed(name),
            };
        }
    }
    // A name no global property has reaches the default topic
    // configuration (`rd_kafka_conf_set`), under its aliases there.
    let property = at(Level::Client, key).or_else(|| at(Level::Topic, key));
    match property.and_then(|p| p.reads_as) {
        Some(name) => Cow::Borrowed(name),
        None => Cow::Borrowed(key),
    }
}

#[cfg(test)]
mod tests {
    use super::super::properties::tests::librdkafka_rows;
    use super::super::properties::{aliases_at, at, names_at, Level};
    use super::canonical;
    use rdkafka::config::ClientConfig;

    /// Each alias a client's configuration reads without `topic.`, and the
    /// name walrelay reads it as.
    fn client_aliases() -> Vec<(&'static str, &'static str)> {
        let topic_only = aliases_at(Level::Topic)
            .into_iter()
            .filter(|(alias, _)| at(Level::Client, alias).is_none());
        aliases_at(Level::Client)
            .into_iter()
            .chain(topic_only)
            .collect()
    }

    #[test]
    fn every_name_librdkafka_reads_as_one_property_is_read_as_one_name() {
        let rows = librdkafka_rows();
        let global: Vec<&str> = rows
            .iter()
            .filter(|r| !r.topic)
            .map(|r| r.name.as_str())
            .collect();
        let topic: Vec<&str> = rows
            .iter()
            .filter(|r| r.topic)
            .map(|r| r.name.as_str())
            .collect();
        assert!(global.len() > 100 && topic.len() > 10, "table not read");
        assert_eq!(
            names_at(Level::Topic),
            topic.as_slice(),
            "librdkafka's topic properties"
        );
        for row in &rows {
            let Some(target) = &row.alias_for else {
                continue;
            };
            let (alias, target) = match row.topic {
                true => (format!("topic.{}", row.name), format!("topic.{target}")),
                // A topic-level alias is reached without `topic.` only if
                // no global property has its name.
                false => (row.name.clone(), target.clone()),
            };
            assert_eq!(
                canonical(&alias),
                canonical(&target),
                "librdkafka reads {alias} as {target}: walrelay must read both as one name"
            );
            if row.topic && !global.contains(&row.name.as_str()) {
                assert_eq!(canonical(&row.name), canonical(&target), "{}", row.name);
            }
        }
        let is_alias = |a: &str, n: &str, topic: bool| {
            rows.iter().any(|r| {
                r.topic == topic
                    && r.alias_for
                        .as_deref()
                        .is_some_and(|t| (r.name == a && t == n) || (r.name == n && t == a))
            })
        };
        for (alias, name) in client_aliases() {
            assert!(
                is_alias(alias, name, false) || is_alias(alias, name, true),
                "{alias} {name}"
            );
            assert_eq!(canonical(name), name, "{name} is itself an alias");
        }
        for (alias, name) in aliases_at(Level::Topic) {
            assert!(is_alias(alias, name, true), "{alias} {name}");
        }
    }

    #[test]
    fn librdkafka_reads_each_pair_of_names_as_one_property_of_a_client() {
        let sample = |name: &str| match name {
            "sasl.mechanism" => "SCRAM-SHA-512",
            "compression.type" => "gzip",
            "bootstrap.servers" => "kafka-7:9092",
            "partitioner" => "consistent",
            n if n.contains("sasl.oauthbearer") => "walrelay-test",
            _ => "7",
        };
        let topic_spellings = [
            "topic.acks",
            "topic.request.required.acks",
            "topic.delivery.timeout.ms",
            "topic.message.timeout.ms",
            "topic.partitioner",
        ];
        let pairs = client_aliases()
            .into_iter()
            .map(|(alias, _)| alias)
            .chain(topic_spellings);
        for given in pairs {
            let name = canonical(given);
            let value = sample(&name);
            let mut config = ClientConfig::new();
            config.set(given, value);
            let native = config.create_native_config().expect(given);
            assert_eq!(
                native.get(&name).expect(&name),
                value,
                "{given}={value} set {name}"
            );
        }
        // With `topic.`, the legacy consumer's property, not the global one.
        let mut config = ClientConfig::new();
        config.set("topic.enable.auto.commit", "false");
        let native = config.create_native_config().unwrap();
        assert_eq!(canonical("topic.enable.auto.commit"), "auto.commit.enable");
        assert_eq!(native.get("auto.commit.enable").unwrap(), "false");
        assert_eq!(native.get("enable.auto.commit").unwrap(), "true");
    }

    #[test]
    fn a_public_propertys_every_name_is_read_as_a_public_one() {
        use crate::kafka::secrets::is_public;
        let names = client_aliases().into_iter().flat_map(|(a, n)| [a, n]);
        let topic = names_at(Level::Topic)
            .into_iter()
            .map(|n| format!("topic.{n}"));
        for name in names.map(str::to_string).chain(topic) {
            let plain = name.strip_prefix("topic.").unwrap_or(&name);
            if is_public(plain) {
                assert!(
                    is_public(&canonical(&name)),
                    "{name} is read as {}",
                    canonical(&name)
                );
            }
        }
    }

    #[test]
    fn a_name_that_is_no_alias_is_read_as_given() {
        assert_eq!(canonical("acks"), "acks");
        assert_eq!(canonical("request.required.acks"), "acks");
        assert_eq!(canonical("enable.auto.commit"), "enable.auto.commit");
        assert_eq!(canonical("auto.commit.enable"), "auto.commit.enable");
        assert_eq!(
            canonical("topic.compression.codec"),
            "topic.compression.type"
        );
        assert_eq!(
            canonical("topic.metadata.refresh.interval.ms"),
            "topic.metadata.refresh.interval.ms"
        );
        assert_eq!(canonical("topic.linger.ms"), "topic.linger.ms");
        assert_eq!(canonical("no.such.property"), "no.such.property");
    }
}
