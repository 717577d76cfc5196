//! The flags of `walrelay run` (and `check`), in groups that match the
//! sections of `--help` and of docs/configuration.md.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;

use super::{
    parse_bytes, parse_duration, parse_properties, ConnArgs, MissingField, OnPoison, OnUpdate,
    Properties, Source,
};
use crate::outbox::column::DecimalMode;
use crate::outbox::expansion::{EmptyArrayBehavior, NullBehavior};
use crate::outbox::format::Format;
use crate::outbox::placement::Placement;
use crate::postgres::names::TableName;

#[derive(Args, Clone)]
pub struct RunArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// When --pg-url names a standby (PostgreSQL 16+): its primary, same database, where walrelay writes its state table and asks for the snapshot slot creation waits for.
    #[arg(long, env = "WALRELAY_PG_PRIMARY_URL", hide_env_values = true)]
    pub pg_primary_url: Option<String>,
    #[command(flatten)]
    pub aws: super::AwsArgs,
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub mapping: MappingArgs,
    #[command(flatten)]
    pub kafka: KafkaArgs,
    #[command(flatten)]
    pub schema_registry: super::SchemaRegistryArgs,
    #[command(flatten)]
    pub poison: PoisonArgs,
    #[command(flatten)]
    pub delivery: super::DeliveryArgs,
    #[command(flatten)]
    pub flow: FlowArgs,
    #[command(flatten)]
    pub watchdog: WatchdogArgs,
    #[command(flatten)]
    pub retention: super::retention::RetentionArgs,
    #[command(flatten)]
    pub snapshot: SnapshotArgs,
}

/// The first start: rows already in the outbox, published before streaming.
#[derive(Args, Clone)]
#[command(next_help_heading = "First start")]
pub struct SnapshotArgs {
    /// On the start that creates the slot, publish the outbox rows this SQL condition selects, as of the slot's exported snapshot, then stream (e.g. "published_at IS NULL").
    #[arg(long, env = "WALRELAY_SNAPSHOT_WHERE", value_name = "SQL")]
    pub snapshot_where: Option<String>,

    /// The order the snapshot's rows are sent in, as SQL ORDER BY columns; as for replay's --order-by, one that cannot keep each key's events in the order they were written is refused. Default: a column that grows with each insert.
    #[arg(long, env = "WALRELAY_SNAPSHOT_ORDER_BY", value_name = "COLUMNS")]
    pub snapshot_order_by: Option<String>,
}

/// Where events come from in the database.
#[derive(Args, Clone)]
#[command(next_help_heading = "Source")]
pub struct SourceArgs {
    /// The outbox table, as schema.table (schema defaults to public); repeat or comma-separate for several tables mapped alike (table.include.list).
    #[arg(
        long,
        env = "WALRELAY_TABLE",
        default_value = "public.outbox",
        value_delimiter = ','
    )]
    pub table: Vec<TableName>,

    /// Where events come from: INSERTs into --table, or pg_logical_emit_message (PostgreSQL 14+).
    #[arg(long, env = "WALRELAY_SOURCE", value_enum, default_value_t = Source::Table)]
    pub source: Source,

    /// With --source messages: the prefix of the messages that are events.
    #[arg(long, env = "WALRELAY_MESSAGE_PREFIX", default_value = "walrelay")]
    pub message_prefix: String,

    /// What an UPDATE of an outbox row does (table.op.invalid.behavior); error and fatal need a publication that publishes UPDATEs, which walrelay creates so and otherwise refuses to start.
    #[arg(long, env = "WALRELAY_ON_UPDATE", value_enum, default_value_t = OnUpdate::Warn)]
    pub on_update: OnUpdate,

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

    /// Create a new slot although this database remembers one that is now missing (after a loss or a failover without slot sync); events in between are not delivered.
    #[arg(long, env = "WALRELAY_RECREATE_MISSING_SLOT")]
    pub recreate_missing_slot: bool,

    /// Accept an outbox table that was replaced or left the publication since walrelay last read it, after its rows in between were published again.
    #[arg(long, env = "WALRELAY_ACCEPT_OUTBOX_CHANGE")]
    pub accept_outbox_change: bool,

    /// Record this instance's tables, source, prefix and routing for the slot although other ones are recorded; instances with those then stop.
    #[arg(long, env = "WALRELAY_ACCEPT_CONFIG_CHANGE")]
    pub accept_config_change: bool,
}

/// How a row becomes a Kafka record, and which topic it goes to (Debezium's outbox event router).
#[derive(Args, Clone)]
#[command(next_help_heading = "Mapping and routing")]
pub struct MappingArgs {
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

    /// An int4 column whose value is the envelope schema's version under --value-format json-with-schema (table.field.event.schema.version).
    #[arg(long, env = "WALRELAY_FIELD_SCHEMA_VERSION")]
    pub field_schema_version: Option<String>,

    /// Extra columns: col:header[:alias], col:envelope[:alias] or col:partition, comma-separated.
    #[arg(
        long,
        env = "WALRELAY_FIELDS_ADDITIONAL_PLACEMENT",
        value_delimiter = ','
    )]
    pub fields_additional_placement: Vec<Placement>,

    /// What a --fields-additional-placement column missing from the table does (table.field.additional.missing).
    #[arg(long, env = "WALRELAY_FIELDS_ADDITIONAL_MISSING", value_enum, default_value_t = MissingField::Error)]
    pub fields_additional_missing: MissingField,

    /// Write a payload that holds a JSON object as that object, not as a string, with the schema Debezium infers for it under json-with-schema (table.expand.json.payload).
    #[arg(long, env = "WALRELAY_EXPAND_JSON_PAYLOAD")]
    pub expand_json_payload: bool,

    /// What --expand-json-payload does with null fields (table.json.payload.null.behavior).
    #[arg(long, env = "WALRELAY_JSON_PAYLOAD_NULL_BEHAVIOR", value_enum, default_value_t = NullBehavior::Ignore)]
    pub json_payload_null_behavior: NullBehavior,

    /// What --expand-json-payload does with empty arrays (table.json.payload.empty.array.behavior).
    #[arg(long, env = "WALRELAY_JSON_PAYLOAD_EMPTY_ARRAY_BEHAVIOR", value_enum, default_value_t = EmptyArrayBehavior::Ignore)]
    pub json_payload_empty_array_behavior: EmptyArrayBehavior,

    /// How numeric columns are written in headers and envelopes (Debezium: decimal.handling.mode).
    #[arg(long, env = "WALRELAY_DECIMAL_HANDLING_MODE", value_enum, default_value_t = DecimalMode::Precise)]
    pub decimal_handling_mode: DecimalMode,

    /// How keys are written: as Kafka Connect's StringConverter or JsonConverter (schemas.enable=false, or true with json-with-schema) would, or Confluent's AvroConverter (avro), JsonSchemaConverter (json-schema) or ProtobufConverter (protobuf) with --schema-registry-url.
    #[arg(long, env = "WALRELAY_KEY_FORMAT", value_enum, default_value_t = Format::String)]
    pub key_format: Format,

    /// How values are written: as Kafka Connect's StringConverter or JsonConverter (schemas.enable=false, or true with json-with-schema) would, as Debezium's CloudEventsConverter after the router (cloudevents), or as Confluent's AvroConverter (avro), JsonSchemaConverter (json-schema) or ProtobufConverter (protobuf) with --schema-registry-url.
    #[arg(long, env = "WALRELAY_VALUE_FORMAT", value_enum, default_value_t = Format::String)]
    pub value_format: Format,

    /// How headers are written: as the worker's header.converter, SimpleHeaderConverter (string) or JsonConverter (json, json-with-schema), would.
    #[arg(long, env = "WALRELAY_HEADER_FORMAT", value_enum, default_value_t = Format::String)]
    pub header_format: Format,

    /// Send the change event's source, op and transaction as headers before the event's own, as Debezium's documented CloudEvents set-up copies them with HeaderFrom$Value (needs --header-format json or json-with-schema).
    #[arg(long, env = "WALRELAY_METADATA_HEADERS")]
    pub metadata_headers: bool,

    /// With --value-format cloudevents: write data's schema beside its payload (the converter's json.schemas.enable).
    #[arg(long, env = "WALRELAY_CLOUDEVENTS_DATA_SCHEMA", default_value_t = true, action = clap::ArgAction::Set)]
    pub cloudevents_data_schema: bool,

    /// With --value-format cloudevents: write Debezium's iodebezium* extension attributes (the converter's extension.attributes.enable).
    #[arg(long, env = "WALRELAY_CLOUDEVENTS_EXTENSION_ATTRIBUTES", default_value_t = true, action = clap::ArgAction::Set)]
    pub cloudevents_extension_attributes: bool,

    /// Debezium's topic.prefix, which names an envelope's schema under --value-format json-with-schema (<prefix>.<schema>.<table>.<route value>.Value) and is the connectorLogicalName of --extended-headers.
    #[arg(long, env = "WALRELAY_SCHEMA_TOPIC_PREFIX")]
    pub schema_topic_prefix: Option<String>,

    /// Send Debezium 3's __debezium.context.* headers (connectorLogicalName, taskId, connectorName, runId) before the event's own (extended.headers.enabled).
    #[arg(long, env = "WALRELAY_EXTENDED_HEADERS")]
    pub extended_headers: bool,

    /// A NULL or empty payload becomes a tombstone (a null Kafka value).
    #[arg(long, env = "WALRELAY_TOMBSTONE_ON_EMPTY_PAYLOAD")]
    pub tombstone_on_empty_payload: bool,

    /// The column with the writer's trace context, sent as traceparent/tracestate headers; '' for none (tracing.span.context.field).
    #[arg(
        long,
        env = "WALRELAY_FIELD_TRACING_SPAN_CONTEXT",
        default_value = "tracingspancontext"
    )]
    pub field_tracing_span_context: String,
}

/// The Kafka cluster and the topics walrelay produces to.
#[derive(Args, Clone)]
#[command(next_help_heading = "Kafka")]
pub struct KafkaArgs {
    /// Kafka bootstrap servers, comma-separated host:port list.
    #[arg(long, env = "WALRELAY_KAFKA_BROKERS")]
    pub kafka_brokers: String,

    /// A librdkafka property, key=value; repeatable (e.g. -X security.protocol=SASL_SSL).
    #[arg(
        short = 'X',
        long = "kafka-property",
        env = "WALRELAY_KAFKA_PROPERTIES",
        hide_env_values = true,
        value_parser = parse_properties
    )]
    pub kafka_properties: Vec<Properties>,

    /// How walrelay logs in to Kafka: as the -X properties say (none, SASL PLAIN or SCRAM, OIDC), or with AWS MSK IAM tokens (SASL OAUTHBEARER) from the AWS credential chain.
    #[arg(long, env = "WALRELAY_KAFKA_AUTH", value_enum, default_value_t = KafkaAuthMode::Properties)]
    pub kafka_auth: KafkaAuthMode,

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
}

/// What happens to an event that cannot be published.
#[derive(Args, Clone)]
#[command(next_help_heading = "Poison events")]
pub struct PoisonArgs {
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

    /// max.message.bytes of the dead-letter topic walrelay creates, so large poison events keep their value.
    #[arg(
        long,
        env = "WALRELAY_DEAD_LETTER_MAX_MESSAGE_BYTES",
        default_value_t = 8_388_608
    )]
    pub dead_letter_max_message_bytes: usize,
}

/// Flow control, status updates and timeouts.
#[derive(Args, Clone)]
#[command(next_help_heading = "Flow and timeouts")]
pub struct FlowArgs {
    /// Most events produced but not yet acknowledged by Kafka; reading pauses beyond it.
    #[arg(long, env = "WALRELAY_MAX_INFLIGHT_EVENTS", default_value_t = 50_000)]
    pub max_inflight_events: usize,

    /// Most bytes (keys and values) produced but not yet acknowledged by Kafka.
    // 16 MiB: with one produce request in flight (of at most batch.size,
    // 1 MB) a deeper queue in librdkafka sends nothing sooner; 64 MiB let
    // a backlog of 8 KB events settle into a full queue that cost 40 MiB
    // more and a third more CPU per event (docs/benchmarks.md).
    #[arg(long, env = "WALRELAY_MAX_INFLIGHT_BYTES", default_value_t = 16 * 1024 * 1024)]
    pub max_inflight_bytes: usize,

    /// Most transactions read but not yet confirmed; reading pauses beyond it.
    #[arg(
        long,
        env = "WALRELAY_MAX_PENDING_TRANSACTIONS",
        default_value_t = 100_000
    )]
    pub max_pending_transactions: usize,

    /// How often to send a standby status update to Postgres.
    #[arg(long, env = "WALRELAY_STATUS_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub status_interval: Duration,

    /// Once the replication socket is empty between transactions, how long before looking again: the transactions committed meanwhile are read in one wake-up, for less CPU and more latency. 0s reads each as it arrives.
    #[arg(long, env = "WALRELAY_READ_BATCH_WINDOW", default_value = "4ms", value_parser = parse_duration)]
    pub read_batch_window: Duration,

    /// How long shutdown waits for in-flight deliveries before giving up on them.
    #[arg(long, env = "WALRELAY_SHUTDOWN_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,

    /// Longest wait between reconnect attempts.
    #[arg(long, env = "WALRELAY_RECONNECT_MAX_BACKOFF", default_value = "30s", value_parser = parse_duration)]
    pub reconnect_max_backoff: Duration,

    /// How often a standby polls a slot that another walrelay holds (active/passive).
    #[arg(long, env = "WALRELAY_STANDBY_POLL_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub standby_poll_interval: Duration,

    /// Silence on the replication connection that counts as a dead server [default: the server's wal_sender_timeout, or 60s when it is 0].
    #[arg(long, env = "WALRELAY_REPLICATION_TIMEOUT", value_parser = parse_duration)]
    pub replication_timeout: Option<Duration>,

    /// Longest a session's start may take: connect, TLS, authentication, checks, slot creation, START_REPLICATION.
    #[arg(long, env = "WALRELAY_SETUP_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub setup_timeout: Duration,

    /// How long to keep retrying before the first successful start; then exit non-zero.
    #[arg(long, env = "WALRELAY_STARTUP_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub startup_timeout: Duration,
}

/// Metrics, health endpoints and the slot watchdog.
#[derive(Args, Clone)]
#[command(next_help_heading = "Monitoring")]
pub struct WatchdogArgs {
    /// Address for /metrics, /healthz and /readyz.
    #[arg(long, env = "WALRELAY_METRICS_ADDR", default_value = "127.0.0.1:9187")]
    pub metrics_addr: SocketAddr,

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

    /// POST a JSON document here on every change of alert level (http://[user:password@]host:port/path).
    /// Credentials go as HTTP Basic authentication, and are never shown by --help or the logs.
    #[arg(long, env = "WALRELAY_ALERT_WEBHOOK", hide_env_values = true)]
    pub alert_webhook: Option<String>,
}

/// How walrelay logs in to Kafka (`--kafka-auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KafkaAuthMode {
    /// As the -X properties say.
    Properties,
    /// AWS MSK IAM: SASL OAUTHBEARER with tokens signed from the AWS credential chain.
    MskIam,
}

impl KafkaArgs {
    /// Every -X property, in the order given (a later one wins), each under
    /// one of librdkafka's names for it: given as `max.in.flight`,
    /// `request.required.acks` or `topic.partitioner`, it is the same
    /// property as under its other name, and there too a later one wins
    /// (`kafka::aliases`).
    pub fn properties(&self) -> Vec<(String, String)> {
        self.kafka_properties
            .iter()
            .flat_map(|p| p.0.iter())
            .map(|(key, value)| {
                let key = crate::kafka::aliases::canonical(key);
                (key.to_string(), value.clone())
            })
            .collect()
    }

    /// The properties every Kafka client is made with: those of
    /// `--kafka-auth`, then the -X ones.
    pub fn client_properties(
        &self,
        aws: &super::AwsArgs,
    ) -> crate::error::Result<Vec<(String, String)>> {
        let given = self.properties();
        if self.kafka_auth == KafkaAuthMode::Properties {
            return Ok(given);
        }
        if let Some(why) = crate::kafka::msk_iam::conflict(&given) {
            return Err(crate::error::Error::permanent(why));
        }
        let region = msk_region(aws)?;
        Ok(crate::kafka::msk_iam::properties(&region)
            .into_iter()
            .chain(given)
            .collect())
    }
}

#[cfg(feature = "aws")]
fn msk_region(aws: &super::AwsArgs) -> crate::error::Result<String> {
    crate::aws::require_region(aws.aws_region.as_deref(), "--kafka-auth msk-iam")
}

#[cfg(not(feature = "aws"))]
fn msk_region(_: &super::AwsArgs) -> crate::error::Result<String> {
    Err(crate::error::Error::permanent(
        "--kafka-auth msk-iam needs the AWS SDK, which this walrelay was built without: build \
         with the default features (cargo build --release)",
    ))
}

impl fmt::Debug for RunArgs {
    // The URL and the Kafka properties can hold passwords: only their shape is shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunArgs")
            .field("pg_url", &"<redacted>")
            .field(
                "pg_primary_url",
                &self.pg_primary_url.as_ref().map(|_| "<redacted>"),
            )
            .field("kafka_brokers", &self.kafka.kafka_brokers)
            .field("table", &self.source.table)
            .field("slot", &self.conn.slot)
            .field("publication", &self.conn.publication)
            .field("route_by_field", &self.mapping.route_by_field)
            .field("topic_replacement", &self.mapping.topic_replacement)
            .field(
                "kafka_properties",
                &self
                    .kafka
                    .properties()
                    .into_iter()
                    .map(|(k, _)| k)
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}
