//! An outbox row made into an event, step by step: the identifying
//! fields first (so that a failure later can still name the event), then
//! the additional placements, the timestamp and trace context, the value
//! in its format, and the headers the change record carried.

use std::borrow::Cow;

use bytes::Bytes;

use super::{
    is_text, parse_int4, Col, MappingError, OutboxEvent, OutboxSchema, CLOUDEVENTS, EXPANSION,
};
use crate::outbox::cloudevents::{Change, SourceBlock};
use crate::outbox::column::bytea_from_hex;
use crate::outbox::connect::json_object;
use crate::outbox::format::Format;
use crate::outbox::placement::{self, Target};
use crate::outbox::schema::PayloadSchema;
use crate::outbox::timestamp::parse_pg_timestamp_ms;
use crate::postgres::pgoutput::{Datum, Tuple};

/// What the placements leave for the value: the envelope's fields, and
/// the CloudEvent's type (the last header called `type`,
/// RecordAndMetadataHeaderImpl reads headers.lastHeader).
struct Placed<'s> {
    envelope_fields: Vec<(&'s str, String)>,
    cloud_event_type: Option<Option<Bytes>>,
}

impl OutboxSchema {
    /// The event of an outbox row; `change` says where the row was read
    /// (the source block of --value-format cloudevents and --metadata-headers).
    pub fn event(&self, tuple: Tuple, change: &Change) -> Result<OutboxEvent, MappingError> {
        let mut event = OutboxEvent::default();
        match self.fill(&tuple, change, &mut event) {
            Ok(()) => Ok(event),
            // What was read of the row names it in the error.
            Err(reason) => Err(MappingError {
                event: Box::new(event),
                reason,
            }),
        }
    }

    fn fill(&self, tuple: &Tuple, change: &Change, event: &mut OutboxEvent) -> Result<(), String> {
        let payload = self.identify(tuple, event)?;
        let mut placed = self.place(tuple, event)?;
        self.timestamp_and_trace(tuple, event)?;
        let source = SourceBlock {
            server: &self.source_names.server,
            database: &self.source_names.database,
            schema: &self.source_names.schema,
            table: &self.source_names.table,
            change,
        };
        event.payload = self.value(tuple, event, payload, &mut placed, &source)?;
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
        Ok(())
    }

    /// The id, key, event type and route: the fields that name the event.
    /// Returns the payload column as read (raw bytes for a bytea).
    fn identify(&self, tuple: &Tuple, event: &mut OutboxEvent) -> Result<Option<Bytes>, String> {
        event.id = self.read_or_default(tuple, self.id)?;
        // The id and event-type headers: as they always were under
        // SimpleHeaderConverter, the column's Postgres text.
        let id_header = self.column_header(self.id, event.id.clone(), true)?;
        event.headers.push((Cow::Borrowed("id"), id_header));
        event.key = self.read_or_default(tuple, self.key)?;
        if let Some(col) = self.event_type {
            // A NULL type sends no header at all, not a null one.
            if let Some(event_type) = read(tuple, col)? {
                let header = self.column_header(col, Some(event_type), true)?;
                event.headers.push((Cow::Borrowed("event_type"), header));
            }
        }
        event.route_value = read(tuple, self.route_by)?;
        let mut payload = self.read_or_default(tuple, self.payload)?;
        // A bytea key or payload (Avro, Protobuf) is sent as its raw bytes,
        // as Debezium's BinaryDataConverter and ByteArrayConverter send it.
        // Other typed keys are written as StringConverter writes them (toString).
        let key_column = |e| format!("key column: {e}");
        if self.key_format.is_json() {
            let value = self
                .typed(self.key, event.key.as_deref())
                .map_err(key_column)?;
            event.key = Some(Bytes::from(self.schemas.key(value.json_text())));
        } else if self.key.type_oid == placement::oid::BYTEA {
            event.key = event
                .key
                .as_deref()
                .map(bytea_from_hex)
                .transpose()
                .map_err(key_column)?;
        } else if !is_text(self.key.type_oid) {
            let value = self
                .typed(self.key, event.key.as_deref())
                .map_err(key_column)?;
            event.key = value.header_text().map(Bytes::from);
        }
        if self.payload.type_oid == placement::oid::BYTEA {
            payload = payload
                .as_deref()
                .map(bytea_from_hex)
                .transpose()
                .map_err(|e| format!("payload column: {e}"))?;
        }
        Ok(payload)
    }

    /// --fields-additional-placement: headers, envelope fields, partition.
    fn place(&self, tuple: &Tuple, event: &mut OutboxEvent) -> Result<Placed<'_>, String> {
        let mut placed = Placed {
            envelope_fields: Vec::new(),
            cloud_event_type: None,
        };
        for (col, target) in &self.placements {
            let value = match target {
                Target::Partition => read(tuple, *col)?,
                _ => self.read_or_default(tuple, *col)?,
            };
            let typed = || match self.typed(*col, value.as_deref()) {
                Ok(typed) => Ok(typed),
                Err(e) => Err(format!("an additional placement's column: {e}")),
            };
            match target {
                Target::Header(name) => {
                    if name == "type" {
                        placed.cloud_event_type = Some(value.clone());
                    }
                    // A column's header in --header-format's bytes.
                    let header = self.column_header(*col, value, false)?;
                    event.headers.push((Cow::Owned(name.clone()), header));
                }
                Target::Envelope(alias) => {
                    let typed = typed()?;
                    placed
                        .envelope_fields
                        .push((alias.as_str(), typed.json_text()));
                }
                Target::Partition => {
                    let Some(value) = value else { continue };
                    match std::str::from_utf8(&value)
                        .ok()
                        .and_then(|v| v.parse::<i32>().ok())
                    {
                        Some(p) if p >= 0 => event.partition = Some(p),
                        _ => {
                            return Err(format!(
                                "partition column value {:?} is not a partition number",
                                String::from_utf8_lossy(&value)
                            ))
                        }
                    }
                }
            }
        }
        Ok(placed)
    }

    /// The Kafka timestamp column and the writer's trace context.
    fn timestamp_and_trace(&self, tuple: &Tuple, event: &mut OutboxEvent) -> Result<(), String> {
        if let Some(col) = self.timestamp {
            if let Some(value) = read(tuple, col)? {
                let text = String::from_utf8_lossy(&value);
                let parsed = match col.type_oid {
                    placement::oid::INT8 => text.parse::<i64>().map_err(|e| e.to_string()),
                    _ => parse_pg_timestamp_ms(&text),
                };
                let ms = parsed.map_err(|e| format!("timestamp column: {e}"))?;
                event.timestamp_ms = Some(ms);
            }
        }
        if let Some(col) = self.trace_context {
            if let Some(stored) = read(tuple, col)? {
                event.add_trace_context(&stored, self.header_format);
            }
        }
        Ok(())
    }

    /// The record's value in --value-format: a tombstone, a CloudEvent, an
    /// envelope, JSON, or the payload as it is.
    fn value(
        &self,
        tuple: &Tuple,
        event: &OutboxEvent,
        payload: Option<Bytes>,
        placed: &mut Placed<'_>,
        source: &SourceBlock<'_>,
    ) -> Result<Option<Bytes>, String> {
        if self.tombstone_on_empty_payload && self.is_empty(payload.as_ref()) {
            Ok(None)
        } else if self.value_format == Format::CloudEvents {
            // fromConnectData: a null value stays null.
            match payload {
                None => Ok(None),
                Some(payload) => self.cloud_event(event, &payload, placed, source).map(Some),
            }
        } else if self.envelope {
            self.envelope(tuple, event, payload.as_ref(), placed)
                .map(Some)
        } else if self.value_format.is_json() {
            let (json, schema) = self
                .json_payload(payload.as_ref())
                .map_err(|e| format!("payload column: {e}"))?;
            Ok(Some(Bytes::from(self.schemas.value(json, &schema))))
        } else {
            Ok(payload)
        }
    }

    /// The value as CloudEventsConverter writes it.
    fn cloud_event(
        &self,
        event: &OutboxEvent,
        payload: &Bytes,
        placed: &mut Placed<'_>,
        source: &SourceBlock<'_>,
    ) -> Result<Bytes, String> {
        let data = self
            .cloud_event_data(Some(payload))
            .map_err(|reason| format!("{CLOUDEVENTS}: {reason}"))?;
        let id = event.id.as_deref().map(String::from_utf8_lossy);
        let kind = placed.cloud_event_type.take().flatten();
        let kind = kind.as_deref().map(String::from_utf8_lossy);
        let (Some(id), Some(kind)) = (id, kind) else {
            let what = if event.id.is_none() {
                "event id"
            } else {
                "`type` header"
            };
            return Err(format!(
                "{CLOUDEVENTS}: its {what} is NULL; a CloudEvent needs an id and a type, \
                 and Debezium's converter fails its task on this row; make the column \
                 NOT NULL or give it a DEFAULT"
            ));
        };
        source
            .cloud_event(self.cloudevents, &id, &kind, &data)
            .map(Bytes::from)
            .map_err(|reason| format!("{CLOUDEVENTS}: {reason}"))
    }

    /// The envelope around the payload and the envelope placements.
    fn envelope(
        &self,
        tuple: &Tuple,
        event: &OutboxEvent,
        payload: Option<&Bytes>,
        placed: &mut Placed<'_>,
    ) -> Result<Bytes, String> {
        let (payload, schema) = match self.json_payload(payload) {
            Ok((_, PayloadSchema::Null)) => {
                return Err(format!(
                    "payload column: {EXPANSION}: a top-level empty array has no schema, \
                     and Debezium's router cannot build an envelope around none, so its \
                     task fails on this row"
                ));
            }
            Ok(json) => json,
            Err(e) => return Err(format!("payload column: {e}")),
        };
        placed.envelope_fields.insert(0, ("payload", payload));
        let json = json_object(&placed.envelope_fields);
        let route_value = event.route_value.as_deref();
        // getInt32: a NULL is no version, and no default stands in.
        let version = match self.schema_version {
            Some(col) => match read(tuple, col)?.map(|text| parse_int4(&text)) {
                Some(Some(version)) => Some(version),
                Some(None) => return Err("schema version column: not an int4".to_string()),
                None => None,
            },
            None => None,
        };
        let envelope = self.schemas.envelope(json, route_value, version, &schema);
        Ok(Bytes::from(envelope))
    }

    /// What the router reads with Struct.get, which gives a NULL column's
    /// default; its typed getters (route-by, timestamp, partition) do not.
    fn read_or_default(&self, tuple: &Tuple, col: Col) -> Result<Option<Bytes>, String> {
        Ok(match read(tuple, col)? {
            None => self.defaults.get(col.index).cloned().flatten(),
            value => value,
        })
    }
}

/// A column's value in the row: None for NULL.
fn read(tuple: &Tuple, col: Col) -> Result<Option<Bytes>, String> {
    match tuple.get(col.index) {
        Some(Datum::Null) => Ok(None),
        Some(Datum::Text(bytes)) => Ok(Some(bytes.clone())),
        Some(Datum::UnchangedToast) => Err("an INSERT carried an unchanged TOAST value".into()),
        None => Err(format!(
            "the row has {} columns but the mapping needs column {}",
            tuple.len(),
            col.index + 1
        )),
    }
}
