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

/// Each alias of a client's configuration and the name walrelay reads it
/// as: the spelling walrelay's own settings use, otherwise the Java
/// client's, which users know from Kafka Connect and Debezium. They are
/// librdkafka 2.12's `_RK_C_ALIAS` entries (`src/rdkafka_conf.c`, "Alias
/// for" in its CONFIGURATION.md), less the topic property
/// `enable.auto.commit`: on a client's configuration that name is a global
/// property of its own, and its topic-level partner `auto.commit.enable` is
/// the legacy consumer's. A test checks them against the librdkafka
/// walrelay is built with.
const ALIASES: &[(&str, &str)] = &[
    ("metadata.broker.list", "bootstrap.servers"),
    ("max.in.flight", "max.in.flight.requests.per.connection"),
    ("sasl.mechanisms", "sasl.mechanism"),
    (
        "sasl.oauthbearer.client.credentials.client.id",
        "sasl.oauthbearer.client.id",
    ),
    (
        "sasl.oauthbearer.client.credentials.client.secret",
        "sasl.oauthbearer.client.secret",
    ),
    ("fetch.message.max.bytes", "max.partition.fetch.bytes"),
    ("queue.buffering.max.ms", "linger.ms"),
    ("message.send.max.retries", "retries"),
    ("compression.codec", "compression.type"),
    ("request.required.acks", "acks"),
    ("delivery.timeout.ms", "message.timeout.ms"),
];

/// librdkafka 2.12's topic properties. Set on a client's configuration, a
/// name that is no global property's goes to its default topic
/// configuration, which takes a leading `topic.` off
/// (`rd_kafka_conf_set`, `rd_kafka_topic_conf_set`).
const TOPIC_PROPERTIES: &[&str] = &[
    "request.required.acks",
    "acks",
    "request.timeout.ms",
    "message.timeout.ms",
    "delivery.timeout.ms",
    "queuing.strategy",
    "produce.offset.report",
    "partitioner",
    "partitioner_cb",
    "msg_order_cmp",
    "opaque",
    "compression.codec",
    "compression.type",
    "compression.level",
    "auto.commit.enable",
    "enable.auto.commit",
    "auto.commit.interval.ms",
    "auto.offset.reset",
    "offset.store.path",
    "offset.store.sync.interval.ms",
    "offset.store.method",
    "consume.callback.max.messages",
];

/// Topic properties whose name is also a global property's: without
/// `topic.` the name sets the global one, so with it it stays apart.
const ALSO_GLOBAL: &[&str] = &[
    "opaque",
    "compression.codec",
    "compression.type",
    "enable.auto.commit",
    "auto.commit.interval.ms",
    "offset.store.method",
];

/// Aliases among topic properties (the same table, topic scope).
const TOPIC_ALIASES: &[(&str, &str)] = &[
    ("request.required.acks", "acks"),
    ("delivery.timeout.ms", "message.timeout.ms"),
    ("compression.codec", "compression.type"),
    ("enable.auto.commit", "auto.commit.enable"),
];

/// The name walrelay reads a librdkafka property as: `key` itself unless
/// another name sets the same property.
pub fn canonical(key: &str) -> Cow<'_, str> {
    if let Some(rest) = key.strip_prefix("topic.") {
        // Else a global property (topic.metadata.refresh.interval.ms) or
        // none that librdkafka knows, which it refuses by name.
        if TOPIC_PROPERTIES.contains(&rest) {
            let name = lookup(TOPIC_ALIASES, rest);
            return match ALSO_GLOBAL.contains(&name) {
                true => Cow::Owned(format!("topic.{name}")),
                false => Cow::Borrowed(name),
            };
        }
    }
    Cow::Borrowed(lookup(ALIASES, key))
}

fn lookup<'a>(aliases: &[(&str, &'static str)], key: &'a str) -> &'a str {
    aliases
        .iter()
        .find(|(alias, _)| *alias == key)
        .map_or(key, |(_, name)| name)
}

/// -X properties a consumer does not take (librdkafka warns about each).
pub fn is_producer_only(key: &str) -> bool {
    matches!(
        key,
        "acks"
            | "request.required.acks"
            | "enable.idempotence"
            | "linger.ms"
            | "queue.buffering.max.ms"
            | "batch.num.messages"
            | "batch.size"
            | "message.timeout.ms"
            | "delivery.timeout.ms"
            | "compression.type"
            | "compression.codec"
            | "topic.compression.type"
            | "partitioner"
            | "max.in.flight.requests.per.connection"
            | "max.in.flight"
            | "queue.buffering.max.messages"
            | "queue.buffering.max.kbytes"
            | "retries"
            | "message.send.max.retries"
            | "transactional.id"
            | "transaction.timeout.ms"
    )
}

#[cfg(test)]
mod tests {
    use super::{canonical, ALIASES, ALSO_GLOBAL, TOPIC_ALIASES, TOPIC_PROPERTIES};
    use rdkafka::config::ClientConfig;

    /// librdkafka's own table of properties (`rd_kafka_conf_properties_show`):
    /// a section of global properties, then one of topic properties, each
    /// row `name | C/P | range | default | importance | description`.
    fn librdkafka_properties() -> String {
        // SAFETY: a temporary file of our own, written by librdkafka, read
        // back whole and closed once; the pointer never escapes.
        unsafe {
            let file = libc::tmpfile();
            assert!(!file.is_null(), "no temporary file");
            rdkafka::bindings::rd_kafka_conf_properties_show(file.cast());
            libc::rewind(file);
            let mut text = Vec::new();
            let mut buf = [0u8; 8192];
            loop {
                let n = libc::fread(buf.as_mut_ptr().cast(), 1, buf.len(), file);
                if n == 0 {
                    break;
                }
                text.extend_from_slice(&buf[..n]);
            }
            libc::fclose(file);
            String::from_utf8(text).expect("librdkafka's table is text")
        }
    }

    /// A property of librdkafka's table: its section, its name, and the
    /// property it is an alias for, if it is one.
    struct Row {
        topic: bool,
        name: String,
        alias_for: Option<String>,
    }

    fn librdkafka_rows() -> Vec<Row> {
        let mut topic = false;
        let mut rows = Vec::new();
        for line in librdkafka_properties().lines() {
            if line.starts_with("## ") {
                topic = line.contains("Topic");
                continue;
            }
            let columns: Vec<&str> = line.split('|').map(str::trim).collect();
            // Rows of properties only: their second column says who reads it.
            if columns.len() < 6 || !matches!(columns[1], "*" | "C" | "P") {
                continue;
            }
            let description = columns[5..].join("|");
            let alias_for = description
                .split_once("Alias for `")
                .map(|(_, rest)| rest.split('`').next().unwrap_or_default().to_string());
            rows.push(Row {
                topic,
                name: columns[0].to_string(),
                alias_for,
            });
        }
        rows
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
            TOPIC_PROPERTIES,
            topic.as_slice(),
            "librdkafka's topic properties"
        );
        let both: Vec<&str> = topic
            .iter()
            .copied()
            .filter(|n| global.contains(n))
            .collect();
        assert_eq!(
            ALSO_GLOBAL,
            both.as_slice(),
            "topic properties named as global ones"
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
        for (alias, name) in ALIASES {
            assert!(
                is_alias(alias, name, false) || is_alias(alias, name, true),
                "{alias} {name}"
            );
            assert_eq!(canonical(name), *name, "{name} is itself an alias");
        }
        for (alias, name) in TOPIC_ALIASES {
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
        let pairs = ALIASES
            .iter()
            .map(|(alias, _)| *alias)
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
        let names = ALIASES.iter().flat_map(|(a, n)| [*a, *n]);
        let topic = TOPIC_PROPERTIES.iter().map(|n| format!("topic.{n}"));
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
