//! Turns an INSERT into the outbox table into an event, with Debezium's
//! outbox router semantics. Columns are found by name in the Relation
//! message, never by position, so column order and added columns do not
//! matter.

use bytes::Bytes;
use tracing::warn;

use super::cloudevents::{CloudEventsConfig, DATA_SCHEMA_NAME};
use super::column::{more_oid, ConnectValue, DecimalMode};
use super::expansion::{expand, Behaviour, Expansion};
use super::extended_headers::ExtendedHeaders;
use super::format::Format;
use super::placement::{self, Placement, Target};
use super::schema::{Kind, PayloadSchema, RecordSchemas};
use super::trace_context::TraceContext;
use crate::sink::{Header, Record};

/// Which columns make an event, and how (the `--field-*` flags).
#[derive(Debug, Clone)]
pub struct MappingConfig {
    pub id: String,
    pub key: String,
    /// None: no event-type column and no `event_type` header, as in Debezium.
    pub event_type: Option<String>,
    pub payload: String,
    pub route_by: String,
    pub timestamp: Option<String>,
    /// The int4 column whose value versions the envelope's schema
    /// (`table.field.event.schema.version`).
    pub schema_version: Option<String>,
    pub placements: Vec<Placement>,
    pub expand_json_payload: bool,
    pub tombstone_on_empty_payload: bool,
    /// How numeric columns become header and envelope values.
    pub decimals: DecimalMode,
    pub key_format: Format,
    pub value_format: Format,
    /// What --expand-json-payload keeps of null fields and empty arrays.
    pub expansion: Behaviour,
    /// `table.field.additional.missing=ignore`: a placed column that is not
    /// in the table is left out instead of stopping walrelay.
    pub ignore_missing_placements: bool,
    /// The column holding the writer's trace context
    /// (`tracing.span.context.field`); None turns propagation off.
    pub tracing_span_context: Option<String>,
    /// Debezium's `topic.prefix`, which names the envelope's schema under
    /// json-with-schema.
    pub schema_topic_prefix: Option<String>,
    /// Debezium 3's `__debezium.context.*` headers of this run
    /// (`--extended-headers`), before every event's own.
    pub extended_headers: Option<ExtendedHeaders>,
    /// The worker's header.converter (`--header-format`).
    pub header_format: Format,
    /// HeaderFrom's copies of the change event's `source`, `op` and
    /// `transaction` (`--metadata-headers`).
    pub metadata_headers: bool,
    /// The options of `--value-format cloudevents`.
    pub cloudevents: CloudEventsConfig,
    /// The database's name, the source block's `db`.
    pub database: String,
}

impl MappingConfig {
    /// The defaults of walrelay's own outbox table (sql/outbox.sql).
    #[cfg(test)]
    pub fn defaults() -> Self {
        MappingConfig {
            id: "id".into(),
            key: "aggregate_id".into(),
            event_type: Some("event_type".into()),
            payload: "payload".into(),
            route_by: "event_type".into(),
            timestamp: None,
            schema_version: None,
            placements: Vec::new(),
            expand_json_payload: false,
            tombstone_on_empty_payload: false,
            decimals: DecimalMode::Precise,
            key_format: Format::String,
            value_format: Format::String,
            expansion: Behaviour::default(),
            ignore_missing_placements: false,
            tracing_span_context: Some("tracingspancontext".into()),
            schema_topic_prefix: None,
            extended_headers: None,
            header_format: Format::String,
            metadata_headers: false,
            cloudevents: CloudEventsConfig {
                data_with_schema: true,
                extension_attributes: true,
            },
            database: "postgres".into(),
        }
    }

    /// Whether events carry Debezium's source block (in a CloudEvent or
    /// the metadata headers).
    pub fn writes_source_block(&self) -> bool {
        self.metadata_headers || self.value_format == Format::CloudEvents
    }

    /// Every column the mapping reads, for the start-up check.
    pub fn column_names(&self) -> Vec<&str> {
        let mut names = vec![self.id.as_str(), &self.key, &self.payload, &self.route_by];
        names.extend(self.event_type.as_deref());
        names.extend(self.timestamp.as_deref());
        if !self.ignore_missing_placements {
            names.extend(self.placements.iter().map(|p| p.column.as_str()));
        }
        names
    }
}

/// A column's position and type in the latest Relation message, and
/// whether it may be NULL (from the catalog).
#[derive(Debug, Clone, Copy)]
struct Col {
    index: usize,
    type_oid: u32,
    type_modifier: i32,
    optional: bool,
}

/// The outbox table as the mapping needs it, from its latest Relation message.
#[derive(Debug, Clone)]
pub struct OutboxSchema {
    id: Col,
    key: Col,
    event_type: Option<Col>,
    payload: Col,
    /// The payload column's name: the expanded struct's schema name.
    payload_name: String,
    route_by: Col,
    timestamp: Option<Col>,
    /// Only with an envelope under json-with-schema, the one place it shows.
    schema_version: Option<Col>,
    placements: Vec<(Col, Target)>,
    /// The trace context column, when the table has it.
    trace_context: Option<Col>,
    /// Any envelope placement configured, present in the table or not: the
    /// value is then an envelope (EventRouterDelegate.onlyHeadersInOutputMessage).
    envelope: bool,
    expand_json_payload: bool,
    tombstone_on_empty_payload: bool,
    decimals: DecimalMode,
    key_format: Format,
    value_format: Format,
    expansion: Behaviour,
    /// JsonConverter's schemas under json-with-schema (none otherwise).
    schemas: RecordSchemas,
    extended_headers: Option<ExtendedHeaders>,
    /// Each column's DEFAULT as Debezium reads it (Postgres text), by
    /// position: Kafka Connect's Struct.get hands it out for a NULL.
    defaults: Vec<Option<Bytes>>,
    header_format: Format,
    /// Under `--header-format json-with-schema`, the schema (JsonConverter's
    /// text) of each column a header is made of, by position.
    header_schemas: Vec<Option<String>>,
    /// The source block's names: topic.prefix, database, schema, table.
    source_names: SourceNames,
    metadata_headers: bool,
    cloudevents: CloudEventsConfig,
}

/// The names in the source block of this table's rows.
#[derive(Debug, Clone)]
struct SourceNames {
    server: String,
    database: String,
    schema: String,
    table: String,
}

/// One outbox event, sharing memory with the replication message it came from.
#[derive(Debug, Clone, Default)]
pub struct OutboxEvent {
    /// The event id, also the `id` header.
    pub id: Option<Bytes>,
    pub key: Option<Bytes>,
    /// The Kafka value: the payload, an envelope around it, or None (a tombstone).
    pub payload: Option<Bytes>,
    pub route_value: Option<Bytes>,
    /// Every header, in order: Debezium 3's `__debezium.context.*` (with
    /// `--extended-headers`), `traceparent` and `tracestate` (when the row
    /// carries a trace context), `id`, `event_type` (when there is one),
    /// then those of `column:header` placements.
    pub headers: Vec<Header>,
    pub partition: Option<i32>,
    /// From `--field-timestamp`; the commit time otherwise.
    pub timestamp_ms: Option<i64>,
}

impl OutboxEvent {
    /// The record for this event in `topic`; `commit_time_ms` stamps it
    /// unless a timestamp column did.
    pub fn record<'a>(&'a self, topic: &'a str, commit_time_ms: i64) -> Record<'a> {
        Record {
            topic,
            key: self.key.as_deref(),
            value: self.payload.as_deref(),
            headers: &self.headers,
            partition: self.partition,
            timestamp_ms: self.timestamp_ms.unwrap_or(commit_time_ms),
        }
    }

    /// The value of the first header called `name`.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_deref())
    }

    /// Puts the writer's trace context (see outbox::trace_context) first in
    /// the headers, where Debezium's tracing puts it (before "id"). A
    /// malformed one is logged and left out: the event is still published,
    /// as Debezium publishes it with a new, unconnected trace.
    pub fn add_trace_context(&mut self, stored: &[u8], format: Format) {
        match TraceContext::parse(stored) {
            Ok(Some(context)) => {
                let headers = context
                    .headers()
                    .map(|(name, value)| (name, format.string_header(value)));
                self.headers.splice(0..0, headers);
            }
            Ok(None) => {}
            Err(problem) => warn!(
                event_id = %self.id_text(),
                "publishing the event without trace headers: {problem}; the writer \
                 must store W3C trace context as java.util.Properties text \
                 (traceparent=00-<trace-id>-<span-id>-<flags>)"
            ),
        }
    }

    /// The event id for messages and logs.
    pub fn id_text(&self) -> String {
        match &self.id {
            Some(id) => String::from_utf8_lossy(id).into_owned(),
            None => "(NULL id)".into(),
        }
    }
}

/// A row that could not become an event: what was read of it, and why.
/// Boxed: it is the rare path.
#[derive(Debug)]
pub struct MappingError {
    pub event: Box<OutboxEvent>,
    pub reason: String,
}

impl OutboxSchema {
    /// The event of a row read from the WAL in a test.
    #[cfg(test)]
    pub fn row_event(
        &self,
        tuple: crate::postgres::pgoutput::Tuple,
    ) -> Result<OutboxEvent, MappingError> {
        self.event(tuple, &super::cloudevents::tests::STREAMED)
    }

    /// A header made of a column's value, in --header-format's bytes.
    /// `raw`: under SimpleHeaderConverter, the Postgres text whatever the type.
    fn column_header(
        &self,
        col: Col,
        text: Option<Bytes>,
        raw: bool,
    ) -> Result<Option<Bytes>, String> {
        let typed = || self.typed(col, text.as_deref());
        match self.header_format {
            Format::String | Format::CloudEvents if raw => Ok(text),
            // Text is its own header text (Values.convertToString of a
            // String): pass its bytes on untouched, whatever the encoding.
            Format::String | Format::CloudEvents
                if is_text(col.type_oid) && col.type_oid != placement::oid::BYTEA =>
            {
                Ok(text)
            }
            Format::String | Format::CloudEvents => Ok(typed()?.header_text().map(Bytes::from)),
            format => {
                let json = typed()?.json_text();
                let schema = self.header_schemas[col.index].as_deref().unwrap_or("null");
                Ok(format.header(None, || json, schema))
            }
        }
    }

    /// CloudEventsConverter's `data`: the router's value (the expanded
    /// payload, or the envelope around it) as a struct named
    /// io.debezium.connector.postgresql.Data, with its schema unless
    /// --cloudevents-data-schema is off.
    /// (An envelope placement is refused at start-up with this format.)
    fn cloud_event_data(&self, payload: Option<&Bytes>) -> Result<String, String> {
        let (json, schema) = self.json_payload(payload)?;
        let inferred = match schema {
            PayloadSchema::Inferred(schema) => schema,
            PayloadSchema::Null => return Err(NOT_A_STRUCT.replace("{what}", "an empty array")),
            PayloadSchema::Column => {
                return Err(NOT_A_STRUCT.replace("{what}", "not a JSON object (or not expanded)"))
            }
        };
        if !matches!(inferred.kind(), Kind::Struct(_)) {
            return Err(NOT_A_STRUCT.replace("{what}", "a JSON array"));
        }
        if !self.cloudevents.data_with_schema {
            return Ok(json);
        }
        let schema = inferred.required().json(Some(DATA_SCHEMA_NAME));
        Ok(format!("{{\"schema\":{schema},\"payload\":{json}}}"))
    }

    fn typed(&self, col: Col, text: Option<&[u8]>) -> Result<ConnectValue, String> {
        ConnectValue::from_pg(text, col.type_oid, col.type_modifier, self.decimals)
    }

    /// Debezium's tombstone test, `payload == null ||
    /// payload.toString().trim().isEmpty()` (EventRouterDelegate.apply):
    /// Java's trim drops every character up to ' '; a byte array's toString
    /// is never empty, so a bytea payload is empty only when NULL.
    fn is_empty(&self, payload: Option<&Bytes>) -> bool {
        match payload {
            None => true,
            Some(_) if self.payload.type_oid == placement::oid::BYTEA => false,
            Some(p) => p.iter().all(|b| *b <= b' '),
        }
    }

    /// The payload as JsonConverter writes it (inside an envelope or alone),
    /// and its schema: a string (json and jsonb are strings to Debezium),
    /// unless --expand-json-payload finds a JSON object in it
    /// (EventRouterDelegate.parseJsonPayload reads only text starting with
    /// '{' or '['; see outbox::expansion for what comes of it).
    fn json_payload(&self, payload: Option<&Bytes>) -> Result<(String, PayloadSchema), String> {
        if self.payload.type_oid == placement::oid::BYTEA {
            // Already raw bytes.
            let value = payload.map_or(ConnectValue::Null, |b| ConnectValue::Bytes(b.clone()));
            return Ok((value.json_text(), PayloadSchema::Column));
        }
        let typed = self.typed(self.payload, payload.map(|p| &p[..]))?;
        if let (true, ConnectValue::String(text)) = (self.expand_json_payload, &typed) {
            match expand(text, &self.payload_name, self.expansion) {
                Expansion::Expanded { json, schema } => {
                    return Ok((json, PayloadSchema::Inferred(schema)))
                }
                Expansion::Kept => {}
                Expansion::Unfit { schema: None, .. } => {
                    return Ok((typed.json_text(), PayloadSchema::Null))
                }
                Expansion::Unfit {
                    schema: Some(_),
                    why,
                } => {
                    return Err(format!(
                        "{EXPANSION}: {why}; Debezium's router pairs the payload string with \
                         that schema, which Kafka Connect cannot write, so its task fails on \
                         this row"
                    ))
                }
            }
        }
        Ok((typed.json_text(), PayloadSchema::Column))
    }
}

/// How a payload's expansion names itself in an event's failure.
const EXPANSION: &str = "--expand-json-payload (table.expand.json.payload)";

/// How the CloudEvents format names itself in an event's failure.
const CLOUDEVENTS: &str = "--value-format cloudevents (Debezium's CloudEventsConverter)";

/// Why a payload cannot be a CloudEvent's data (CloudEventsConverter's
/// "Mismatching schema" and "Not a struct schema").
const NOT_A_STRUCT: &str = "the payload is {what}: the converter's data must be a struct, \
                            and Debezium's task fails on this row";

fn parse_int4(text: &[u8]) -> Option<i32> {
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// Types whose text is already what Debezium's StringConverter would write.
fn is_text(type_oid: u32) -> bool {
    !matches!(
        type_oid,
        placement::oid::BOOL
            | placement::oid::INT2
            | placement::oid::INT4
            | placement::oid::INT8
            | placement::oid::FLOAT4
            | placement::oid::FLOAT8
            | more_oid::NUMERIC
            | more_oid::DATE
            | more_oid::TIMESTAMP
            | more_oid::TIMESTAMPTZ
    )
}

mod event;
mod relation;
#[cfg(test)]
mod tests;
