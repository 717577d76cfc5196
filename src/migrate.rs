//! `walrelay migrate-from-debezium`: reads a Debezium PostgreSQL connector
//! configuration with the outbox EventRouter transform (Kafka Connect JSON
//! or a .properties file) and prints the equivalent `walrelay run` command,
//! with a note for every option that has no equivalent or behaves
//! differently. Passwords are never printed.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Error, Result};

mod cloudevents;
mod connector;
mod messages;
mod registry;
use connector::{converter_format, outbox_tables, parse};

const EVENT_ROUTER: &str = "io.debezium.transforms.outbox.EventRouter";
const POSTGRES_CONNECTOR: &str = "io.debezium.connector.postgresql.PostgresConnector";

/// Router options and their walrelay flags. Debezium's defaults differ from
/// walrelay's, so they are written out whenever the connector relies on them.
const ROUTER_FLAGS: &[(&str, &str, Option<&str>)] = &[
    ("table.field.event.id", "--field-event-id", Some("id")),
    (
        "table.field.event.key",
        "--field-event-key",
        Some("aggregateid"),
    ),
    (
        "table.field.event.payload",
        "--field-payload",
        Some("payload"),
    ),
    ("table.field.event.timestamp", "--field-timestamp", None),
    (
        "table.field.event.schema.version",
        "--field-schema-version",
        None,
    ),
    ("route.by.field", "--route-by-field", Some("aggregatetype")),
    ("route.topic.regex", "--topic-regex", None),
    ("route.topic.replacement", "--topic-replacement", None),
    (
        "table.fields.additional.placement",
        "--fields-additional-placement",
        None,
    ),
    ("table.op.invalid.behavior", "--on-update", None),
    // Same default (tracingspancontext) on both sides.
    (
        "tracing.span.context.field",
        "--field-tracing-span-context",
        None,
    ),
];

/// A shell expansion that stops with a message when the variable is unset,
/// so the printed command never runs with a placeholder.
const BROKERS_FROM_ENVIRONMENT: &str =
    "${KAFKA_BROKERS:?set KAFKA_BROKERS to the bootstrap.servers of the Connect worker}";

pub struct Migration {
    pub args: Vec<(String, Option<String>)>,
    pub notes: Vec<String>,
}

/// Choices the connector configuration cannot tell.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Take over Debezium's own slot instead of creating a new one.
    pub reuse_slot: bool,
}

pub fn run(path: &Path, options: Options) -> Result<()> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::permanent(format!("cannot read {}", path.display())).with_source(e))?;
    let migration = migrate(&text, options)?;
    crate::outln!("{}", migration.command());
    if !migration.notes.is_empty() {
        crate::outln!("\nNotes:");
        for note in &migration.notes {
            crate::outln!("- {note}");
        }
    }
    Ok(())
}

impl Migration {
    /// The command line, one flag a line.
    pub fn command(&self) -> String {
        let mut out = String::from("walrelay run");
        for (flag, value) in &self.args {
            out.push_str(" \\\n  ");
            out.push_str(flag);
            if let Some(value) = value {
                out.push(' ');
                out.push_str(&shell_quote(value));
            }
        }
        out
    }
}

pub fn migrate(text: &str, options: Options) -> Result<Migration> {
    let config = parse(text)?;
    let mut draft = Draft {
        config: &config,
        args: Vec::new(),
        notes: Vec::new(),
        used: Vec::new(),
    };
    draft.connector_class();
    draft.database();
    draft.kafka_brokers();
    draft.tables();
    draft.slot(options.reuse_slot);
    draft.topic_creation();
    let prefix = draft.router()?;
    draft.enumerations(&prefix)?;
    draft.formats()?;
    draft.tracing(&prefix);
    draft.payload_options(&prefix);
    draft.leftovers();
    Ok(Migration {
        args: draft.args,
        notes: draft.notes,
    })
}

/// The command and notes as the connector's options are read, step by
/// step; `used` holds each option read, so it gets no "no equivalent" note.
struct Draft<'c> {
    config: &'c BTreeMap<String, String>,
    args: Vec<(String, Option<String>)>,
    notes: Vec<String>,
    used: Vec<String>,
}

impl<'c> Draft<'c> {
    fn get(&self, key: &str) -> Option<&'c str> {
        self.config.get(key).map(String::as_str)
    }

    fn flag(&mut self, name: &str, value: Option<String>) {
        self.args.push((name.to_string(), value));
    }

    /// The connector: PostgreSQL's, or a note.
    fn connector_class(&mut self) {
        match self.get("connector.class") {
            Some(POSTGRES_CONNECTOR) => {}
            Some(other) => self.notes.push(format!(
                "connector.class is {other}: walrelay reads PostgreSQL only; the command below assumes PostgreSQL"
            )),
            None => self.notes.push("no connector.class: assuming the PostgreSQL connector".into()),
        }
        self.used.push("connector.class".into());
    }

    /// The database URL, without its password.
    fn database(&mut self) {
        // The database.
        let host = self.get("database.hostname").unwrap_or("localhost");
        let port = self.get("database.port").unwrap_or("5432");
        let user = self.get("database.user").unwrap_or("postgres");
        let db = self.get("database.dbname").unwrap_or("postgres");
        let mut url = format!("postgres://{user}@{host}:{port}/{db}");
        let mut params = Vec::new();
        if let Some(mode) = self.get("database.sslmode") {
            params.push(format!("sslmode={mode}"));
        }
        if let Some(root) = self.get("database.sslrootcert") {
            params.push(format!("sslrootcert={root}"));
        }
        if !params.is_empty() {
            url.push('?');
            url.push_str(&params.join("&"));
        }
        self.flag("--pg-url", Some(url));
        if self.get("database.password").is_some() {
            self.notes.push(
                "database.password is not printed: export PGPASSWORD from your secret store \
                 before running the command; walrelay reads it, as libpq does, when --pg-url \
                 carries no password"
                    .into(),
            );
        }
        self.used.extend(
            [
                "database.hostname",
                "database.port",
                "database.user",
                "database.password",
                "database.dbname",
                "database.sslmode",
                "database.sslrootcert",
            ]
            .map(String::from),
        );
    }

    /// The brokers: the worker's, from the environment.
    fn kafka_brokers(&mut self) {
        self.flag(
            "--kafka-brokers",
            Some(
                self.get("bootstrap.servers")
                    .unwrap_or(BROKERS_FROM_ENVIRONMENT)
                    .to_string(),
            ),
        );
        if self.get("bootstrap.servers").is_none() {
            self.notes.push(
                "the Kafka brokers live in the Connect worker's configuration, not the connector's: \
                 set KAFKA_BROKERS to its bootstrap.servers before running the command (the shell \
                 stops with that message if it is unset)"
                    .into(),
            );
        }
        self.used.push("bootstrap.servers".into());
    }

    /// The outbox tables.
    fn tables(&mut self) {
        match self.get("table.include.list").map(outbox_tables) {
            Some(Ok(tables)) => self.flag("--table", Some(tables)),
            Some(Err(note)) => self.notes.push(note),
            None => self.notes.push(
                "no table.include.list: walrelay reads public.outbox unless you pass --table \
                 schema.table"
                    .into(),
            ),
        }
        self.used.push("table.include.list".into());
    }

    /// The slot and publication: Debezium's when reuse is asked for and
    /// possible, else new ones with the switch-over steps.
    fn slot(&mut self, reuse_slot: bool) {
        // The slot: a new pgoutput slot unless reuse is asked for and possible.
        // Debezium's plugin.name defaults to decoderbufs, whose slot walrelay cannot read.
        let plugin = self
            .get("plugin.name")
            .map_or("decoderbufs".to_string(), |p| p.trim().to_ascii_lowercase());
        let dbz_slot = self.get("slot.name").unwrap_or("debezium");
        let dbz_publication = self.get("publication.name").unwrap_or("dbz_publication");
        let flushes_lsn = self
            .get("flush.lsn.source")
            .is_none_or(|v| !v.trim().eq_ignore_ascii_case("false"))
            && self
                .get("lsn.flush.mode")
                .is_none_or(|v| !v.trim().eq_ignore_ascii_case("manual"));
        match (reuse_slot, plugin.as_str(), flushes_lsn) {
            (true, "pgoutput", true) => {
                self.flag("--slot", Some(dbz_slot.into()));
                self.flag("--publication", Some(dbz_publication.into()));
                self.notes.push(format!(
                    "reusing slot {dbz_slot:?}: stop the Debezium connector for good first; walrelay \
                     resumes from the slot's confirmed position, so events Debezium published after its \
                     last offset flush are published again (consumers dedupe by id)"
                ));
            }
            (reuse, _, _) => {
                if reuse && plugin != "pgoutput" {
                    self.notes.push(format!(
                        "--reuse-slot is not possible: slot {dbz_slot:?} uses the {plugin} plugin \
                         (plugin.name{}), walrelay reads pgoutput only; a new slot is proposed instead",
                        if self.get("plugin.name").is_none() {
                            " unset: Debezium's default"
                        } else {
                            ""
                        }
                    ));
                } else if reuse {
                    self.notes.push(format!(
                        "--reuse-slot is not possible: Debezium does not confirm its position to slot \
                         {dbz_slot:?} (flush.lsn.source=false or lsn.flush.mode=manual), so resuming \
                         from it could replay or skip events; a new slot is proposed instead"
                    ));
                }
                self.flag("--slot", Some("walrelay".into()));
                self.flag("--publication", Some("walrelay".into()));
                self.notes.push(format!(
                    "switch-over on a new slot (walrelay creates slot \"walrelay\" and a publication for \
                     the outbox table): 1. start walrelay while Debezium still runs; from then on both \
                     publish every event and consumers dedupe by id; 2. check `walrelay status` and \
                     /metrics; 3. stop the connector and drop its slot: SELECT \
                     pg_drop_replication_slot('{dbz_slot}');{}",
                    if plugin == "pgoutput" {
                        " (or run this command with --reuse-slot after stopping Debezium)"
                    } else {
                        ""
                    }
                ));
            }
        }
        self.used.extend(
            [
                "slot.name",
                "publication.name",
                "plugin.name",
                "flush.lsn.source",
                "lsn.flush.mode",
                "publication.autocreate.mode",
            ]
            .map(String::from),
        );
    }

    /// Topic creation's partitions and replication factor.
    fn topic_creation(&mut self) {
        if let Some(partitions) = self
            .get("topic.creation.default.partitions")
            .and_then(|p| p.trim().parse::<i32>().ok())
            .filter(|p| *p >= 1)
        {
            self.flag("--topic-partitions", Some(partitions.to_string()));
        }
        if let Some(factor) = self
            .get("topic.creation.default.replication.factor")
            .and_then(|p| p.trim().parse::<i32>().ok())
            .filter(|p| *p >= 1)
        {
            self.flag("--topic-replication-factor", Some(factor.to_string()));
        }
        self.used.extend(
            [
                "topic.creation.default.partitions",
                "topic.creation.default.replication.factor",
                "topic.creation.groups",
            ]
            .map(String::from),
        );
    }

    /// The outbox event router's options; its `transforms.<name>.` prefix.
    fn router(&mut self) -> Result<String> {
        // The outbox event router.
        let prefix = self
            .config
            .iter()
            .find(|(k, v)| {
                k.starts_with("transforms.") && k.ends_with(".type") && *v == EVENT_ROUTER
            })
            .map(|(k, _)| k.trim_end_matches("type").to_string());
        let Some(prefix) = prefix else {
            return Err(Error::permanent(format!(
                "the configuration has no {EVENT_ROUTER} transform; walrelay replaces the \
                 connector together with the outbox event router"
            )));
        };
        for (option, walrelay_flag, debezium_default) in ROUTER_FLAGS {
            let key = format!("{prefix}{option}");
            self.used.push(key.clone());
            if *option == "table.op.invalid.behavior" {
                if let Some(v) = enumeration(&key, self.get(&key), &["warn", "error", "fatal"])? {
                    self.flag(walrelay_flag, Some(v));
                }
                continue;
            }
            match (self.get(&key), debezium_default) {
                (Some(value), _) => self.flag(walrelay_flag, Some(value.to_string())),
                (None, Some(default)) => self.flag(walrelay_flag, Some(default.to_string())),
                (None, None) => {}
            }
        }
        // Debezium's router never reads table.field.event.type and sends no
        // event-type header (EventRouterDelegate.apply adds only "id"): neither
        // does walrelay with an empty --field-event-type.
        self.flag("--field-event-type", Some(String::new()));
        let type_key = format!("{prefix}table.field.event.type");
        if let Some(column) = self.get(&type_key) {
            self.notes.push(format!(
                "{type_key}={column}: Debezium's router does not read it and sends no event-type \
                 header; to send one, place the column, e.g. {column}:header:eventType in \
                 --fields-additional-placement"
            ));
        }
        self.used.push(type_key);
        Ok(prefix)
    }

    /// Enumerated options and the router's switches.
    fn enumerations(&mut self, prefix: &str) -> Result<()> {
        // Enumerations, read case-insensitively as Debezium reads them; `_` in
        // Debezium's values is `-` in walrelay's.
        let enums: [(String, &str, &[&str]); 3] = [
            (
                format!("{prefix}table.field.additional.missing"),
                "--fields-additional-missing",
                &["error", "ignore"],
            ),
            (
                format!("{prefix}table.json.payload.null.behavior"),
                "--json-payload-null-behavior",
                &["ignore", "optional_bytes"],
            ),
            (
                "decimal.handling.mode".to_string(),
                "--decimal-handling-mode",
                &["precise", "string", "double"],
            ),
        ];
        for (key, walrelay_flag, allowed) in enums {
            if let Some(value) = enumeration(&key, self.get(&key), allowed)? {
                self.flag(walrelay_flag, Some(value.replace('_', "-")));
            }
            self.used.push(key);
        }
        let flag_on = |key: &str| {
            self.get(&format!("{prefix}{key}"))
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
        };
        let (expand, tombstone) = (
            flag_on("table.expand.json.payload"),
            flag_on("route.tombstone.on.empty.payload"),
        );
        if expand {
            self.flag("--expand-json-payload", None);
        }
        if tombstone {
            self.flag("--tombstone-on-empty-payload", None);
        }
        Ok(())
    }

    /// Header, key and value formats, and the logical name they need.
    fn formats(&mut self) -> Result<()> {
        // Debezium 3 adds the headers naming its connector, task and run unless
        // told not to (CommonConnectorConfig EXTENDED_HEADERS_ENABLED, default true).
        let extended_headers = self
            .get("extended.headers.enabled")
            .is_none_or(|v| !v.trim().eq_ignore_ascii_case("false"));
        self.used.push("extended.headers.enabled".into());
        // topic.prefix names envelope schemas and is the connectorLogicalName header.
        let mut needs_topic_prefix = extended_headers;
        let mut carried = cloudevents::Carried::default();
        let header_format = cloudevents::header_format(self.config, &mut carried)?;
        if header_format != "string" {
            self.flag("--header-format", Some(header_format.into()));
        }
        for (side, flag_name) in [("key", "--key-format"), ("value", "--value-format")] {
            let converter = self.get(&format!("{side}.converter")).unwrap_or_default();
            if side == "value" && converter.trim().ends_with(".CloudEventsConverter") {
                cloudevents::value_flags(self.config, &mut carried)?;
                // The converter reads them back with its own JsonConverter,
                // schemas on (CloudEventsConverter.configure).
                if header_format != "json-with-schema" {
                    return Err(Error::permanent(
                        "value.converter=CloudEventsConverter reads its metadata back from headers \
                         with a JsonConverter with schemas, so with SimpleHeaderConverter (the \
                         worker's default header.converter) or schemas.enable=false Debezium's task \
                         fails on every event; set \
                         header.converter=org.apache.kafka.connect.json.JsonConverter with \
                         header.converter.schemas.enable=true, as cloudevents.adoc does",
                    ));
                }
                // The CloudEvent's source is /debezium/postgresql/<topic.prefix>.
                needs_topic_prefix = true;
                for (name, value) in carried.flags.drain(..) {
                    self.flag(name, value);
                }
                continue;
            }
            let (format, note) = converter_format(
                side,
                self.get(&format!("{side}.converter")),
                self.get(&format!("{side}.converter.schemas.enable")),
            );
            self.notes.extend(note);
            if side == "value"
                && matches!(
                    format,
                    "json-with-schema" | "avro" | "json-schema" | "protobuf"
                )
            {
                // The envelope's schema is named after it (EventRouterDelegate.getSchemaName).
                needs_topic_prefix = true;
            }
            self.flag(flag_name, Some(format.into()));
        }
        // Confluent's or Apicurio's registry converters: the registry and its settings.
        let mut avro = registry::flags(self.config)?;
        self.args.append(&mut avro.args);
        self.used.append(&mut avro.used);
        self.notes.append(&mut avro.notes);
        let topic_prefix = ["topic.prefix", "database.server.name"]
            .into_iter()
            .find_map(|k| self.get(k).map(|v| (k, v)));
        match (needs_topic_prefix, topic_prefix) {
            (true, Some((key, topic_prefix))) => {
                self.flag("--schema-topic-prefix", Some(topic_prefix.to_string()));
                self.used.push(key.to_string());
                if extended_headers {
                    self.flag("--extended-headers", None);
                }
            }
            (true, None) => self.notes.push(
                "no topic.prefix (database.server.name before Debezium 2.0), which Debezium \
                 requires: it names envelope schemas and the __debezium.context.* headers; add \
                 --schema-topic-prefix with the connector's logical name (and --extended-headers \
                 unless extended.headers.enabled=false)"
                    .into(),
            ),
            (false, _) => {}
        }
        self.notes.extend(messages::note(
            self.get(messages::KEYS[0]),
            self.get(messages::KEYS[1]),
            topic_prefix.map(|(_, value)| value),
        )?);
        self.used.extend(messages::KEYS.map(String::from));
        self.used.append(&mut carried.used);
        Ok(())
    }

    /// Tracing: walrelay passes the writer's context through.
    fn tracing(&mut self, prefix: &str) {
        // Tracing (ActivateTracingSpan, run by the router when OpenTelemetry is
        // on Connect's classpath): walrelay creates no spans, it passes the
        // writer's context through.
        let trace_column = self
            .get(&format!("{prefix}tracing.span.context.field"))
            .unwrap_or("tracingspancontext")
            .to_string();
        self.notes.push(format!(
            "tracing: walrelay sends the writer's traceparent/tracestate from column \
             {trace_column:?} (when the table has it) unchanged as headers, so consumers continue \
             the writer's trace; Debezium sent them only with OpenTelemetry installed in Connect, \
             with the span id of its own db-log-write span; --field-tracing-span-context '' sends none"
        ));
        let operation_key = format!("{prefix}tracing.operation.name");
        if let Some(name) = self.get(&operation_key) {
            self.notes.push(format!(
                "{operation_key}={name}: walrelay creates no spans, so there is no operation to name"
            ));
        }
        let only_key = format!("{prefix}tracing.with.context.field.only");
        if self
            .get(&only_key)
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("false"))
        {
            self.notes.push(format!(
                "{only_key}=false: Debezium started a new trace for rows without a context; walrelay \
                 sends trace headers only for rows that carry one (as with true, the router's default)"
            ));
        }
        self.used.extend([operation_key, only_key]);
    }

    /// The router's payload options read elsewhere or not at all.
    fn payload_options(&mut self, prefix: &str) {
        // Debezium 3.6.1's router has no such option (EventRouterConfigDefinition;
        // JsonSchemaData drops every empty array): walrelay's default does the same.
        let empty_key = format!("{prefix}table.json.payload.empty.array.behavior");
        if let Some(value) = self.get(&empty_key) {
            self.notes.push(format!(
                "{empty_key}={value}: Debezium 3.6.1 does not read it and leaves empty arrays out of \
                 expanded payloads, as walrelay does by default; --json-payload-empty-array-behavior \
                 optional-string would keep them"
            ));
        }
        self.used.push(empty_key);
        self.used.push(format!("{prefix}table.expand.json.payload"));
        self.used
            .push(format!("{prefix}route.tombstone.on.empty.payload"));
        self.used.push(format!("{prefix}type"));
    }

    /// A note for every option no step read.
    fn leftovers(&mut self) {
        for (key, value) in self.config {
            if !self.used.iter().any(|u| u == key) {
                if let Some(note) = explain(key, value) {
                    self.notes.push(note);
                }
            }
        }
    }
}

/// The note for an option with no walrelay equivalent, or different
/// behaviour; None where there is nothing to say.
fn explain(key: &str, value: &str) -> Option<String> {
    Some(match key {
        "heartbeat.interval.ms" | "heartbeat.action.query" => format!(
            "{key} is not needed: walrelay confirms the server's WAL position whenever \
             nothing is in flight, so an idle outbox on a busy database does not pin WAL"
        ),
        "offset.flush.interval.ms" | "offset.storage" | "offset.storage.file.filename" => {
            format!(
                "{key}: walrelay keeps no offsets of its own; the slot is the offset, confirmed \
             within --status-interval (1s) of Kafka's acknowledgement"
            )
        }
        "snapshot.mode" => format!(
            "snapshot.mode={value}: walrelay never snapshots; it publishes what is committed \
             after the slot's position, which is what an outbox needs"
        ),
        "topic.prefix" | "database.server.name" => format!(
            "{key} names Debezium's change topics; outbox topics come from --topic-replacement"
        ),
        "tasks.max" => "tasks.max: walrelay is one process per slot; run a second one as a \
                        standby for high availability"
            .into(),
        "field.name.adjustment.mode" if value.trim().eq_ignore_ascii_case("none") => return None,
        // JsonSchemaData names a field with the adjusted name, then looks
        // the value up under it (jsonNodeToStructInternal).
        "field.name.adjustment.mode" => format!(
            "field.name.adjustment.mode={value}: Debezium renames fields of expanded payloads \
             that avro does not allow (test$ becomes test_) and then finds no value under \
             the new name, so they arrive null; walrelay keeps every name and its value"
        ),
        "tombstones.on.delete" => {
            "tombstones.on.delete: walrelay ignores DELETEs of outbox rows".into()
        }
        "key.converter"
        | "value.converter"
        | "key.converter.schemas.enable"
        | "value.converter.schemas.enable" => return None,
        "transforms" | "name" => return None,
        _ if key.starts_with("transforms.") => {
            format!("{key}: walrelay applies no transform besides the outbox router")
        }
        _ => format!("{key} has no walrelay equivalent and is ignored"),
    })
}

/// An enumerated option as Debezium's Field.withEnum validates it (trimmed,
/// any case): a value it refuses stops the connector before it starts, so
/// there is no behaviour to carry over and migrate refuses it too.
fn enumeration(key: &str, value: Option<&str>, allowed: &[&str]) -> Result<Option<String>> {
    let Some(value) = value else {
        return Ok(None);
    };
    let normalized = value.trim().to_ascii_lowercase();
    if allowed.contains(&normalized.as_str()) {
        return Ok(Some(normalized));
    }
    Err(Error::permanent(format!(
        "{key}={value:?} is not one of {}: Debezium refuses it (\"Value must be one of …\") \
         and the connector never starts; fix the connector's configuration first",
        allowed.join(", ")
    )))
}

fn shell_quote(value: &str) -> String {
    if value == BROKERS_FROM_ENVIRONMENT {
        return format!("\"{value}\"");
    }
    if !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:@,=".contains(c))
    {
        value.to_string()
    } else {
        format!("'{}'", value.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flag<'a>(m: &'a Migration, name: &str) -> Option<&'a str> {
        m.args
            .iter()
            .find(|(f, _)| f == name)
            .and_then(|(_, v)| v.as_deref())
    }

    #[test]
    fn kafka_connect_json_becomes_a_command_without_the_password() {
        let m = migrate(
            include_str!("../tests/fixtures/debezium/outbox-connector.json"),
            Options::default(),
        )
        .unwrap();
        assert_eq!(
            flag(&m, "--pg-url"),
            Some("postgres://debezium@orders-db.internal:5432/orders?sslmode=verify-full")
        );
        assert_eq!(flag(&m, "--table"), Some("public.outbox_events"));
        // A new slot by default, with the switch-over steps.
        assert_eq!(flag(&m, "--slot"), Some("walrelay"));
        assert_eq!(flag(&m, "--publication"), Some("walrelay"));
        assert!(m
            .notes
            .iter()
            .any(|n| n.contains("pg_drop_replication_slot('orders_outbox')")));
        assert_eq!(flag(&m, "--value-format"), Some("json"));
        assert_eq!(flag(&m, "--key-format"), Some("string"));
        assert_eq!(flag(&m, "--field-event-key"), Some("aggregate_id"));
        assert_eq!(flag(&m, "--route-by-field"), Some("aggregate_type"));
        assert_eq!(
            flag(&m, "--topic-replacement"),
            Some("${routedByValue}.events")
        );
        assert_eq!(flag(&m, "--on-update"), Some("error"));
        assert_eq!(
            flag(&m, "--fields-additional-placement"),
            Some("type:header:eventType,tenant_id:envelope:tenantId")
        );
        assert!(m.args.iter().any(|(f, _)| f == "--expand-json-payload"));
        let all = format!("{}\n{}", m.command(), m.notes.join("\n"));
        assert!(!all.contains("s3cr3t"), "{all}");
        assert!(all.contains("heartbeat.interval.ms is not needed"), "{all}");
        assert!(all.contains("snapshot.mode=never"), "{all}");
        assert!(
            all.contains("'${routedByValue}.events'"),
            "quoted for the shell: {all}"
        );
    }

    #[test]
    fn properties_files_and_debezium_defaults_are_honoured() {
        let m = migrate(
            include_str!("../tests/fixtures/debezium/outbox-connector.properties"),
            Options::default(),
        )
        .unwrap();
        assert_eq!(
            flag(&m, "--pg-url"),
            Some("postgres://cdc@billing-db:6432/billing")
        );
        // Debezium's defaults, written out because walrelay's differ.
        assert_eq!(flag(&m, "--field-event-key"), Some("aggregateid"));
        assert_eq!(flag(&m, "--route-by-field"), Some("aggregatetype"));
        let reused = migrate(
            include_str!("../tests/fixtures/debezium/outbox-connector.properties"),
            Options { reuse_slot: true },
        )
        .unwrap();
        assert_eq!(flag(&reused, "--slot"), Some("debezium"));
        assert_eq!(flag(&reused, "--publication"), Some("dbz_publication"));
        assert_eq!(flag(&m, "--field-timestamp"), Some("created_at"));
        assert_eq!(
            flag(&m, "--topic-replacement"),
            Some("billing.${routedByValue}")
        );
        assert!(m
            .args
            .iter()
            .any(|(f, _)| f == "--tombstone-on-empty-payload"));
        let notes = m.notes.join("\n");
        assert!(notes.contains("transforms.unwrap.type"), "{notes}");
        assert!(notes.contains("offset.flush.interval.ms"), "{notes}");
        assert!(notes.contains("KAFKA_BROKERS"), "{notes}");
        assert!(
            m.command()
                .contains("--kafka-brokers \"${KAFKA_BROKERS:?set KAFKA_BROKERS"),
            "{}",
            m.command()
        );
    }

    #[test]
    fn a_configuration_without_the_event_router_is_refused() {
        let err = migrate(
            r#"{"connector.class": "io.debezium.connector.postgresql.PostgresConnector"}"#,
            Options::default(),
        )
        .err()
        .unwrap();
        assert!(err.to_string().contains("EventRouter"), "{err}");
    }

    fn with_router(extra: &str) -> String {
        format!(
            "connector.class=io.debezium.connector.postgresql.PostgresConnector\n\
             transforms=outbox\n\
             transforms.outbox.type=io.debezium.transforms.outbox.EventRouter\n{extra}"
        )
    }

    #[test]
    fn an_unset_plugin_name_is_decoderbufs_so_its_slot_is_never_reused() {
        // PostgresConnectorConfig: plugin.name defaults to decoderbufs.
        let m = migrate(
            &with_router("slot.name=orders\n"),
            Options { reuse_slot: true },
        )
        .unwrap();
        assert_eq!(flag(&m, "--slot"), Some("walrelay"));
        let notes = m.notes.join("\n");
        assert!(notes.contains("decoderbufs"), "{notes}");
        // Values are read case-insensitively.
        let m = migrate(
            &with_router("plugin.name=PGOUTPUT\nslot.name=orders\n"),
            Options { reuse_slot: true },
        )
        .unwrap();
        assert_eq!(flag(&m, "--slot"), Some("orders"));
    }

    #[test]
    fn a_slot_debezium_does_not_flush_to_is_not_reused() {
        for setting in ["flush.lsn.source=false", "lsn.flush.mode=MANUAL"] {
            let m = migrate(
                &with_router(&format!("plugin.name=pgoutput\n{setting}\n")),
                Options { reuse_slot: true },
            )
            .unwrap();
            assert_eq!(flag(&m, "--slot"), Some("walrelay"), "{setting}");
        }
    }

    #[test]
    fn topic_creation_and_enum_values_translate() {
        let m = migrate(
            &with_router(
                "topic.creation.default.partitions=12\n\
                 topic.creation.default.replication.factor=-1\n\
                 transforms.outbox.table.op.invalid.behavior=FATAL\n\
                 transforms.outbox.table.expand.json.payload=True\n\
                 transforms.outbox.table.field.event.schema.version=version\n",
            ),
            Options::default(),
        )
        .unwrap();
        assert_eq!(flag(&m, "--topic-partitions"), Some("12"));
        assert_eq!(flag(&m, "--field-schema-version"), Some("version"));
        let notes = m.notes.join("\n");
        assert!(!notes.contains("schema.version"), "{notes}");
        assert_eq!(flag(&m, "--topic-replication-factor"), None);
        assert_eq!(flag(&m, "--on-update"), Some("fatal"));
        assert!(m.args.iter().any(|(f, _)| f == "--expand-json-payload"));
    }

    #[test]
    fn confluents_avro_converter_becomes_avro_with_its_registry_and_no_secret() {
        let m = migrate(
            &with_router(
                "topic.prefix=orders\n\
                 key.converter=org.apache.kafka.connect.storage.StringConverter\n\
                 value.converter=io.confluent.connect.avro.AvroConverter\n\
                 value.converter.schema.registry.url=http://registry:8081\n\
                 value.converter.basic.auth.credentials.source=USER_INFO\n\
                 value.converter.basic.auth.user.info=svc:s3cret\n\
                 transforms.outbox.table.expand.json.payload=true\n",
            ),
            Options::default(),
        )
        .unwrap();
        assert_eq!(flag(&m, "--value-format"), Some("avro"));
        assert_eq!(flag(&m, "--key-format"), Some("string"));
        assert_eq!(
            flag(&m, "--schema-registry-url"),
            Some("http://registry:8081")
        );
        assert_eq!(flag(&m, "--schema-topic-prefix"), Some("orders"));
        let everything = format!("{:?}{}", m.args, m.notes.join("\n"));
        assert!(!everything.contains("s3cret"), "{everything}");
        assert!(
            !everything.contains("no walrelay equivalent"),
            "{everything}"
        );
        assert!(!everything.contains("writes no Avro"), "{everything}");
    }

    #[test]
    fn json_converter_with_schemas_becomes_json_with_schema_named_by_the_topic_prefix() {
        // JsonConverterConfig.SCHEMAS_ENABLE_DEFAULT is true: an unset
        // schemas.enable writes {"schema", "payload"}.
        let m = migrate(
            &with_router(
                "topic.prefix=orders\n\
                 key.converter=org.apache.kafka.connect.json.JsonConverter\n\
                 value.converter=org.apache.kafka.connect.json.JsonConverter\n\
                 value.converter.schemas.enable=true\n",
            ),
            Options::default(),
        )
        .unwrap();
        assert_eq!(flag(&m, "--key-format"), Some("json-with-schema"));
        assert_eq!(flag(&m, "--value-format"), Some("json-with-schema"));
        assert_eq!(flag(&m, "--schema-topic-prefix"), Some("orders"));
        let notes = m.notes.join("\n");
        assert!(!notes.contains("topic.prefix"), "{notes}");
        // An expanded payload keeps its schema (JsonSchemaData's), as in Debezium.
        let m = migrate(
            &with_router(
                "topic.prefix=orders\n\
                 value.converter=org.apache.kafka.connect.json.JsonConverter\n\
                 transforms.outbox.table.expand.json.payload=true\n",
            ),
            Options::default(),
        )
        .unwrap();
        assert_eq!(flag(&m, "--value-format"), Some("json-with-schema"));
        assert!(m.args.iter().any(|(f, _)| f == "--expand-json-payload"));
        assert!(!m
            .notes
            .iter()
            .any(|n| n.contains("table.expand.json.payload")));
    }

    #[test]
    fn router_enumerations_translate_case_insensitively() {
        let m = migrate(
            &with_router(
                "decimal.handling.mode=String\n\
                 transforms.outbox.table.field.additional.missing=IGNORE\n\
                 transforms.outbox.table.json.payload.null.behavior=optional_bytes\n",
            ),
            Options::default(),
        )
        .unwrap();
        assert_eq!(flag(&m, "--decimal-handling-mode"), Some("string"));
        assert_eq!(flag(&m, "--fields-additional-missing"), Some("ignore"));
        assert_eq!(
            flag(&m, "--json-payload-null-behavior"),
            Some("optional-bytes")
        );
    }

    #[test]
    fn tracing_options_map_to_the_trace_context_column_with_notes() {
        let m = migrate(
            &with_router(
                "transforms.outbox.tracing.span.context.field=trace_ctx\n\
                 transforms.outbox.tracing.operation.name=outbox-read\n\
                 transforms.outbox.tracing.with.context.field.only=false\n",
            ),
            Options::default(),
        )
        .unwrap();
        assert_eq!(flag(&m, "--field-tracing-span-context"), Some("trace_ctx"));
        let notes = m.notes.join("\n");
        assert!(notes.contains("column \"trace_ctx\""), "{notes}");
        assert!(
            notes.contains("tracing.operation.name=outbox-read: walrelay creates no spans"),
            "{notes}"
        );
        assert!(
            notes.contains("tracing.with.context.field.only=false"),
            "{notes}"
        );
        assert!(!notes.contains("has no walrelay equivalent"), "{notes}");
        // Unset: Debezium's default column is walrelay's, so no flag is needed.
        let m = migrate(&with_router(""), Options::default()).unwrap();
        assert_eq!(flag(&m, "--field-tracing-span-context"), None);
        assert!(m.notes.iter().any(|n| n.contains("\"tracingspancontext\"")));
    }

    #[test]
    fn extended_headers_are_on_with_the_logical_name_unless_the_connector_turned_them_off() {
        // CommonConnectorConfig.EXTENDED_HEADERS_ENABLED defaults to true;
        // the logical name is topic.prefix (CommonConnectorConfig.getLogicalName).
        let m = migrate(&with_router("topic.prefix=dbserver1\n"), Options::default()).unwrap();
        assert!(m.args.iter().any(|(f, _)| f == "--extended-headers"));
        assert_eq!(flag(&m, "--schema-topic-prefix"), Some("dbserver1"));
        let notes = m.notes.join("\n");
        assert!(!notes.contains("topic.prefix"), "{notes}");
        for off in ["false", " FALSE"] {
            let m = migrate(
                &with_router(&format!(
                    "topic.prefix=dbserver1\nextended.headers.enabled={off}\n"
                )),
                Options::default(),
            )
            .unwrap();
            assert!(!m.args.iter().any(|(f, _)| f == "--extended-headers"));
            assert_eq!(flag(&m, "--schema-topic-prefix"), None);
            let notes = m.notes.join("\n");
            assert!(!notes.contains("extended.headers.enabled"), "{notes}");
        }
        // Without a logical name the command cannot send them: a note says what to add.
        let m = migrate(&with_router(""), Options::default()).unwrap();
        assert!(!m.args.iter().any(|(f, _)| f == "--extended-headers"));
        let notes = m.notes.join("\n");
        assert!(notes.contains("no topic.prefix"), "{notes}");
    }

    #[test]
    fn message_prefixes_get_a_note_that_walrelay_run_publishes_no_message_records() {
        let m = migrate(
            &with_router("topic.prefix=shop\nmessage.prefix.include.list=app\n"),
            Options::default(),
        )
        .unwrap();
        let notes = m.notes.join("\n");
        assert!(
            notes.contains("message.prefix.include.list=app")
                && notes.contains("shop.message")
                && notes.contains("--source messages"),
            "{notes}"
        );
        assert!(!notes.contains("has no walrelay equivalent"), "{notes}");
        assert!(!m.args.iter().any(|(f, _)| f == "--source"));
        // Debezium refuses both lists at once, so migrate does too.
        let err = migrate(
            &with_router("message.prefix.include.list=a\nmessage.prefix.exclude.list=b\n"),
            Options::default(),
        )
        .err()
        .unwrap();
        assert!(err.to_string().contains("both set"), "{err}");
    }

    #[test]
    fn enumerations_debezium_refuses_are_refused_with_the_key() {
        // Field.withEnum's EnumRecommender: "Value must be one of …" stops
        // the connector; table.op.invalid.behavior is withEnum(InvalidOperationBehavior).
        for (setting, key) in [
            (
                "transforms.outbox.table.op.invalid.behavior=skip",
                "table.op.invalid.behavior",
            ),
            (
                "transforms.outbox.table.field.additional.missing=warn",
                "table.field.additional.missing",
            ),
            ("decimal.handling.mode=exact", "decimal.handling.mode"),
        ] {
            let err = migrate(&with_router(&format!("{setting}\n")), Options::default())
                .err()
                .unwrap_or_else(|| panic!("{setting} was accepted"))
                .to_string();
            assert!(
                err.contains(key) && err.contains("Debezium refuses"),
                "{err}"
            );
        }
    }
}
