//! Command-line flags (each with an env var) and their validation.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::error::{Error, Result};
use crate::outbox::mapping::MappingConfig;
pub use crate::postgres::names::TableName;
use crate::postgres::PgTarget;

#[derive(Parser)]
#[command(
    name = "walrelay",
    version,
    about = "Publishes a Postgres transactional outbox to Kafka through a pgoutput logical replication slot"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,

    /// Log lines on stderr: text for people, json for log pipelines (one object per line).
    #[arg(long, global = true, env = "WALRELAY_LOG_FORMAT", value_enum, default_value_t = crate::logging::LogFormat::Text)]
    pub log_format: crate::logging::LogFormat,
}

#[derive(Subcommand)]
pub enum Command {
    /// Stream outbox inserts to Kafka until stopped (SIGTERM or SIGINT).
    Run(Box<RunArgs>),
    /// Check Postgres and Kafka are ready for `run` (same flags) and print each failure's fix.
    Check(Box<CheckArgs>),
    /// Print the slot's state for people on call; exits non-zero when the slot is missing or lost.
    Status(StatusArgs),
    /// Print the walrelay command equivalent to a Debezium connector with the outbox EventRouter.
    MigrateFromDebezium {
        /// The connector configuration: Kafka Connect JSON or a .properties file.
        config: std::path::PathBuf,
        /// Take over Debezium's pgoutput slot after it stopped, instead of a new slot.
        #[arg(long)]
        reuse_slot: bool,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) of walrelay or of one subcommand.
    Man {
        /// A subcommand, e.g. run, for its own page walrelay-run(1).
        subcommand: Option<String>,
    },
}

/// The database, slot and publication: shared by `run` and `status`.
#[derive(Args, Clone)]
pub struct ConnArgs {
    /// Postgres connection: a URL (postgres://user:pass@host:5432/db) or key=value string.
    #[arg(long, env = "WALRELAY_PG_URL", hide_env_values = true)]
    pub pg_url: String,

    /// The logical replication slot; created with pgoutput if absent, never dropped.
    #[arg(long, env = "WALRELAY_SLOT", default_value = "walrelay")]
    pub slot: String,

    /// The publication; created for the table with publish = 'insert' if absent.
    #[arg(long, env = "WALRELAY_PUBLICATION", default_value = "walrelay")]
    pub publication: String,
}

#[derive(Args, Clone)]
pub struct StatusArgs {
    #[command(flatten)]
    pub conn: ConnArgs,

    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Clone)]
pub struct CheckArgs {
    #[command(flatten)]
    pub run: RunArgs,

    /// Print JSON (name, status, detail, fix of each check) instead of a checklist.
    #[arg(long, env = "WALRELAY_CHECK_JSON")]
    pub json: bool,
}

#[derive(Args, Clone)]
pub struct RunArgs {
    #[command(flatten)]
    pub conn: ConnArgs,

    /// Kafka bootstrap servers, comma-separated host:port list.
    #[arg(long, env = "WALRELAY_KAFKA_BROKERS")]
    pub kafka_brokers: String,

    /// The outbox table, as schema.table (schema defaults to public).
    #[arg(long, env = "WALRELAY_TABLE", default_value = "public.outbox")]
    pub table: TableName,

    /// Where events come from: INSERTs into --table, or pg_logical_emit_message (PostgreSQL 14+).
    #[arg(long, env = "WALRELAY_SOURCE", value_enum, default_value_t = Source::Table)]
    pub source: Source,

    /// With --source messages: the prefix of the messages that are events.
    #[arg(long, env = "WALRELAY_MESSAGE_PREFIX", default_value = "walrelay")]
    pub message_prefix: String,

    /// The column whose value picks the topic (Debezium: route.by.field).
    #[arg(long, env = "WALRELAY_ROUTE_BY_FIELD", default_value = "event_type")]
    pub route_by_field: String,

    /// Regex the route-by value must match whole; its groups feed --topic-replacement (route.topic.regex).
    #[arg(long, env = "WALRELAY_TOPIC_REGEX", default_value = crate::outbox::routing::DEFAULT_REGEX)]
    pub topic_regex: String,

    /// The topic name; ${routedByValue} and the regex's groups are replaced (route.topic.replacement).
    #[arg(
        long,
        env = "WALRELAY_TOPIC_REPLACEMENT",
        default_value = "outbox.event.${routedByValue}"
    )]
    pub topic_replacement: String,

    /// The column copied into the Kafka header "id" (table.field.event.id).
    #[arg(long, env = "WALRELAY_FIELD_EVENT_ID", default_value = "id")]
    pub field_event_id: String,

    /// The column that becomes the Kafka key (table.field.event.key).
    #[arg(long, env = "WALRELAY_FIELD_EVENT_KEY", default_value = "aggregate_id")]
    pub field_event_key: String,

    /// The column copied into the Kafka header "event_type"; '' for none (Debezium sends no such header).
    #[arg(long, env = "WALRELAY_FIELD_EVENT_TYPE", default_value = "event_type")]
    pub field_event_type: String,

    /// The column that becomes the Kafka value (table.field.event.payload).
    #[arg(long, env = "WALRELAY_FIELD_PAYLOAD", default_value = "payload")]
    pub field_payload: String,

    /// A timestamp (or epoch-milliseconds bigint) column for the Kafka timestamp [default: the commit time].
    #[arg(long, env = "WALRELAY_FIELD_TIMESTAMP")]
    pub field_timestamp: Option<String>,

    /// Extra columns: col:header[:alias], col:envelope[:alias] or col:partition, comma-separated.
    #[arg(
        long,
        env = "WALRELAY_FIELDS_ADDITIONAL_PLACEMENT",
        value_delimiter = ','
    )]
    pub fields_additional_placement: Vec<crate::outbox::placement::Placement>,

    /// What a --fields-additional-placement column missing from the table does (table.field.additional.missing).
    #[arg(long, env = "WALRELAY_FIELDS_ADDITIONAL_MISSING", value_enum, default_value_t = MissingField::Error)]
    pub fields_additional_missing: MissingField,

    /// Embed a text payload that holds JSON as JSON (not as a string) in an envelope.
    #[arg(long, env = "WALRELAY_EXPAND_JSON_PAYLOAD")]
    pub expand_json_payload: bool,

    /// What --expand-json-payload does with null fields (table.json.payload.null.behavior).
    #[arg(long, env = "WALRELAY_JSON_PAYLOAD_NULL_BEHAVIOR", value_enum, default_value_t = crate::outbox::expansion::NullBehavior::Ignore)]
    pub json_payload_null_behavior: crate::outbox::expansion::NullBehavior,

    /// What --expand-json-payload does with empty arrays (table.json.payload.empty.array.behavior).
    #[arg(long, env = "WALRELAY_JSON_PAYLOAD_EMPTY_ARRAY_BEHAVIOR", value_enum, default_value_t = crate::outbox::expansion::EmptyArrayBehavior::Ignore)]
    pub json_payload_empty_array_behavior: crate::outbox::expansion::EmptyArrayBehavior,

    /// How numeric columns are written in headers and envelopes (Debezium: decimal.handling.mode).
    #[arg(long, env = "WALRELAY_DECIMAL_HANDLING_MODE", value_enum, default_value_t = crate::outbox::column::DecimalMode::Precise)]
    pub decimal_handling_mode: crate::outbox::column::DecimalMode,

    /// How keys are written: as Kafka Connect's StringConverter or JsonConverter (schemas.enable=false) would.
    #[arg(long, env = "WALRELAY_KEY_FORMAT", value_enum, default_value_t = crate::outbox::format::Format::String)]
    pub key_format: crate::outbox::format::Format,

    /// How values are written: as Kafka Connect's StringConverter or JsonConverter (schemas.enable=false) would.
    #[arg(long, env = "WALRELAY_VALUE_FORMAT", value_enum, default_value_t = crate::outbox::format::Format::String)]
    pub value_format: crate::outbox::format::Format,

    /// A NULL or empty payload becomes a tombstone (a null Kafka value).
    #[arg(long, env = "WALRELAY_TOMBSTONE_ON_EMPTY_PAYLOAD")]
    pub tombstone_on_empty_payload: bool,

    /// What an UPDATE of an outbox row does, if the publication publishes updates (table.op.invalid.behavior).
    #[arg(long, env = "WALRELAY_ON_UPDATE", value_enum, default_value_t = OnUpdate::Warn)]
    pub on_update: OnUpdate,

    /// Address for /metrics, /healthz and /readyz.
    #[arg(long, env = "WALRELAY_METRICS_ADDR", default_value = "127.0.0.1:9187")]
    pub metrics_addr: SocketAddr,

    /// A librdkafka property, key=value; repeatable (e.g. -X security.protocol=SASL_SSL).
    #[arg(
        short = 'X',
        long = "kafka-property",
        env = "WALRELAY_KAFKA_PROPERTIES",
        value_delimiter = ',',
        hide_env_values = true,
        value_parser = parse_property
    )]
    pub kafka_properties: Vec<(String, String)>,

    /// What to do with a poison event: one Kafka rejects for good, a NULL route-by value, an unmappable row, a topic walrelay may not use.
    #[arg(long, env = "WALRELAY_ON_POISON", value_enum, default_value_t = OnPoison::Halt)]
    pub on_poison: OnPoison,

    /// Where --on-poison dead-letter publishes poison events.
    #[arg(
        long,
        env = "WALRELAY_DEAD_LETTER_TOPIC",
        default_value = "walrelay.dead-letter"
    )]
    pub dead_letter_topic: String,

    /// On PostgreSQL 17+, create the slot with failover = true so a standby can take it over (--failover-slot=false: off).
    #[arg(
        long,
        env = "WALRELAY_FAILOVER_SLOT",
        default_value_t = true,
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub failover_slot: bool,

    /// Partitions for topics walrelay creates.
    #[arg(long, env = "WALRELAY_TOPIC_PARTITIONS", default_value_t = 3)]
    pub topic_partitions: i32,

    /// Replication factor for topics walrelay creates [default: the broker's].
    #[arg(long, env = "WALRELAY_TOPIC_REPLICATION_FACTOR")]
    pub topic_replication_factor: Option<i32>,

    /// Create missing topics; with false, an event for a missing topic is poison.
    #[arg(long, env = "WALRELAY_TOPIC_CREATE", default_value_t = true, action = clap::ArgAction::Set)]
    pub topic_create: bool,

    /// Regex every routed topic must match whole; an event for another topic is poison.
    #[arg(long, env = "WALRELAY_TOPIC_ALLOW_REGEX")]
    pub topic_allow_regex: Option<String>,

    /// Most topics walrelay creates per minute (0: no cap); past it, events for new topics are poison.
    #[arg(
        long,
        env = "WALRELAY_TOPIC_CREATE_MAX_PER_MINUTE",
        default_value_t = 60
    )]
    pub topic_create_max_per_minute: u32,

    /// max.message.bytes of the dead-letter topic walrelay creates, so large poison events keep their value.
    #[arg(
        long,
        env = "WALRELAY_DEAD_LETTER_MAX_MESSAGE_BYTES",
        default_value_t = 8_388_608
    )]
    pub dead_letter_max_message_bytes: usize,

    /// How long shutdown waits for in-flight deliveries before giving up on them.
    #[arg(long, env = "WALRELAY_SHUTDOWN_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,

    /// Most events produced but not yet acknowledged by Kafka; reading pauses beyond it.
    #[arg(long, env = "WALRELAY_MAX_INFLIGHT_EVENTS", default_value_t = 50_000)]
    pub max_inflight_events: usize,

    /// Most bytes (keys and values) produced but not yet acknowledged by Kafka.
    #[arg(long, env = "WALRELAY_MAX_INFLIGHT_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub max_inflight_bytes: usize,

    /// How often to send a standby status update to Postgres.
    #[arg(long, env = "WALRELAY_STATUS_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub status_interval: Duration,

    /// Longest wait between reconnect attempts.
    #[arg(long, env = "WALRELAY_RECONNECT_MAX_BACKOFF", default_value = "30s", value_parser = parse_duration)]
    pub reconnect_max_backoff: Duration,

    /// How often a standby polls a slot that another walrelay holds (active/passive).
    #[arg(long, env = "WALRELAY_STANDBY_POLL_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub standby_poll_interval: Duration,

    /// Create a new slot although this database remembers one that is now missing (after a loss or a failover without slot sync); events in between are not delivered.
    #[arg(long, env = "WALRELAY_RECREATE_MISSING_SLOT")]
    pub recreate_missing_slot: bool,

    /// Silence on the replication connection that counts as a dead server [default: the server's wal_sender_timeout, or 60s when it is 0].
    #[arg(long, env = "WALRELAY_REPLICATION_TIMEOUT", value_parser = parse_duration)]
    pub replication_timeout: Option<Duration>,

    /// Longest a session's start may take: connect, TLS, authentication, checks, slot creation, START_REPLICATION.
    #[arg(long, env = "WALRELAY_SETUP_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub setup_timeout: Duration,

    /// Most transactions read but not yet confirmed; reading pauses beyond it.
    #[arg(
        long,
        env = "WALRELAY_MAX_PENDING_TRANSACTIONS",
        default_value_t = 100_000
    )]
    pub max_pending_transactions: usize,

    /// How long to keep retrying before the first successful start; then exit non-zero.
    #[arg(long, env = "WALRELAY_STARTUP_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub startup_timeout: Duration,

    /// How often the watchdog reads the slot's state.
    #[arg(long, env = "WALRELAY_WATCHDOG_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    pub watchdog_interval: Duration,

    /// Slot lag that raises a warning (bytes; units like 512MiB or 1GB accepted).
    #[arg(long, env = "WALRELAY_LAG_WARN_BYTES", default_value = "1GiB", value_parser = parse_bytes)]
    pub lag_warn_bytes: u64,

    /// Slot lag that raises a critical alert.
    #[arg(long, env = "WALRELAY_LAG_CRITICAL_BYTES", default_value = "8GiB", value_parser = parse_bytes)]
    pub lag_critical_bytes: u64,

    /// Warn when less than this share of max_slot_wal_keep_size is left (safe_wal_size).
    #[arg(long, env = "WALRELAY_SAFE_WAL_WARN_RATIO", default_value_t = 0.2)]
    pub safe_wal_warn_ratio: f64,

    /// Events pending with no confirmed progress this long is a stall: alert and fail /readyz.
    #[arg(long, env = "WALRELAY_STALL_TIMEOUT", default_value = "2m", value_parser = parse_duration)]
    pub stall_timeout: Duration,

    /// POST a JSON document here on every change of alert level (http://host:port/path).
    #[arg(long, env = "WALRELAY_ALERT_WEBHOOK")]
    pub alert_webhook: Option<String>,
}

impl fmt::Debug for RunArgs {
    // The URL and the Kafka properties can hold passwords: only their shape is shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunArgs")
            .field("pg_url", &"<redacted>")
            .field("kafka_brokers", &self.kafka_brokers)
            .field("table", &self.table)
            .field("slot", &self.conn.slot)
            .field("publication", &self.conn.publication)
            .field("route_by_field", &self.route_by_field)
            .field("topic_replacement", &self.topic_replacement)
            .field(
                "kafka_properties",
                &self
                    .kafka_properties
                    .iter()
                    .map(|(k, _)| k)
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl ConnArgs {
    /// Parses the Postgres URL and checks the slot name.
    pub fn validate(&self) -> Result<PgTarget> {
        let pg = PgTarget::parse(&self.pg_url)?;
        let valid_slot = !self.slot.is_empty()
            && self.slot.len() <= 63
            && self
                .slot
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !valid_slot {
            return Err(Error::permanent(format!(
                "--slot {:?} is not a valid slot name: use up to 63 lower-case letters, digits and underscores",
                self.slot
            )));
        }
        Ok(pg)
    }
}

impl RunArgs {
    /// The `--field-*` flags as one mapping.
    pub fn mapping(&self) -> MappingConfig {
        MappingConfig {
            id: self.field_event_id.clone(),
            key: self.field_event_key.clone(),
            event_type: Some(self.field_event_type.clone()).filter(|c| !c.is_empty()),
            payload: self.field_payload.clone(),
            route_by: self.route_by_field.clone(),
            timestamp: self.field_timestamp.clone(),
            placements: self.fields_additional_placement.clone(),
            expand_json_payload: self.expand_json_payload,
            tombstone_on_empty_payload: self.tombstone_on_empty_payload,
            decimals: self.decimal_handling_mode,
            key_format: self.key_format,
            value_format: self.value_format,
            ignore_missing_placements: self.fields_additional_missing == MissingField::Ignore,
            expansion: crate::outbox::expansion::Behaviour {
                keep_null_fields: self.json_payload_null_behavior
                    == crate::outbox::expansion::NullBehavior::OptionalBytes,
                keep_empty_arrays: self.json_payload_empty_array_behavior
                    == crate::outbox::expansion::EmptyArrayBehavior::OptionalString,
            },
        }
    }

    /// The rules for the topics walrelay produces to.
    pub fn topic_policy(&self) -> Result<crate::kafka::topics::TopicPolicy> {
        let allow = self
            .topic_allow_regex
            .as_deref()
            .map(|r| regex::Regex::new(&format!("^(?:{r})$")))
            .transpose()
            .map_err(|e| {
                Error::permanent(format!(
                    "--topic-allow-regex is not a valid regular expression: {e}"
                ))
            })?;
        // The broker checks the compressed size, which walrelay cannot know.
        let compressed = self.kafka_properties.iter().any(|(k, v)| {
            matches!(k.as_str(), "compression.type" | "compression.codec") && v != "none"
        });
        Ok(crate::kafka::topics::TopicPolicy::new(
            self.topic_create,
            allow,
            self.topic_create_max_per_minute,
            self.topic_partitions,
            self.topic_replication_factor,
            self.dead_letter_topic.clone(),
            self.dead_letter_max_message_bytes,
            !compressed,
        ))
    }

    /// Parses the Postgres URL and checks the values clap cannot.
    pub fn validate(&self) -> Result<PgTarget> {
        let pg = self.conn.validate()?;
        if self.topic_partitions < 1 {
            return Err(Error::permanent("--topic-partitions must be at least 1"));
        }
        if self.max_inflight_events == 0
            || self.max_inflight_bytes == 0
            || self.max_pending_transactions == 0
        {
            return Err(Error::permanent(
                "--max-inflight-events, --max-inflight-bytes and --max-pending-transactions \
                 must be above 0",
            ));
        }
        if self
            .replication_timeout
            .is_some_and(|t| t < Duration::from_secs(1))
        {
            return Err(Error::permanent(
                "--replication-timeout must be at least 1s (e.g. 30s)",
            ));
        }
        crate::outbox::routing::Router::new(&self.topic_regex, &self.topic_replacement)
            .map_err(Error::permanent)?;
        crate::outbox::routing::validate_topic(&self.dead_letter_topic)
            .map_err(|e| Error::permanent(format!("--dead-letter-topic: {e}")))?;
        // Kafka's own bounds for max.message.bytes (an int) and librdkafka's for message.max.bytes.
        if !(1000..=1_000_000_000).contains(&self.dead_letter_max_message_bytes) {
            return Err(Error::permanent(
                "--dead-letter-max-message-bytes must be between 1000 and 1000000000",
            ));
        }
        self.topic_policy()?;
        if self.lag_warn_bytes > self.lag_critical_bytes {
            return Err(Error::permanent(
                "--lag-warn-bytes must not be above --lag-critical-bytes",
            ));
        }
        if !(0.0..=1.0).contains(&self.safe_wal_warn_ratio) {
            return Err(Error::permanent(
                "--safe-wal-warn-ratio must be between 0 and 1 (e.g. 0.2 for 20%)",
            ));
        }
        Ok(pg)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Source {
    /// INSERTs into the outbox table.
    Table,
    /// Transactional pg_logical_emit_message(true, prefix, content) calls: no table at all.
    Messages,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnUpdate {
    /// Log a warning and go on.
    Warn,
    /// Log an error and go on.
    Error,
    /// Stop walrelay.
    Fatal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MissingField {
    /// Stop with an error naming the column.
    Error,
    /// Leave the header or envelope field out.
    Ignore,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnPoison {
    /// Stop with an error naming the event; the slot stays before it.
    Halt,
    /// Publish it to --dead-letter-topic with the reason in headers, and go on.
    DeadLetter,
}

fn parse_property(s: &str) -> std::result::Result<(String, String), String> {
    let (key, value) = s
        .split_once('=')
        .ok_or_else(|| "expected key=value, e.g. -X linger.ms=5".to_string())?;
    if key.trim().is_empty() {
        return Err("the property name is empty; expected key=value".into());
    }
    Ok((key.trim().to_string(), value.to_string()))
}

/// Bytes with an optional unit: 1048576, 512MiB, 1GB, 10 GiB.
fn parse_bytes(s: &str) -> std::result::Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("expected a size like 512MiB or 1073741824, got {s:?}"))?;
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "kib" | "k" => 1 << 10,
        "mb" => 1_000_000,
        "mib" | "m" => 1 << 20,
        "gb" => 1_000_000_000,
        "gib" | "g" => 1 << 30,
        "tb" => 1_000_000_000_000,
        "tib" | "t" => 1 << 40,
        other => {
            return Err(format!(
                "unknown size unit {other:?} (use B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)"
            ))
        }
    };
    number
        .checked_mul(factor)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 500ms, 10s, 2m)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> RunArgs {
        let mut argv = vec![
            "walrelay",
            "run",
            "--pg-url",
            "postgres://u:hunter2@localhost/db",
            "--kafka-brokers",
            "localhost:9092",
        ];
        argv.extend_from_slice(extra);
        let Command::Run(args) = Cli::try_parse_from(argv).unwrap().command else {
            panic!("expected run");
        };
        *args
    }

    #[test]
    fn defaults_follow_the_documented_values() {
        let a = args(&[]);
        assert_eq!(a.table.to_string(), "public.outbox");
        assert_eq!(a.conn.slot, "walrelay");
        assert_eq!(a.lag_warn_bytes, 1 << 30);
        assert_eq!(a.route_by_field, "event_type");
        assert_eq!(a.topic_replacement, "outbox.event.${routedByValue}");
        assert_eq!(a.metrics_addr.to_string(), "127.0.0.1:9187");
        assert_eq!(a.topic_partitions, 3);
        assert!(a.failover_slot);
        a.validate().unwrap();
    }

    #[test]
    fn failover_slot_is_on_unless_turned_off_explicitly() {
        assert!(args(&["--failover-slot"]).failover_slot);
        assert!(!args(&["--failover-slot=false"]).failover_slot);
        assert!(!args(&["--failover-slot", "false"]).failover_slot);
    }

    #[test]
    fn kafka_properties_repeat_and_keep_equals_signs_in_values() {
        let a = args(&["-X", "linger.ms=5", "-X", "sasl.jaas.config=a=b"]);
        assert_eq!(
            a.kafka_properties,
            vec![
                ("linger.ms".into(), "5".into()),
                ("sasl.jaas.config".into(), "a=b".into())
            ]
        );
    }

    #[test]
    fn debug_output_hides_the_password() {
        let a = args(&["-X", "sasl.password=topsecret"]);
        let text = format!("{a:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(!text.contains("topsecret"), "{text}");
    }

    #[test]
    fn sizes_accept_binary_and_decimal_units() {
        assert_eq!(parse_bytes("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_bytes("1GB").unwrap(), 1_000_000_000);
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert!(parse_bytes("12 parsecs").is_err());
    }

    #[test]
    fn invalid_slot_name_is_rejected_with_the_rule() {
        let err = args(&["--slot", "My-Slot"]).validate().unwrap_err();
        assert!(err.to_string().contains("lower-case letters"), "{err}");
    }
}
