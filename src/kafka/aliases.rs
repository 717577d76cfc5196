//! librdkafka's aliases: two names for one property, such as `acks` and
//! `request.required.acks`.
//!
//! rust-rdkafka keeps a client's properties in a `HashMap` and hands them to
//! librdkafka in the map's order, which is random in each process. With one
//! property given under both names, the value that wins changed from one
//! start to the next: `-X max.in.flight=5` beside walrelay's own
//! `max.in.flight.requests.per.connection=1` ran with 5 in some starts and 1
//! in others, and `-X auto.commit.enable` or `-X metadata.broker.list`
//! likewise. So every `-X` name is read under one spelling before any client
//! is made, and a later property wins over an earlier one whatever name
//! each used, as it does for one name given twice.

/// Each alias and the name walrelay reads it as: the spelling walrelay's own
/// settings use, otherwise the Java client's, which users know from Kafka
/// Connect and Debezium. The pairs are librdkafka 2.12's `_RK_C_ALIAS`
/// entries (`src/rdkafka_conf.c`, listed as "Alias for" in its
/// CONFIGURATION.md), less the topic property `enable.auto.commit`: on a
/// client's configuration that name is a global property of its own, and
/// its topic-level alias `auto.commit.enable` is the legacy consumer's. A
/// test checks this list against the librdkafka walrelay is built with.
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

/// The name walrelay reads a librdkafka property as: `key` itself unless it
/// is an alias.
pub fn canonical(key: &str) -> &str {
    ALIASES
        .iter()
        .find(|(alias, _)| *alias == key)
        .map_or(key, |(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::{canonical, ALIASES};
    use rdkafka::config::ClientConfig;

    /// librdkafka's own table of properties (`rd_kafka_conf_properties_show`),
    /// each row `name | C/P | range | default | importance | description`.
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

    /// (alias, property) for each row librdkafka describes as an alias,
    /// and the names of the properties that are not.
    fn librdkafka_aliases() -> (Vec<(String, String)>, Vec<String>) {
        let (mut aliases, mut properties) = (Vec::new(), Vec::new());
        for row in librdkafka_properties().lines() {
            let columns: Vec<&str> = row.split('|').map(str::trim).collect();
            // Rows of properties only: their second column says who reads it.
            if columns.len() < 6 || !matches!(columns[1], "*" | "C" | "P") {
                continue;
            }
            let description = columns[5..].join("|");
            match description.split_once("Alias for `") {
                Some((_, rest)) => {
                    let target = rest.split('`').next().unwrap_or_default();
                    aliases.push((columns[0].to_string(), target.to_string()));
                }
                None => properties.push(columns[0].to_string()),
            }
        }
        (aliases, properties)
    }

    #[test]
    fn every_alias_librdkafka_has_is_read_as_one_name_with_its_property() {
        let (aliases, properties) = librdkafka_aliases();
        assert!(aliases.len() >= 10, "no aliases read: {aliases:?}");
        for (alias, target) in &aliases {
            // A topic-level alias whose name is also a global property
            // names that global property on a client's configuration.
            if properties.contains(alias) {
                continue;
            }
            assert_eq!(
                canonical(alias),
                canonical(target),
                "librdkafka reads {alias} as {target}: walrelay must read both as one name"
            );
        }
        for (alias, name) in ALIASES {
            let known = |n: &str| aliases.iter().any(|(a, t)| a == n || t == n);
            assert!(
                known(alias) && known(name),
                "{alias} -> {name} is not an alias in this librdkafka"
            );
            assert_eq!(canonical(name), *name, "{name} is itself an alias");
        }
    }

    #[test]
    fn librdkafka_reads_each_alias_and_its_name_as_one_property_of_a_client() {
        let sample = |name: &str| match name {
            "sasl.mechanism" => "SCRAM-SHA-512",
            "compression.type" => "gzip",
            "bootstrap.servers" => "kafka-7:9092",
            n if n.contains("sasl.oauthbearer") => "walrelay-test",
            _ => "7",
        };
        for (alias, name) in ALIASES {
            let value = sample(name);
            let mut config = ClientConfig::new();
            config.set(*alias, value);
            let native = config.create_native_config().expect(alias);
            assert_eq!(
                native.get(name).expect(name),
                value,
                "{alias}={value} set {name}"
            );
        }
    }

    #[test]
    fn a_name_that_is_no_alias_is_read_as_given() {
        assert_eq!(canonical("acks"), "acks");
        assert_eq!(canonical("request.required.acks"), "acks");
        assert_eq!(canonical("enable.auto.commit"), "enable.auto.commit");
        assert_eq!(canonical("auto.commit.enable"), "auto.commit.enable");
        assert_eq!(canonical("no.such.property"), "no.such.property");
    }
}
