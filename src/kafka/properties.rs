//! One table of librdkafka's properties, the one place walrelay learns
//! what a `-X` name is: its level (a client's, or its default topic
//! configuration's), which clients read it, whether its value may be shown,
//! and the name walrelay reads it as when it is an alias. `aliases` spells
//! every name one way from it, `secrets` masks values from it, and
//! `client` leaves a producer's properties off a consumer from it.
//!
//! The rows are librdkafka 2.12.1's CONFIGURATION.md (vendored by
//! rdkafka-sys 4.10.0+2.12.1), in its order; a test holds them against
//! the table of the librdkafka walrelay is built with.

/// Where librdkafka keeps a property.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// A client's own ("Global configuration properties").
    Client,
    /// The default topic configuration's ("Topic configuration
    /// properties"), also set on a client with a `topic.` prefix.
    Topic,
}

/// Which clients read a property (librdkafka's `C/P` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Both,
    Producer,
    Consumer,
}

/// Whether a property's value may be shown in logs, errors and `check`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value {
    /// Holds no secret. A URL's user-info password is masked all the same.
    Shown,
    /// A password, a private key, a client secret, the unsecured JWT's
    /// configuration, the token's extensions (free text), the kinit command
    /// line: masked everywhere.
    Secret,
    /// Set through librdkafka's API (a callback, an opaque pointer), never
    /// by name: masked like a name librdkafka does not know.
    Api,
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Property {
    pub name: &'static str,
    pub level: Level,
    pub role: Role,
    pub value: Value,
    /// The name walrelay reads this alias as: the spelling walrelay's own
    /// settings use, otherwise the Java client's, which users know from
    /// Kafka Connect and Debezium (librdkafka's "Alias for", either way
    /// round). None for a property that is no alias.
    pub reads_as: Option<&'static str>,
}

const fn row(
    name: &'static str,
    level: Level,
    role: Role,
    value: Value,
    reads_as: Option<&'static str>,
) -> Property {
    Property {
        name,
        level,
        role,
        value,
        reads_as,
    }
}

use Level::{Client, Topic};
use Role::{Both, Consumer, Producer};
use Value::{Api, Secret, Shown};

/// librdkafka's properties. Two rows depart from its table on purpose:
/// `max.in.flight.requests.per.connection` (and its alias `max.in.flight`)
/// is read by both clients, but walrelay's limit of one in flight is its
/// producer's guarantee against a silent loss (`client::DEFAULTS`), so it
/// is given to producers only. On a client's configuration the topic-level
/// `enable.auto.commit` is no alias: that name is a global property of its
/// own, and its topic-level partner `auto.commit.enable` is the legacy
/// consumer's.
pub const PROPERTIES: &[Property] = &[
    row("builtin.features", Client, Both, Shown, None),
    row("client.id", Client, Both, Shown, None),
    row(
        "metadata.broker.list",
        Client,
        Both,
        Shown,
        Some("bootstrap.servers"),
    ),
    row("bootstrap.servers", Client, Both, Shown, None),
    row("message.max.bytes", Client, Both, Shown, None),
    row("message.copy.max.bytes", Client, Both, Shown, None),
    row("receive.message.max.bytes", Client, Both, Shown, None),
    row(
        "max.in.flight.requests.per.connection",
        Client,
        Producer,
        Shown,
        None,
    ),
    row(
        "max.in.flight",
        Client,
        Producer,
        Shown,
        Some("max.in.flight.requests.per.connection"),
    ),
    row("metadata.recovery.strategy", Client, Both, Shown, None),
    row(
        "metadata.recovery.rebootstrap.trigger.ms",
        Client,
        Both,
        Shown,
        None,
    ),
    row(
        "topic.metadata.refresh.interval.ms",
        Client,
        Both,
        Shown,
        None,
    ),
    row("metadata.max.age.ms", Client, Both, Shown, None),
    row(
        "topic.metadata.refresh.fast.interval.ms",
        Client,
        Both,
        Shown,
        None,
    ),
    row("topic.metadata.refresh.fast.cnt", Client, Both, Shown, None),
    row("topic.metadata.refresh.sparse", Client, Both, Shown, None),
    row(
        "topic.metadata.propagation.max.ms",
        Client,
        Both,
        Shown,
        None,
    ),
    row("topic.blacklist", Client, Both, Shown, None),
    row("debug", Client, Both, Shown, None),
    row("socket.timeout.ms", Client, Both, Shown, None),
    row("socket.blocking.max.ms", Client, Both, Shown, None),
    row("socket.send.buffer.bytes", Client, Both, Shown, None),
    row("socket.receive.buffer.bytes", Client, Both, Shown, None),
    row("socket.keepalive.enable", Client, Both, Shown, None),
    row("socket.nagle.disable", Client, Both, Shown, None),
    row("socket.max.fails", Client, Both, Shown, None),
    row("broker.address.ttl", Client, Both, Shown, None),
    row("broker.address.family", Client, Both, Shown, None),
    row(
        "socket.connection.setup.timeout.ms",
        Client,
        Both,
        Shown,
        None,
    ),
    row("connections.max.idle.ms", Client, Both, Shown, None),
    row("reconnect.backoff.jitter.ms", Client, Both, Shown, None),
    row("reconnect.backoff.ms", Client, Both, Shown, None),
    row("reconnect.backoff.max.ms", Client, Both, Shown, None),
    row("statistics.interval.ms", Client, Both, Shown, None),
    row("enabled_events", Client, Both, Shown, None),
    row("error_cb", Client, Both, Api, None),
    row("throttle_cb", Client, Both, Api, None),
    row("stats_cb", Client, Both, Api, None),
    row("log_cb", Client, Both, Api, None),
    row("log_level", Client, Both, Shown, None),
    row("log.queue", Client, Both, Shown, None),
    row("log.thread.name", Client, Both, Shown, None),
    row("enable.random.seed", Client, Both, Shown, None),
    row("log.connection.close", Client, Both, Shown, None),
    row("background_event_cb", Client, Both, Api, None),
    row("socket_cb", Client, Both, Api, None),
    row("connect_cb", Client, Both, Api, None),
    row("closesocket_cb", Client, Both, Api, None),
    row("open_cb", Client, Both, Api, None),
    row("resolve_cb", Client, Both, Api, None),
    row("opaque", Client, Both, Api, None),
    row("default_topic_conf", Client, Both, Api, None),
    row("internal.termination.signal", Client, Both, Shown, None),
    row("api.version.request", Client, Both, Shown, None),
    row("api.version.request.timeout.ms", Client, Both, Shown, None),
    row("api.version.fallback.ms", Client, Both, Shown, None),
    row("broker.version.fallback", Client, Both, Shown, None),
    row("allow.auto.create.topics", Client, Both, Shown, None),
    row("security.protocol", Client, Both, Shown, None),
    row("ssl.cipher.suites", Client, Both, Shown, None),
    row("ssl.curves.list", Client, Both, Shown, None),
    row("ssl.sigalgs.list", Client, Both, Shown, None),
    row("ssl.key.location", Client, Both, Shown, None),
    row("ssl.key.password", Client, Both, Secret, None),
    row("ssl.key.pem", Client, Both, Secret, None),
    row("ssl_key", Client, Both, Api, None),
    row("ssl.certificate.location", Client, Both, Shown, None),
    row("ssl.certificate.pem", Client, Both, Shown, None),
    row("ssl_certificate", Client, Both, Api, None),
    row("ssl.ca.location", Client, Both, Shown, None),
    row("https.ca.location", Client, Both, Shown, None),
    row("https.ca.pem", Client, Both, Shown, None),
    row("ssl.ca.pem", Client, Both, Shown, None),
    row("ssl_ca", Client, Both, Api, None),
    row("ssl.ca.certificate.stores", Client, Both, Shown, None),
    row("ssl.crl.location", Client, Both, Shown, None),
    row("ssl.keystore.location", Client, Both, Shown, None),
    row("ssl.keystore.password", Client, Both, Secret, None),
    row("ssl.providers", Client, Both, Shown, None),
    row("ssl.engine.location", Client, Both, Shown, None),
    row("ssl.engine.id", Client, Both, Shown, None),
    row("ssl_engine_callback_data", Client, Both, Api, None),
    row(
        "enable.ssl.certificate.verification",
        Client,
        Both,
        Shown,
        None,
    ),
    row(
        "ssl.endpoint.identification.algorithm",
        Client,
        Both,
        Shown,
        None,
    ),
    row("ssl.certificate.verify_cb", Client, Both, Api, None),
    row(
        "sasl.mechanisms",
        Client,
        Both,
        Shown,
        Some("sasl.mechanism"),
    ),
    row("sasl.mechanism", Client, Both, Shown, None),
    row("sasl.kerberos.service.name", Client, Both, Shown, None),
    row("sasl.kerberos.principal", Client, Both, Shown, None),
    row("sasl.kerberos.kinit.cmd", Client, Both, Secret, None),
    row("sasl.kerberos.keytab", Client, Both, Shown, None),
    row(
        "sasl.kerberos.min.time.before.relogin",
        Client,
        Both,
        Shown,
        None,
    ),
    row("sasl.username", Client, Both, Shown, None),
    row("sasl.password", Client, Both, Secret, None),
    row("sasl.oauthbearer.config", Client, Both, Secret, None),
    row(
        "enable.sasl.oauthbearer.unsecure.jwt",
        Client,
        Both,
        Shown,
        None,
    ),
    row("oauthbearer_token_refresh_cb", Client, Both, Api, None),
    row("sasl.oauthbearer.method", Client, Both, Shown, None),
    row("sasl.oauthbearer.client.id", Client, Both, Shown, None),
    row(
        "sasl.oauthbearer.client.credentials.client.id",
        Client,
        Both,
        Shown,
        Some("sasl.oauthbearer.client.id"),
    ),
    row(
        "sasl.oauthbearer.client.credentials.client.secret",
        Client,
        Both,
        Secret,
        Some("sasl.oauthbearer.client.secret"),
    ),
    row("sasl.oauthbearer.client.secret", Client, Both, Secret, None),
    row("sasl.oauthbearer.scope", Client, Both, Shown, None),
    row("sasl.oauthbearer.extensions", Client, Both, Secret, None),
    row(
        "sasl.oauthbearer.token.endpoint.url",
        Client,
        Both,
        Shown,
        None,
    ),
    row("sasl.oauthbearer.grant.type", Client, Both, Shown, None),
    row(
        "sasl.oauthbearer.assertion.algorithm",
        Client,
        Both,
        Shown,
        None,
    ),
    row(
        "sasl.oauthbearer.assertion.private.key.file",
        Client,
        Both,
        Shown,
        None,
    ),
    row(
        "sasl.oauthbearer.assertion.private.key.passphrase",
        Client,
        Both,
        Secret,
        None,
    ),
    row(
        "sasl.oauthbearer.assertion.private.key.pem",
        Client,
        Both,
        Secret,
        None,
    ),
    row("sasl.oauthbearer.assertion.file", Client, Both, Shown, None),
    row(
        "sasl.oauthbearer.assertion.claim.aud",
        Client,
        Both,
        Shown,
        None,
    ),
    row(
        "sasl.oauthbearer.assertion.claim.exp.seconds",
        Client,
        Both,
        Shown,
        None,
    ),
    row(
        "sasl.oauthbearer.assertion.claim.iss",
        Client,
        Both,
        Shown,
        None,
    ),
    row(
        "sasl.oauthbearer.assertion.claim.jti.include",
        Client,
        Both,
        Shown,
        None,
    ),
    row(
        "sasl.oauthbearer.assertion.claim.nbf.seconds",
        Client,
        Both,
        Shown,
        None,
    ),
    row(
        "sasl.oauthbearer.assertion.claim.sub",
        Client,
        Both,
        Shown,
        None,
    ),
    row(
        "sasl.oauthbearer.assertion.jwt.template.file",
        Client,
        Both,
        Shown,
        None,
    ),
    row(
        "sasl.oauthbearer.metadata.authentication.type",
        Client,
        Both,
        Shown,
        None,
    ),
    row("plugin.library.paths", Client, Both, Shown, None),
    row("interceptors", Client, Both, Api, None),
    row("group.id", Client, Consumer, Shown, None),
    row("group.instance.id", Client, Consumer, Shown, None),
    row(
        "partition.assignment.strategy",
        Client,
        Consumer,
        Shown,
        None,
    ),
    row("session.timeout.ms", Client, Consumer, Shown, None),
    row("heartbeat.interval.ms", Client, Consumer, Shown, None),
    row("group.protocol.type", Client, Consumer, Shown, None),
    row("group.protocol", Client, Consumer, Shown, None),
    row("group.remote.assignor", Client, Consumer, Shown, None),
    row(
        "coordinator.query.interval.ms",
        Client,
        Consumer,
        Shown,
        None,
    ),
    row("max.poll.interval.ms", Client, Consumer, Shown, None),
    row("enable.auto.commit", Client, Consumer, Shown, None),
    row("auto.commit.interval.ms", Client, Consumer, Shown, None),
    row("enable.auto.offset.store", Client, Consumer, Shown, None),
    row("queued.min.messages", Client, Consumer, Shown, None),
    row("queued.max.messages.kbytes", Client, Consumer, Shown, None),
    row("fetch.wait.max.ms", Client, Consumer, Shown, None),
    row("fetch.queue.backoff.ms", Client, Consumer, Shown, None),
    row(
        "fetch.message.max.bytes",
        Client,
        Consumer,
        Shown,
        Some("max.partition.fetch.bytes"),
    ),
    row("max.partition.fetch.bytes", Client, Consumer, Shown, None),
    row("fetch.max.bytes", Client, Consumer, Shown, None),
    row("fetch.min.bytes", Client, Consumer, Shown, None),
    row("fetch.error.backoff.ms", Client, Consumer, Shown, None),
    row("offset.store.method", Client, Consumer, Shown, None),
    row("isolation.level", Client, Consumer, Shown, None),
    row("consume_cb", Client, Consumer, Api, None),
    row("rebalance_cb", Client, Consumer, Api, None),
    row("offset_commit_cb", Client, Consumer, Api, None),
    row("enable.partition.eof", Client, Consumer, Shown, None),
    row("check.crcs", Client, Consumer, Shown, None),
    row("client.rack", Client, Both, Shown, None),
    row("transactional.id", Client, Producer, Shown, None),
    row("transaction.timeout.ms", Client, Producer, Shown, None),
    row("enable.idempotence", Client, Producer, Shown, None),
    row("enable.gapless.guarantee", Client, Producer, Shown, None),
    row(
        "queue.buffering.max.messages",
        Client,
        Producer,
        Shown,
        None,
    ),
    row("queue.buffering.max.kbytes", Client, Producer, Shown, None),
    row(
        "queue.buffering.max.ms",
        Client,
        Producer,
        Shown,
        Some("linger.ms"),
    ),
    row("linger.ms", Client, Producer, Shown, None),
    row(
        "message.send.max.retries",
        Client,
        Producer,
        Shown,
        Some("retries"),
    ),
    row("retries", Client, Producer, Shown, None),
    row("retry.backoff.ms", Client, Both, Shown, None),
    row("retry.backoff.max.ms", Client, Both, Shown, None),
    row(
        "queue.buffering.backpressure.threshold",
        Client,
        Producer,
        Shown,
        None,
    ),
    row(
        "compression.codec",
        Client,
        Producer,
        Shown,
        Some("compression.type"),
    ),
    row("compression.type", Client, Producer, Shown, None),
    row("batch.num.messages", Client, Producer, Shown, None),
    row("batch.size", Client, Producer, Shown, None),
    row("delivery.report.only.error", Client, Producer, Shown, None),
    row("dr_cb", Client, Producer, Api, None),
    row("dr_msg_cb", Client, Producer, Api, None),
    row(
        "sticky.partitioning.linger.ms",
        Client,
        Producer,
        Shown,
        None,
    ),
    row("client.dns.lookup", Client, Both, Shown, None),
    row("enable.metrics.push", Client, Both, Shown, None),
    row(
        "request.required.acks",
        Topic,
        Producer,
        Shown,
        Some("acks"),
    ),
    row("acks", Topic, Producer, Shown, None),
    row("request.timeout.ms", Topic, Producer, Shown, None),
    row("message.timeout.ms", Topic, Producer, Shown, None),
    row(
        "delivery.timeout.ms",
        Topic,
        Producer,
        Shown,
        Some("message.timeout.ms"),
    ),
    row("queuing.strategy", Topic, Producer, Shown, None),
    row("produce.offset.report", Topic, Producer, Shown, None),
    row("partitioner", Topic, Producer, Shown, None),
    row("partitioner_cb", Topic, Producer, Api, None),
    row("msg_order_cmp", Topic, Producer, Api, None),
    row("opaque", Topic, Both, Api, None),
    row(
        "compression.codec",
        Topic,
        Producer,
        Shown,
        Some("compression.type"),
    ),
    row("compression.type", Topic, Producer, Shown, None),
    row("compression.level", Topic, Producer, Shown, None),
    row("auto.commit.enable", Topic, Consumer, Shown, None),
    row(
        "enable.auto.commit",
        Topic,
        Consumer,
        Shown,
        Some("auto.commit.enable"),
    ),
    row("auto.commit.interval.ms", Topic, Consumer, Shown, None),
    row("auto.offset.reset", Topic, Consumer, Shown, None),
    row("offset.store.path", Topic, Consumer, Shown, None),
    row(
        "offset.store.sync.interval.ms",
        Topic,
        Consumer,
        Shown,
        None,
    ),
    row("offset.store.method", Topic, Consumer, Shown, None),
    row(
        "consume.callback.max.messages",
        Topic,
        Consumer,
        Shown,
        None,
    ),
];

/// The row of `name` at `level`.
pub fn at(level: Level, name: &str) -> Option<&'static Property> {
    PROPERTIES
        .iter()
        .find(|p| p.level == level && p.name == name)
}

/// The row a name set on a client's configuration reaches: a global
/// property's, else the default topic configuration's (librdkafka's
/// `rd_kafka_conf_set`); with `topic.` before it, a topic property's if
/// there is one.
pub fn lookup(key: &str) -> Option<&'static Property> {
    if let Some(rest) = key.strip_prefix("topic.") {
        if let Some(property) = at(Topic, rest) {
            return Some(property);
        }
    }
    at(Client, key).or_else(|| at(Topic, key))
}

/// -X properties a consumer does not take (librdkafka warns about each).
pub fn is_producer_only(key: &str) -> bool {
    lookup(key).is_some_and(|p| p.role == Producer)
}

/// Whether `name` is a property whose value walrelay may show.
pub fn is_shown(name: &str) -> bool {
    PROPERTIES
        .iter()
        .any(|p| p.name == name && p.value == Shown)
}

/// Whether `name` is a property whose value is a secret.
pub fn is_secret(name: &str) -> bool {
    PROPERTIES
        .iter()
        .any(|p| p.name == name && p.value == Secret)
}

/// Every name of a property set by name: the table's, less those set
/// through the API.
pub fn names() -> impl Iterator<Item = &'static str> {
    PROPERTIES.iter().filter(|p| p.value != Api).map(|p| p.name)
}

/// Names of `level`, in the table's order.
pub fn names_at(level: Level) -> Vec<&'static str> {
    PROPERTIES
        .iter()
        .filter(|p| p.level == level)
        .map(|p| p.name)
        .collect()
}

/// Each alias at `level` and the name walrelay reads it as.
pub fn aliases_at(level: Level) -> Vec<(&'static str, &'static str)> {
    PROPERTIES
        .iter()
        .filter(|p| p.level == level)
        .filter_map(|p| Some((p.name, p.reads_as?)))
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

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

    /// A property of librdkafka's table: its section, its name, who reads
    /// it, and the property it is an alias for, if it is one.
    pub(crate) struct Row {
        pub topic: bool,
        pub name: String,
        pub role: String,
        pub alias_for: Option<String>,
    }

    pub(crate) fn librdkafka_rows() -> Vec<Row> {
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
                role: columns[1].to_string(),
                alias_for,
            });
        }
        rows
    }

    #[test]
    fn the_table_is_librdkafka_s_own_row_for_row_and_reader_for_reader() {
        let ours: Vec<(bool, &str)> = PROPERTIES
            .iter()
            .map(|p| (p.level == Topic, p.name))
            .collect();
        let rows = librdkafka_rows();
        let theirs: Vec<(bool, &str)> = rows.iter().map(|r| (r.topic, r.name.as_str())).collect();
        assert_eq!(ours, theirs);
        for (property, row) in PROPERTIES.iter().zip(&rows) {
            let role = match property.role {
                Both => "*",
                Producer if property.name.starts_with("max.in.flight") => "*",
                Producer => "P",
                Consumer => "C",
            };
            assert_eq!(role, row.role, "{}", property.name);
        }
    }

    #[test]
    fn a_consumer_is_given_no_producer_property_in_any_spelling() {
        for key in [
            "acks",
            "request.required.acks",
            "topic.acks",
            "linger.ms",
            "queue.buffering.max.ms",
            "max.in.flight",
            "topic.compression.type",
            "compression.codec",
            "transactional.id",
        ] {
            assert!(is_producer_only(key), "{key}");
        }
        for key in [
            "security.protocol",
            "bootstrap.servers",
            "group.id",
            "topic.metadata.refresh.interval.ms",
            "auto.offset.reset",
            "no.such.property",
        ] {
            assert!(!is_producer_only(key), "{key}");
        }
    }
}
