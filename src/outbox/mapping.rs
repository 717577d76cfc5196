//! Turns an INSERT into the outbox table into an event, with Debezium's
//! outbox router semantics. Columns are found by name in the Relation
//! message, never by position, so column order and added columns do not
//! matter.

use bytes::Bytes;
use std::borrow::Cow;
use tracing::warn;

use super::cloudevents::{Change, CloudEventsConfig, SourceBlock, DATA_SCHEMA_NAME};
use super::column::{bytea_from_hex, more_oid, ConnectValue, DecimalMode};
use super::connect::json_object;
use super::expansion::{expand, Behaviour, Expansion};
use super::extended_headers::ExtendedHeaders;
use super::format::Format;
use super::placement::{self, Placement, Target};
use super::schema::{Kind, PayloadSchema, RecordSchemas};
use super::timestamp::parse_pg_timestamp_ms;
use super::trace_context::TraceContext;
use crate::postgres::pgoutput::{Datum, Tuple};
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
    /// The event of an outbox row; `change` says where the row was read
    /// (the source block of --value-format cloudevents and --metadata-headers).
    pub fn event(&self, tuple: Tuple, change: &Change) -> Result<OutboxEvent, MappingError> {
        let get = |col: Col| -> Result<Option<Bytes>, String> {
            match tuple.get(col.index) {
                Some(Datum::Null) => Ok(None),
                Some(Datum::Text(bytes)) => Ok(Some(bytes.clone())),
                Some(Datum::UnchangedToast) => {
                    Err("an INSERT carried an unchanged TOAST value".into())
                }
                None => Err(format!(
                    "the row has {} columns but the mapping needs column {}",
                    tuple.len(),
                    col.index + 1
                )),
            }
        };
        let mut event = OutboxEvent::default();
        let fail = |event: OutboxEvent, reason: String| MappingError {
            event: Box::new(event),
            reason,
        };
        // The identifying fields first, so a failure later can still name the event.
        macro_rules! read {
            ($col:expr) => {
                match get($col) {
                    Ok(value) => value,
                    Err(reason) => return Err(fail(event, reason)),
                }
            };
        }
        // What the router reads with Struct.get, which gives a NULL column's
        // default; its typed getters (route-by, timestamp, partition) do not.
        macro_rules! read_or_default {
            ($col:expr) => {
                match read!($col) {
                    None => self.defaults.get($col.index).cloned().flatten(),
                    value => value,
                }
            };
        }
        // A column's header in --header-format's bytes.
        macro_rules! column_header {
            ($name:expr, $col:expr, $text:expr) => {
                match self.column_header($col, $text, false) {
                    Ok(value) => event.headers.push(($name, value)),
                    Err(reason) => return Err(fail(event, reason)),
                }
            };
            // The id and event-type headers: as they always were under
            // SimpleHeaderConverter, the column's Postgres text.
            (raw $name:expr, $col:expr, $text:expr) => {
                match self.column_header($col, $text, true) {
                    Ok(value) => event.headers.push(($name, value)),
                    Err(reason) => return Err(fail(event, reason)),
                }
            };
        }
        event.id = read_or_default!(self.id);
        column_header!(raw Cow::Borrowed("id"), self.id, event.id.clone());
        event.key = read_or_default!(self.key);
        if let Some(col) = self.event_type {
            // A NULL type sends no header at all, not a null one.
            if let Some(event_type) = read!(col) {
                column_header!(raw Cow::Borrowed("event_type"), col, Some(event_type));
            }
        }
        event.route_value = read!(self.route_by);
        let mut payload = read_or_default!(self.payload);
        // A bytea key or payload (Avro, Protobuf) is sent as its raw bytes,
        // as Debezium's BinaryDataConverter and ByteArrayConverter send it.
        // Other typed keys are written as StringConverter writes them (toString).
        if self.key_format.is_json() {
            match self.typed(self.key, event.key.as_deref()) {
                Ok(value) => event.key = Some(Bytes::from(self.schemas.key(value.json_text()))),
                Err(e) => return Err(fail(event, format!("key column: {e}"))),
            }
        } else if self.key.type_oid == placement::oid::BYTEA {
            match event.key.as_deref().map(bytea_from_hex).transpose() {
                Ok(key) => event.key = key,
                Err(e) => return Err(fail(event, format!("key column: {e}"))),
            }
        } else if !is_text(self.key.type_oid) {
            match self.typed(self.key, event.key.as_deref()) {
                Ok(value) => event.key = value.header_text().map(Bytes::from),
                Err(e) => return Err(fail(event, format!("key column: {e}"))),
            }
        }
        if self.payload.type_oid == placement::oid::BYTEA {
            match payload.as_deref().map(bytea_from_hex).transpose() {
                Ok(raw) => payload = raw,
                Err(e) => return Err(fail(event, format!("payload column: {e}"))),
            }
        }

        let mut envelope_fields = Vec::new();
        // The CloudEvent's type: the last header called `type`
        // (RecordAndMetadataHeaderImpl reads headers.lastHeader).
        let mut cloud_event_type = None;
        for (col, target) in &self.placements {
            let value = match target {
                Target::Partition => read!(*col),
                _ => read_or_default!(*col),
            };
            let typed = || match self.typed(*col, value.as_deref()) {
                Ok(typed) => Ok(typed),
                Err(e) => Err(format!("an additional placement's column: {e}")),
            };
            match target {
                Target::Header(name) => {
                    if name == "type" {
                        cloud_event_type = Some(value.clone());
                    }
                    column_header!(Cow::Owned(name.clone()), *col, value)
                }
                Target::Envelope(alias) => match typed() {
                    Ok(typed) => envelope_fields.push((alias.as_str(), typed.json_text())),
                    Err(reason) => return Err(fail(event, reason)),
                },
                Target::Partition => {
                    let Some(value) = value else { continue };
                    match std::str::from_utf8(&value)
                        .ok()
                        .and_then(|v| v.parse::<i32>().ok())
                    {
                        Some(p) if p >= 0 => event.partition = Some(p),
                        _ => {
                            let reason = format!(
                                "partition column value {:?} is not a partition number",
                                String::from_utf8_lossy(&value)
                            );
                            return Err(fail(event, reason));
                        }
                    }
                }
            }
        }
        if let Some(col) = self.timestamp {
            if let Some(value) = read!(col) {
                let text = String::from_utf8_lossy(&value);
                let parsed = match col.type_oid {
                    placement::oid::INT8 => text.parse::<i64>().map_err(|e| e.to_string()),
                    _ => parse_pg_timestamp_ms(&text),
                };
                match parsed {
                    Ok(ms) => event.timestamp_ms = Some(ms),
                    Err(e) => return Err(fail(event, format!("timestamp column: {e}"))),
                }
            }
        }

        if let Some(col) = self.trace_context {
            if let Some(stored) = read!(col) {
                event.add_trace_context(&stored, self.header_format);
            }
        }
        let source = SourceBlock {
            server: &self.source_names.server,
            database: &self.source_names.database,
            schema: &self.source_names.schema,
            table: &self.source_names.table,
            change,
        };

        event.payload = if self.tombstone_on_empty_payload && self.is_empty(payload.as_ref()) {
            None
        } else if self.value_format == Format::CloudEvents {
            // fromConnectData: a null value stays null.
            if payload.is_none() {
                None
            } else {
                let data = match self.cloud_event_data(payload.as_ref()) {
                    Ok(data) => data,
                    Err(reason) => return Err(fail(event, format!("{CLOUDEVENTS}: {reason}"))),
                };
                let id = event.id.as_deref().map(String::from_utf8_lossy);
                let kind = cloud_event_type.flatten();
                let kind = kind.as_deref().map(String::from_utf8_lossy);
                let (Some(id), Some(kind)) = (id, kind) else {
                    let what = if event.id.is_none() {
                        "event id"
                    } else {
                        "`type` header"
                    };
                    let reason = format!(
                        "{CLOUDEVENTS}: its {what} is NULL; a CloudEvent needs an id and a type, \
                         and Debezium's converter fails its task on this row; make the column \
                         NOT NULL or give it a DEFAULT"
                    );
                    return Err(fail(event, reason));
                };
                match source.cloud_event(self.cloudevents, &id, &kind, &data) {
                    Ok(event) => Some(Bytes::from(event)),
                    Err(reason) => return Err(fail(event, format!("{CLOUDEVENTS}: {reason}"))),
                }
            }
        } else if self.envelope {
            let (payload, schema) = match self.json_payload(payload.as_ref()) {
                Ok((_, PayloadSchema::Null)) => {
                    let reason = format!(
                        "payload column: {EXPANSION}: a top-level empty array has no schema, \
                         and Debezium's router cannot build an envelope around none, so its \
                         task fails on this row"
                    );
                    return Err(fail(event, reason));
                }
                Ok(json) => json,
                Err(e) => return Err(fail(event, format!("payload column: {e}"))),
            };
            envelope_fields.insert(0, ("payload", payload));
            let json = json_object(&envelope_fields);
            let route_value = event.route_value.as_deref();
            // getInt32: a NULL is no version, and no default stands in.
            let version = match self.schema_version {
                Some(col) => match read!(col).map(|text| parse_int4(&text)) {
                    Some(Some(version)) => Some(version),
                    Some(None) => {
                        let reason = "schema version column: not an int4".to_string();
                        return Err(fail(event, reason));
                    }
                    None => None,
                },
                None => None,
            };
            let envelope = self.schemas.envelope(json, route_value, version, &schema);
            Some(Bytes::from(envelope))
        } else if self.value_format.is_json() {
            match self.json_payload(payload.as_ref()) {
                Ok((json, schema)) => Some(Bytes::from(self.schemas.value(json, &schema))),
                Err(e) => return Err(fail(event, format!("payload column: {e}"))),
            }
        } else {
            payload
        };
        if self.metadata_headers {
            // HeaderFrom$Value appends them to the change record's headers,
            // before the router's own.
            event
                .headers
                .splice(0..0, source.headers(self.header_format));
        }
        if let Some(extended) = &self.extended_headers {
            // The change record's headers, which the router appends to.
            extended.prepend_to(&mut event.headers);
        }
        Ok(event)
    }

    /// The event of a row read from the WAL in a test.
    #[cfg(test)]
    pub fn row_event(&self, tuple: Tuple) -> Result<OutboxEvent, MappingError> {
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

mod relation;
#[cfg(test)]
mod tests;
