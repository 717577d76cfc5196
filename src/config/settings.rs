//! Flags to settings in one step: `Settings::from_args` checks every value
//! clap cannot and builds what `run` and `check` use, so nothing downstream
//! reads a flag.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::config::ClientConfig;

use super::run::{FlowArgs, PoisonArgs, WatchdogArgs};
use super::{ExactlyOnce, KafkaArgs, MissingField, OnPoison, OnUpdate, RunArgs, Source};
use crate::error::{Error, Result};
use crate::kafka::client::{client_config, event_max_bytes};
use crate::kafka::topics::{CreationLog, TopicPolicy};
use crate::outbox::cloudevents::CloudEventsConfig;
use crate::outbox::expansion::{Behaviour, EmptyArrayBehavior, NullBehavior};
use crate::outbox::extended_headers::ExtendedHeaders;
use crate::outbox::format::Format;
use crate::outbox::mapping::MappingConfig;
use crate::outbox::placement::Target;
use crate::outbox::routing::{validate_topic, Router};
use crate::postgres::names::TableName;
use crate::postgres::state::decide::Allowed;
use crate::postgres::state::{StateRoute, StateTable};
use crate::postgres::{PgAuth, PgTarget};
use crate::registry::{Encoding, Serializer};
use crate::retention::RetentionSettings;
use crate::watchdog::{WatchdogSettings, Webhook};

/// Everything a relay needs, derived once from the flags.
pub struct Settings {
    pub pg: PgTarget,
    /// `--pg-primary-url`: where the state table is written while `pg`
    /// is a standby.
    pub pg_primary: Option<PgTarget>,
    pub slot: String,
    pub publication: String,
    pub source: Source,
    /// The outbox tables (at least one), all mapped alike.
    pub tables: Vec<TableName>,
    pub message_prefix: String,
    pub on_update: OnUpdate,
    pub failover_slot: bool,
    /// What the flags let start-up accept (`--recreate-missing-slot`,
    /// `--accept-outbox-change`, `--accept-config-change`).
    pub allowed: Allowed,
    /// Where walrelay remembers the slot (`postgres::state`).
    pub state_table: StateTable,
    pub mapping: MappingConfig,
    pub router: Router,
    /// For logs: where Kafka is.
    pub kafka_brokers: String,
    pub kafka: ClientConfig,
    /// What every Kafka client is made with: `--kafka-auth`'s properties, then -X.
    pub kafka_properties: Vec<(String, String)>,
    /// The largest event record the producer sends (its message.max.bytes
    /// unless the dead-letter topic raised it).
    pub event_max_bytes: usize,
    pub topics: TopicPolicy,
    pub on_poison: OnPoison,
    /// `--delivery exactly-once` and its limits; None for at-least-once.
    pub exactly_once: Option<ExactlyOnce>,
    pub flow: Flow,
    pub timeouts: Timeouts,
    pub metrics_addr: SocketAddr,
    pub watchdog: WatchdogSettings,
    /// `--retention` / `--partitions-ahead`; None when neither is given.
    pub retention: Option<RetentionSettings>,
    /// `--snapshot-where`: rows to publish on the start that creates the slot.
    pub snapshot: Option<SnapshotPlan>,
    /// `--key-format`/`--value-format avro|json-schema|protobuf`: the registry's
    /// serializer, shared by every session so its ids stay cached; and
    /// which format each side is written in, if a registry's.
    pub registry: Option<Arc<Serializer>>,
    pub registry_key: Option<Encoding>,
    pub registry_value: Option<Encoding>,
}

/// The first start's snapshot (`--snapshot-where`, `--snapshot-order-by`).
#[derive(Debug, Clone)]
pub struct SnapshotPlan {
    pub predicate: String,
    pub order_by: Option<String>,
}

/// How much the apply loop may have in hand, and how often it reports.
#[derive(Debug, Clone, Copy)]
pub struct Flow {
    pub max_inflight_events: usize,
    pub max_inflight_bytes: usize,
    pub max_pending_transactions: usize,
    pub status_interval: Duration,
    /// `--read-batch-window` (relay::upstream::ReadBatching).
    pub read_batch_window: Duration,
}

#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub setup: Duration,
    pub startup: Duration,
    pub shutdown: Duration,
    /// None: the server's wal_sender_timeout.
    pub replication: Option<Duration>,
    pub reconnect_max_backoff: Duration,
    pub standby_poll_interval: Duration,
}

/// Bounds of the Kafka topic and flow-control flags.
fn check_flow_bounds(kafka: &KafkaArgs, flow: &FlowArgs) -> Result<()> {
    if kafka.topic_partitions < 1 {
        return Err(Error::permanent("--topic-partitions must be at least 1"));
    }
    if flow.max_inflight_events == 0
        || flow.max_inflight_bytes == 0
        || flow.max_pending_transactions == 0
    {
        return Err(Error::permanent(
            "--max-inflight-events, --max-inflight-bytes and --max-pending-transactions \
             must be above 0",
        ));
    }
    if flow
        .replication_timeout
        .is_some_and(|t| t < Duration::from_secs(1))
    {
        return Err(Error::permanent(
            "--replication-timeout must be at least 1s (e.g. 30s)",
        ));
    }
    Ok(())
}

/// Bounds of the dead-letter size and the watchdog's levels.
fn check_watch_bounds(poison: &PoisonArgs, watch: &WatchdogArgs) -> Result<()> {
    // Kafka's own bounds for max.message.bytes (an int) and librdkafka's for message.max.bytes.
    if !(1000..=1_000_000_000).contains(&poison.dead_letter_max_message_bytes) {
        return Err(Error::permanent(
            "--dead-letter-max-message-bytes must be between 1000 and 1000000000",
        ));
    }
    if watch.lag_warn_bytes > watch.lag_critical_bytes {
        return Err(Error::permanent(
            "--lag-warn-bytes must not be above --lag-critical-bytes",
        ));
    }
    if !(0.0..=1.0).contains(&watch.safe_wal_warn_ratio) {
        return Err(Error::permanent(
            "--safe-wal-warn-ratio must be between 0 and 1 (e.g. 0.2 for 20%)",
        ));
    }
    Ok(())
}

impl Flow {
    fn of(flow: &FlowArgs) -> Self {
        Flow {
            max_inflight_events: flow.max_inflight_events,
            max_inflight_bytes: flow.max_inflight_bytes,
            max_pending_transactions: flow.max_pending_transactions,
            status_interval: flow.status_interval,
            read_batch_window: flow.read_batch_window,
        }
    }
}

impl Timeouts {
    fn of(flow: &FlowArgs) -> Self {
        Timeouts {
            setup: flow.setup_timeout,
            startup: flow.startup_timeout,
            shutdown: flow.shutdown_timeout,
            replication: flow.replication_timeout,
            reconnect_max_backoff: flow.reconnect_max_backoff,
            standby_poll_interval: flow.standby_poll_interval,
        }
    }
}

impl Settings {
    pub fn from_args(args: &RunArgs) -> Result<Settings> {
        let pg = args.conn.validate(&args.aws)?;
        let (source, mapping, kafka, poison, flow, watch) = (
            &args.source,
            &args.mapping,
            &args.kafka,
            &args.poison,
            &args.flow,
            &args.watchdog,
        );
        check_flow_bounds(kafka, flow)?;
        check_formats(args)?;
        let mapping_config = mapping_config(args, &pg);
        let snapshot = snapshot_plan(args)?;
        let m = &args.mapping;
        let registry = args
            .schema_registry
            .settings(
                m.key_format,
                m.value_format,
                m.header_format,
                args.source.source,
            )?
            .map(|settings| Serializer::new(settings).map(Arc::new))
            .transpose()
            .map_err(Error::permanent)?;
        let router = Router::new(&mapping.topic_regex, &mapping.topic_replacement)
            .map_err(Error::permanent)?;
        validate_topic(&poison.dead_letter_topic)
            .map_err(|e| Error::permanent(format!("--dead-letter-topic: {e}")))?;
        check_watch_bounds(poison, watch)?;
        let kafka_properties = kafka.client_properties(&args.aws)?;
        let webhook = watch
            .alert_webhook
            .as_deref()
            .map(Webhook::parse)
            .transpose()
            .map_err(Error::permanent)?;
        let kafka_config = client_config(
            &kafka.kafka_brokers,
            &kafka_properties,
            poison.dead_letter_max_message_bytes,
        );
        crate::kafka::login::require_kerberos_support(&kafka_config)?;
        crate::kafka::client::require_workable(&kafka_config)?;
        let pg_primary = args
            .pg_primary_url
            .as_deref()
            .map(|url| primary_target(url, &pg.auth))
            .transpose()?;
        Ok(Settings {
            pg,
            pg_primary,
            slot: args.conn.slot.clone(),
            publication: args.conn.publication.clone(),
            source: source.source,
            tables: outbox_tables(&source.table)?,
            message_prefix: source.message_prefix.clone(),
            on_update: source.on_update,
            failover_slot: source.failover_slot,
            allowed: Allowed {
                outbox_change: source.accept_outbox_change,
                config_change: source.accept_config_change,
                recreate_missing_slot: source.recreate_missing_slot,
            },
            state_table: StateTable(args.conn.state_table.clone()),
            mapping: mapping_config,
            router,
            kafka_brokers: kafka_brokers(&kafka.kafka_brokers, &kafka_properties)?,
            kafka: kafka_config,
            event_max_bytes: event_max_bytes(&kafka_properties),
            kafka_properties,
            topics: topic_policy(
                kafka,
                &poison.dead_letter_topic,
                poison.dead_letter_max_message_bytes,
            )?,
            on_poison: poison.on_poison,
            exactly_once: args.delivery.settings()?,
            flow: Flow::of(flow),
            timeouts: Timeouts::of(flow),
            metrics_addr: watch.metrics_addr,
            watchdog: WatchdogSettings {
                interval: watch.watchdog_interval,
                lag_warn_bytes: watch.lag_warn_bytes,
                lag_critical_bytes: watch.lag_critical_bytes,
                safe_wal_warn_ratio: watch.safe_wal_warn_ratio,
                stall_timeout: watch.stall_timeout,
                webhook,
            },
            retention: args.retention.settings(source.source)?,
            snapshot,
            registry,
            registry_key: Encoding::of(m.key_format),
            registry_value: Encoding::of(m.value_format),
        })
    }

    /// Where the state table is read and written (`postgres::state::route`).
    pub fn state_route(&self) -> StateRoute {
        StateRoute::new(self.state_table.0.clone(), self.pg_primary.clone())
    }

    /// The dead-letter topic (--dead-letter-topic).
    pub fn dead_letter_topic(&self) -> &str {
        &self.topics.dead_letter_topic
    }
}

/// Parses `--pg-primary-url`; its errors name that flag, not `--pg-url`.
/// The primary logs in as `--pg-url` does: with `--pg-auth rds-iam`, a
/// token signed for the primary's own host.
fn primary_target(url: &str, auth: &PgAuth) -> Result<PgTarget> {
    let named = |e: Error| {
        Error::permanent(format!(
            "--pg-primary-url: {}",
            e.report().replace("--pg-url ", "the URL ")
        ))
    };
    let target = PgTarget::parse(url).map_err(named)?;
    match auth {
        PgAuth::Password => Ok(target),
        PgAuth::RdsIam { region } => target.with_rds_iam(region.clone()).map_err(named),
    }
}

/// What the Debezium formats and headers cannot do, told at start-up rather than per event.
fn check_formats(args: &RunArgs) -> Result<()> {
    let m = &args.mapping;
    let prefix_set = m
        .schema_topic_prefix
        .as_deref()
        .is_some_and(|p| !p.is_empty());
    if m.extended_headers && args.source.source == Source::Messages {
        return Err(Error::permanent(
            "--extended-headers are Debezium's headers of a table's change records; \
             --source messages has none: drop --extended-headers",
        ));
    }
    if m.extended_headers && !prefix_set {
        return Err(Error::permanent(
            "--extended-headers names the connector by Debezium's topic.prefix (the \
             connectorLogicalName header): set --schema-topic-prefix to the connector's \
             topic.prefix (database.server.name before Debezium 2.0)",
        ));
    }
    check_cloudevents(args, prefix_set)?;
    // Avro starts from json-with-schema's Connect schema, so the same rules hold.
    let with_schema = |f: Format| f.mapped() == Format::JsonWithSchema;
    if !with_schema(m.key_format) && !with_schema(m.value_format) {
        return Ok(());
    }
    if args.source.source == Source::Messages {
        return Err(Error::permanent(
            "--key-format/--value-format json-with-schema needs the outbox table's column \
             types, which --source messages does not have; use json or string",
        ));
    }
    let envelope = m
        .fields_additional_placement
        .iter()
        .any(|p| matches!(p.target, Target::Envelope(_)));
    if with_schema(m.value_format) && envelope && !prefix_set {
        let format = match m.value_format {
            Format::Avro => "avro",
            Format::JsonSchema => "json-schema",
            Format::Protobuf => "protobuf",
            _ => "json-with-schema",
        };
        return Err(Error::permanent(format!(
            "--value-format {format} with an envelope placement names the envelope's \
             schema after Debezium's topic.prefix: set --schema-topic-prefix to the \
             connector's topic.prefix (database.server.name before Debezium 2.0)",
        )));
    }
    Ok(())
}

/// What --value-format cloudevents, --header-format and --metadata-headers
/// need, told at start-up: Debezium's task would fail on every event.
fn check_cloudevents(args: &RunArgs, prefix_set: bool) -> Result<()> {
    let m = &args.mapping;
    if m.key_format == Format::CloudEvents || m.header_format == Format::CloudEvents {
        return Err(Error::permanent(
            "cloudevents is a value format: use it with --value-format, and string, json or \
             json-with-schema for --key-format and --header-format",
        ));
    }
    let messages = args.source.source == Source::Messages;
    if messages && (m.header_format != Format::String || m.metadata_headers) {
        return Err(Error::permanent(
            "--header-format and --metadata-headers follow an outbox table's columns, which \
             --source messages does not have: drop them",
        ));
    }
    if m.metadata_headers && m.header_format == Format::String {
        return Err(Error::permanent(
            "--metadata-headers writes the source block as Kafka Connect's JsonConverter \
             writes a header (the only way Debezium's CloudEventsConverter reads it): add \
             --header-format json-with-schema (header.converter=JsonConverter)",
        ));
    }
    if messages && m.value_format == Format::CloudEvents {
        return Err(Error::permanent(
            "--value-format cloudevents needs an outbox table's rows: --source messages has \
             none; use string or json",
        ));
    }
    if (m.metadata_headers || m.value_format == Format::CloudEvents) && !prefix_set {
        return Err(Error::permanent(
            "--metadata-headers and --value-format cloudevents name the source by Debezium's \
             topic.prefix (/debezium/postgresql/<prefix>): set --schema-topic-prefix to the \
             connector's topic.prefix",
        ));
    }
    if m.value_format != Format::CloudEvents {
        return Ok(());
    }
    if !m.expand_json_payload {
        return Err(Error::permanent(
            "--value-format cloudevents writes the payload as the CloudEvent's data, which must \
             be a JSON object Debezium's router expanded (otherwise its converter fails every \
             event with \"Mismatching schema\"): add --expand-json-payload",
        ));
    }
    if m.fields_additional_placement
        .iter()
        .any(|p| matches!(p.target, Target::Envelope(_)))
    {
        return Err(Error::permanent(
            "--value-format cloudevents does not wrap an envelope: drop the :envelope \
             placements (put those columns in headers), or use json-with-schema",
        ));
    }
    let type_header = m
        .fields_additional_placement
        .iter()
        .any(|p| matches!(&p.target, Target::Header(name) if name == "type"));
    if !type_header {
        return Err(Error::permanent(format!(
            "--value-format cloudevents takes the CloudEvent's type from a header called type, \
             as Debezium's converter does with metadata.source=header: add \
             --fields-additional-placement {}:header:type",
            m.field_event_type
        )));
    }
    Ok(())
}

/// `--snapshot-where`: a table to read it from, and something to read.
fn snapshot_plan(args: &RunArgs) -> Result<Option<SnapshotPlan>> {
    let flags = &args.snapshot;
    let Some(predicate) = flags.snapshot_where.as_deref().map(str::trim) else {
        if flags.snapshot_order_by.is_some() {
            return Err(Error::permanent(
                "--snapshot-order-by orders the rows of --snapshot-where: give both, or neither",
            ));
        }
        return Ok(None);
    };
    if predicate.is_empty() {
        return Err(Error::permanent(
            "--snapshot-where is empty: give a SQL condition on the outbox table, e.g. \
             'published_at IS NULL', or 'true' for every row",
        ));
    }
    if args.source.source == Source::Messages {
        return Err(Error::permanent(
            "--snapshot-where publishes rows of the outbox table, and --source messages has \
             none: leave it out",
        ));
    }
    Ok(Some(SnapshotPlan {
        predicate: predicate.to_string(),
        order_by: flags.snapshot_order_by.clone(),
    }))
}

/// The `--kafka-brokers` list: librdkafka takes an empty one and then waits
/// for a broker that can never answer. An `-X bootstrap.servers` (or
/// `metadata.broker.list`) that names other brokers is refused: it would
/// win in every client while the logs and `walrelay check` named these.
pub(super) fn kafka_brokers(list: &str, properties: &[(String, String)]) -> Result<String> {
    let given = properties
        .iter()
        .rev()
        .find(|(key, _)| key == "bootstrap.servers");
    let brokers =
        |list: &str| -> Vec<String> { list.split(',').map(|b| b.trim().to_string()).collect() };
    if let Some((_, other)) = given {
        if brokers(other) != brokers(list) {
            return Err(Error::permanent(format!(
                "-X bootstrap.servers={other:?} and --kafka-brokers (WALRELAY_KAFKA_BROKERS) \
                 {list:?} name two lists of brokers: give them once, with --kafka-brokers"
            )));
        }
    }
    if list.split(',').any(|broker| broker.trim().is_empty()) {
        return Err(Error::permanent(format!(
            "--kafka-brokers (WALRELAY_KAFKA_BROKERS) {}: give host:port, or several \
             separated by commas, e.g. kafka-1:9092,kafka-2:9092",
            if list.trim().is_empty() {
                "names no broker".to_string()
            } else {
                format!("has an empty entry in {list:?}")
            }
        )));
    }
    Ok(list.to_string())
}

/// The `--table` list: at least one, each once.
fn outbox_tables(tables: &[TableName]) -> Result<Vec<TableName>> {
    if tables.is_empty() {
        return Err(Error::permanent(
            "--table names no table: give the outbox table as schema.table",
        ));
    }
    for (i, table) in tables.iter().enumerate() {
        if tables[..i].contains(table) {
            return Err(Error::permanent(format!(
                "--table names {table} twice: give each outbox table once"
            )));
        }
    }
    Ok(tables.to_vec())
}

impl Settings {
    /// The settings that decide what is published from the slot, as the
    /// state table records them: two instances that differ here would
    /// confirm past each other's events.
    pub fn published(&self) -> serde_json::Value {
        let mut tables: Vec<String> = self.tables.iter().map(ToString::to_string).collect();
        tables.sort();
        let (tables, prefix) = match self.source {
            Source::Table => (serde_json::json!(tables), serde_json::Value::Null),
            Source::Messages => (serde_json::Value::Null, self.message_prefix.clone().into()),
        };
        serde_json::json!({
            "publication": self.publication,
            "source": format!("{:?}", self.source).to_lowercase(),
            "tables": tables,
            "message_prefix": prefix,
            "route_by_field": self.mapping.route_by,
            "topic_regex": self.router.regex(),
            "topic_replacement": self.router.replacement(),
        })
    }

    /// The outbox tables for messages: `public.outbox` or `a.outbox, b.outbox`.
    pub fn tables_text(&self) -> String {
        let names: Vec<String> = self.tables.iter().map(ToString::to_string).collect();
        names.join(", ")
    }
}

/// The mapping and routing flags as one mapping.
fn mapping_config(args: &RunArgs, pg: &PgTarget) -> MappingConfig {
    let m = &args.mapping;
    MappingConfig {
        id: m.field_event_id.clone(),
        key: m.field_event_key.clone(),
        event_type: Some(m.field_event_type.clone()).filter(|c| !c.is_empty()),
        payload: m.field_payload.clone(),
        route_by: m.route_by_field.clone(),
        timestamp: m.field_timestamp.clone(),
        schema_version: m.field_schema_version.clone().filter(|c| !c.is_empty()),
        placements: m.fields_additional_placement.clone(),
        expand_json_payload: m.expand_json_payload,
        tombstone_on_empty_payload: m.tombstone_on_empty_payload,
        decimals: m.decimal_handling_mode,
        key_format: m.key_format.mapped(),
        value_format: m.value_format.mapped(),
        schema_topic_prefix: m.schema_topic_prefix.clone(),
        extended_headers: m
            .extended_headers
            .then(|| ExtendedHeaders::for_new_run(m.schema_topic_prefix.as_deref().unwrap_or("")))
            .map(|headers| headers.in_format(m.header_format)),
        header_format: m.header_format,
        metadata_headers: m.metadata_headers,
        cloudevents: CloudEventsConfig {
            data_with_schema: m.cloudevents_data_schema,
            extension_attributes: m.cloudevents_extension_attributes,
        },
        // libpq's default: the database named like the user.
        database: pg
            .config
            .get_dbname()
            .or(pg.config.get_user())
            .unwrap_or("postgres")
            .to_string(),
        ignore_missing_placements: m.fields_additional_missing == MissingField::Ignore,
        tracing_span_context: Some(m.field_tracing_span_context.clone()).filter(|c| !c.is_empty()),
        expansion: Behaviour {
            keep_null_fields: m.json_payload_null_behavior == NullBehavior::OptionalBytes,
            keep_empty_arrays: m.json_payload_empty_array_behavior
                == EmptyArrayBehavior::OptionalString,
        },
    }
}

/// The rules for the topics walrelay produces to (`run` and `redrive`).
pub(super) fn topic_policy(
    kafka: &KafkaArgs,
    dead_letter_topic: &str,
    dead_letter_max_message_bytes: usize,
) -> Result<TopicPolicy> {
    let allow = kafka
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
    // Names as kafka::aliases reads them: compression.codec is read as
    // compression.type, topic.compression.codec as topic.compression.type.
    let compressed = kafka.properties().iter().any(|(k, v)| {
        matches!(k.as_str(), "compression.type" | "topic.compression.type")
            && !matches!(v.as_str(), "none" | "inherit")
    });
    Ok(TopicPolicy {
        create: kafka.topic_create,
        allow,
        max_created_per_minute: kafka.topic_create_max_per_minute,
        partitions: kafka.topic_partitions,
        replication_factor: kafka.topic_replication_factor,
        dead_letter_topic: dead_letter_topic.to_string(),
        dead_letter_max_message_bytes,
        compressed,
        created: CreationLog::default(),
    })
}
