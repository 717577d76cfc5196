//! An outbox table's Relation message, with what the catalog adds (NOT
//! NULL columns, DEFAULT expressions), as the mapping of its rows: where
//! each mapped column is, its default, and the schemas json-with-schema
//! writes (EventRouterDelegate.getSchemaBuilder for an envelope).

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use super::{Col, MappingConfig, OutboxSchema, SourceNames};
use crate::error::Error;
use crate::outbox::column::ConnectValue;
use crate::outbox::column_default::default_text;
use crate::outbox::format::Format;
use crate::outbox::placement::{self, Placement, Target};
use crate::outbox::schema::{ConnectSchema, RecordSchemas};
use crate::postgres::names::TableName;
use crate::postgres::pgoutput::Relation;

impl OutboxSchema {
    /// Finds the mapped columns in a Relation message. A missing one (for
    /// example after a rename) is a permanent error naming the column.
    /// `not_null` names the table's NOT NULL columns and `defaults` maps
    /// columns to their DEFAULT expressions (pgoutput carries neither).
    pub fn from_relation(
        relation: &Relation,
        config: &MappingConfig,
        table: &TableName,
        not_null: &BTreeSet<String>,
        defaults: &BTreeMap<String, String>,
    ) -> Result<Self, Error> {
        let columns = Columns {
            relation,
            config,
            table,
            not_null,
            defaults: column_defaults(relation, config, defaults),
        };
        // In this order, so that of several problems the same one is named.
        let (present, placements) = columns.placements()?;
        let envelope = config
            .placements
            .iter()
            .any(|p| matches!(p.target, Target::Envelope(_)));
        let key = columns.find(&config.key)?;
        let payload = columns.find(&config.payload)?;
        let key_schema = match config.key_format {
            Format::JsonWithSchema => Some(columns.schema_of(key, &config.key, "--key-format")?),
            _ => None,
        };
        let schema_version = columns.schema_version(envelope)?;
        let (value_schema, envelope_schema) =
            columns.value_schemas(payload, envelope, &placements, &present)?;
        let id = columns.find(&config.id)?;
        let event_type = config
            .event_type
            .as_deref()
            .map(|name| columns.find(name))
            .transpose()?;
        columns.cloud_event_fields(id, &placements)?;
        let header_schemas = columns.header_schemas(id, event_type, &placements)?;
        Ok(OutboxSchema {
            id,
            key,
            event_type,
            payload,
            payload_name: config.payload.clone(),
            route_by: columns.find(&config.route_by)?,
            timestamp: config
                .timestamp
                .as_deref()
                .map(|name| columns.find(name))
                .transpose()?,
            schema_version,
            placements,
            // Optional: Debezium reads the field only when the row has it
            // (ActivateTracingSpan.apply), and most outbox tables do not.
            trace_context: config
                .tracing_span_context
                .as_deref()
                .and_then(|name| columns.find(name).ok()),
            envelope,
            schemas: RecordSchemas::new(key_schema, value_schema, envelope_schema),
            expand_json_payload: config.expand_json_payload,
            tombstone_on_empty_payload: config.tombstone_on_empty_payload,
            decimals: config.decimals,
            key_format: config.key_format,
            value_format: config.value_format,
            expansion: config.expansion,
            extended_headers: config.extended_headers.clone(),
            defaults: columns.defaults,
            header_format: config.header_format,
            header_schemas,
            source_names: SourceNames {
                server: config.schema_topic_prefix.clone().unwrap_or_default(),
                database: config.database.clone(),
                schema: table.schema.clone(),
                table: table.name.clone(),
            },
            metadata_headers: config.metadata_headers,
            cloudevents: config.cloudevents,
        })
    }
}

/// Each column's default as Debezium reads it, as its Postgres text.
fn column_defaults(
    relation: &Relation,
    config: &MappingConfig,
    defaults: &BTreeMap<String, String>,
) -> Vec<Option<Bytes>> {
    relation
        .columns
        .iter()
        .map(|c| {
            let text = default_text(
                defaults.get(&c.name)?,
                c.type_oid,
                c.type_modifier,
                config.decimals,
            )?;
            let value = ConnectValue::from_pg(
                Some(text.as_bytes()),
                c.type_oid,
                c.type_modifier,
                config.decimals,
            );
            value.ok().map(|_| Bytes::from(text))
        })
        .collect()
}

/// The Relation message and what the catalog adds, as the mapping reads it.
struct Columns<'a> {
    relation: &'a Relation,
    config: &'a MappingConfig,
    table: &'a TableName,
    not_null: &'a BTreeSet<String>,
    defaults: Vec<Option<Bytes>>,
}

/// The placements whose column the table has, and where each column is.
type Placements<'a> = (Vec<&'a Placement>, Vec<(Col, Target)>);

/// A record's value schema, or its envelope's schema and name.
type ValueSchemas = (Option<ConnectSchema>, Option<(ConnectSchema, String)>);

impl<'a> Columns<'a> {
    /// The column `name`, or the error that it is gone.
    fn find(&self, name: &str) -> Result<Col, Error> {
        let columns = &self.relation.columns;
        columns
            .iter()
            .position(|c| c.name == name)
            .map(|index| Col {
                index,
                type_oid: columns[index].type_oid,
                type_modifier: columns[index].type_modifier,
                optional: !self.not_null.contains(name),
            })
            .ok_or_else(|| {
                Error::permanent(format!(
                    "the outbox table {} no longer has a column {name:?} \
                     (was it renamed or dropped?); restore the column, or restart walrelay \
                     mapped to the new name; no event was confirmed past this point",
                    self.table
                ))
            })
    }

    /// The placements whose column the table has (all of them unless
    /// --fields-additional-missing ignore), and where each column is.
    fn placements(&self) -> Result<Placements<'a>, Error> {
        let config = self.config;
        let present: Vec<&Placement> = config
            .placements
            .iter()
            .filter(|p| {
                !config.ignore_missing_placements
                    || self.relation.columns.iter().any(|c| c.name == p.column)
            })
            .collect();
        let placements = present
            .iter()
            .map(|p| Ok((self.find(&p.column)?, p.target.clone())))
            .collect::<Result<_, Error>>()?;
        Ok((present, placements))
    }

    /// A column's schema under json-with-schema (`flag` names the format),
    /// with its default.
    fn schema_of(&self, col: Col, name: &str, flag: &str) -> Result<ConnectSchema, Error> {
        let decimals = self.config.decimals;
        let schema =
            ConnectSchema::of_column(col.type_oid, col.type_modifier, decimals, col.optional)
                .map_err(|e| {
                    Error::permanent(format!(
                        "{flag} json-with-schema cannot write column {name:?} of {}: {e}",
                        self.table
                    ))
                })?;
        // TableSchemaBuilder.addField: the column's default in its schema.
        let default = self.defaults[col.index].as_deref().and_then(|text| {
            let value =
                ConnectValue::from_pg(Some(text), col.type_oid, col.type_modifier, decimals);
            value.ok().map(|v| v.json_text())
        });
        Ok(match default {
            Some(json) => schema.with_default(json),
            None => schema,
        })
    }

    /// EventRouterDelegate.apply reads it with getInt32 for an envelope
    /// only (whatever the converter): another type fails Debezium's task
    /// at the first event, walrelay's start here.
    fn schema_version(&self, envelope: bool) -> Result<Option<Col>, Error> {
        let Some(name) = self.config.schema_version.as_deref().filter(|_| envelope) else {
            return Ok(None);
        };
        let col = self.find(name)?;
        if col.type_oid != placement::oid::INT4 {
            return Err(Error::permanent(format!(
                "--field-schema-version column {name:?} of {} is not an integer \
                 (int4): Debezium reads it as an INT32 and fails on any other type \
                 (DataException: Field '{name}' is not of type INT32); change the \
                 column to integer",
                self.table
            )));
        }
        Ok(Some(col))
    }

    /// Under --value-format json-with-schema, the payload's schema, or the
    /// envelope's with its name.
    fn value_schemas(
        &self,
        payload: Col,
        envelope: bool,
        placements: &[(Col, Target)],
        present: &[&Placement],
    ) -> Result<ValueSchemas, Error> {
        let config = self.config;
        if config.value_format != Format::JsonWithSchema {
            return Ok((None, None));
        }
        let payload_schema = self.schema_of(payload, &config.payload, "--value-format")?;
        if !envelope {
            return Ok((Some(payload_schema), None));
        }
        // EventRouterDelegate.getSchemaBuilder: payload, then the envelope
        // placements in configuration order.
        let mut fields = vec![("payload".to_string(), payload_schema)];
        for ((col, target), placement) in placements.iter().zip(present) {
            if let Target::Envelope(alias) = target {
                fields.push((
                    alias.clone(),
                    self.schema_of(*col, &placement.column, "--value-format")?,
                ));
            }
        }
        let prefix = config.schema_topic_prefix.as_deref().unwrap_or_default();
        let name = format!("{prefix}.{}.{}", self.table.schema, self.table.name);
        Ok((None, Some((ConnectSchema::envelope(fields), name))))
    }

    /// Under --value-format cloudevents, a `type` header placement, and an
    /// id and type that are strings.
    fn cloud_event_fields(&self, id: Col, placements: &[(Col, Target)]) -> Result<(), Error> {
        if self.config.value_format != Format::CloudEvents {
            return Ok(());
        }
        let table = self.table;
        let type_placed = placements
            .iter()
            .any(|(_, target)| matches!(target, Target::Header(name) if name == "type"));
        if !type_placed {
            return Err(Error::permanent(format!(
                "--value-format cloudevents takes the CloudEvent's type from the `type` header \
                 placement, whose column {table} does not have (--fields-additional-missing \
                 ignore left it out): every event would fail; restore the column or place \
                 another one as type"
            )));
        }
        // RecordAndMetadataHeaderImpl hands the header's value on as the
        // CloudEvent's id or type, a String: another type fails the task.
        let types = placements.iter().filter_map(|(col, target)| match target {
            Target::Header(name) if name == "type" => Some((*col, "type header")),
            _ => None,
        });
        for (col, what) in [(id, "id")].into_iter().chain(types) {
            let schema = ConnectSchema::of_column(
                col.type_oid,
                col.type_modifier,
                self.config.decimals,
                true,
            );
            if !schema.is_ok_and(|s| s.type_name() == "string") {
                let name = &self.relation.columns[col.index].name;
                return Err(Error::permanent(format!(
                    "--value-format cloudevents: the {what} column {name:?} of {table} is \
                     not text (or uuid), and a CloudEvent's id and type are strings \
                     (Debezium's converter fails on every event); use a text or uuid column"
                )));
            }
        }
        Ok(())
    }

    /// The columns headers are made of, each with its schema, for a
    /// header.converter with schemas.
    fn header_schemas(
        &self,
        id: Col,
        event_type: Option<Col>,
        placements: &[(Col, Target)],
    ) -> Result<Vec<Option<String>>, Error> {
        let columns = &self.relation.columns;
        let mut header_schemas = vec![None; columns.len()];
        if self.config.header_format == Format::JsonWithSchema {
            let headers = placements
                .iter()
                .filter(|(_, target)| matches!(target, Target::Header(_)))
                .map(|(col, _)| *col);
            for col in [id].into_iter().chain(event_type).chain(headers) {
                let schema = self.schema_of(col, &columns[col.index].name, "--header-format")?;
                header_schemas[col.index] = Some(schema.json(None));
            }
        }
        Ok(header_schemas)
    }
}
