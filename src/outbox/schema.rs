//! Kafka Connect schemas of the records Debezium's outbox router makes, and
//! the text Kafka Connect's JsonConverter writes for them with
//! schemas.enable=true (`--key-format` / `--value-format json-with-schema`).
//!
//! Sources:
//! - the column schemas: debezium-connector-postgres/.../PostgresValueConverter.java
//!   (`schemaBuilder`), debezium-core/.../data/Json.java and Uuid.java
//!   (string, version 1), .../data/VariableScaleDecimal.java (a struct
//!   `scale` int32, `value` bytes, version 1, doc "Variable scaled decimal"),
//!   .../data/SpecialValueDecimal.java `builder` (precise: Connect's Decimal
//!   plus the parameter connect.decimal.precision; string; double),
//!   .../time/{Date,Timestamp,MicroTimestamp,ZonedTimestamp}.java (int32,
//!   int64, int64, string, all version 1); TableSchemaBuilder.addField makes
//!   a nullable column's schema optional.
//! - the envelope: debezium-core/.../transforms/outbox/EventRouterDelegate.java
//!   `getSchemaBuilder` (a struct, not optional, `payload` then the envelope
//!   placements in configuration order) and `getSchemaName`.
//! - the text: apache/kafka connect/json/.../JsonConverter.java
//!   `asJsonSchema` ("type", for a struct "fields", then "optional", "name",
//!   "version", "doc", "parameters"; a struct field's schema ends with
//!   "field") and JsonSchema.java (type names; the envelope `schema` then
//!   `payload`), written compact by Jackson. Connect's
//!   SchemaBuilder.parameter keeps parameters in insertion order.

use std::borrow::Cow;

use super::column::{more_oid, DecimalMode};
use super::placement::oid;

/// Postgres type OIDs whose schema is a (named) string.
pub mod text_oid {
    pub const NAME: u32 = 19;
    pub const TEXT: u32 = 25;
    pub const BPCHAR: u32 = 1042;
    pub const VARCHAR: u32 = 1043;
    pub const UUID: u32 = 2950;
}

/// A schema's type, with what a struct or an array holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Boolean,
    Int16,
    Int32,
    Int64,
    Float32,
    Float64,
    String,
    Bytes,
    Array(Box<ConnectSchema>),
    Struct(Vec<(String, ConnectSchema)>),
}

/// A Kafka Connect schema.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectSchema {
    kind: Kind,
    optional: bool,
    name: Option<Cow<'static, str>>,
    version: Option<i32>,
    doc: Option<&'static str>,
    parameters: Vec<(&'static str, String)>,
    /// The default value as JsonConverter writes it (a column's DEFAULT).
    default: Option<String>,
}

impl ConnectSchema {
    fn plain(kind: Kind) -> Self {
        ConnectSchema {
            kind,
            optional: false,
            name: None,
            version: None,
            doc: None,
            parameters: Vec::new(),
            default: None,
        }
    }

    fn logical(kind: Kind, name: &'static str) -> Self {
        ConnectSchema {
            name: Some(Cow::Borrowed(name)),
            version: Some(1),
            ..Self::plain(kind)
        }
    }

    /// An optional schema of `kind`, named `name` when given: what
    /// JsonSchemaData.toConnectSchema builds for an expanded payload.
    pub fn optional(kind: Kind, name: Option<String>) -> Self {
        ConnectSchema {
            optional: true,
            name: name.map(Cow::Owned),
            ..Self::plain(kind)
        }
    }

    /// The same schema with a default value, `json` as JsonConverter writes it.
    pub fn with_default(self, json: String) -> Self {
        ConnectSchema {
            default: Some(json),
            ..self
        }
    }

    /// The same schema, required (SchemaUtil.copySchemaBasics keeps the
    /// name but not `optional`).
    pub fn required(self) -> Self {
        ConnectSchema {
            optional: false,
            ..self
        }
    }

    pub fn kind(&self) -> &Kind {
        &self.kind
    }

    pub fn is_optional(&self) -> bool {
        self.optional
    }

    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// JsonSchema's name of the type (`"int32"`, `"struct"`, …).
    pub fn type_name(&self) -> &'static str {
        match &self.kind {
            Kind::Boolean => "boolean",
            Kind::Int16 => "int16",
            Kind::Int32 => "int32",
            Kind::Int64 => "int64",
            Kind::Float32 => "float",
            Kind::Float64 => "double",
            Kind::String => "string",
            Kind::Bytes => "bytes",
            Kind::Array(_) => "array",
            Kind::Struct(_) => "struct",
        }
    }

    /// The schema Debezium's PostgreSQL connector gives a column of this
    /// type, or why walrelay cannot tell.
    pub fn of_column(
        type_oid: u32,
        type_modifier: i32,
        decimals: DecimalMode,
        optional: bool,
    ) -> Result<Self, String> {
        let schema = match type_oid {
            oid::BOOL => Self::plain(Kind::Boolean),
            oid::INT2 => Self::plain(Kind::Int16),
            oid::INT4 => Self::plain(Kind::Int32),
            oid::INT8 => Self::plain(Kind::Int64),
            oid::FLOAT4 => Self::plain(Kind::Float32),
            oid::FLOAT8 => Self::plain(Kind::Float64),
            oid::BYTEA => Self::plain(Kind::Bytes),
            oid::JSON | oid::JSONB => Self::logical(Kind::String, "io.debezium.data.Json"),
            text_oid::UUID => Self::logical(Kind::String, "io.debezium.data.Uuid"),
            text_oid::TEXT | text_oid::VARCHAR | text_oid::BPCHAR | text_oid::NAME => {
                Self::plain(Kind::String)
            }
            more_oid::DATE => Self::logical(Kind::Int32, "io.debezium.time.Date"),
            // time.precision.mode=adaptive, as ConnectValue::from_pg.
            more_oid::TIMESTAMP if (0..=3).contains(&type_modifier) => {
                Self::logical(Kind::Int64, "io.debezium.time.Timestamp")
            }
            more_oid::TIMESTAMP => Self::logical(Kind::Int64, "io.debezium.time.MicroTimestamp"),
            more_oid::TIMESTAMPTZ => Self::logical(Kind::String, "io.debezium.time.ZonedTimestamp"),
            more_oid::NUMERIC => numeric(type_modifier, decimals),
            other => {
                return Err(format!(
                    "its type (oid {other}) has a Debezium schema walrelay does not write; \
                     change the column to text, jsonb, bytea or a number, date or timestamp \
                     type, or use the json format (schemas.enable=false)"
                ))
            }
        };
        Ok(ConnectSchema { optional, ..schema })
    }

    /// The envelope struct of EventRouterDelegate.getSchemaBuilder: not
    /// optional, fields in the order given.
    pub fn envelope(fields: Vec<(String, ConnectSchema)>) -> Self {
        Self::plain(Kind::Struct(fields))
    }

    /// JsonConverter's text of the schema (asJsonSchema), named `name` when given.
    pub fn json(&self, name: Option<&str>) -> String {
        let mut out = String::new();
        self.write(&mut out, name, None);
        out
    }

    fn write(&self, out: &mut String, name: Option<&str>, field: Option<&str>) {
        let type_name = self.type_name();
        out.push_str("{\"type\":\"");
        out.push_str(type_name);
        out.push('"');
        if let Kind::Array(items) = &self.kind {
            out.push_str(",\"items\":");
            items.write(out, None, None);
        }
        if let Kind::Struct(fields) = &self.kind {
            out.push_str(",\"fields\":[");
            for (i, (field_name, schema)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                schema.write(out, None, Some(field_name));
            }
            out.push(']');
        }
        out.push_str(",\"optional\":");
        out.push_str(if self.optional { "true" } else { "false" });
        if let Some(name) = name.or(self.name.as_deref()) {
            out.push_str(",\"name\":");
            out.push_str(&json_string(name));
        }
        if let Some(version) = self.version {
            out.push_str(&format!(",\"version\":{version}"));
        }
        if let Some(doc) = self.doc {
            out.push_str(",\"doc\":");
            out.push_str(&json_string(doc));
        }
        if !self.parameters.is_empty() {
            out.push_str(",\"parameters\":{");
            for (i, (key, value)) in self.parameters.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&json_string(key));
                out.push(':');
                out.push_str(&json_string(value));
            }
            out.push('}');
        }
        // asJsonSchema: "default" last, convertToJson of the default value.
        if let Some(default) = &self.default {
            out.push_str(",\"default\":");
            out.push_str(default);
        }
        if let Some(field) = field {
            out.push_str(",\"field\":");
            out.push_str(&json_string(field));
        }
        out.push('}');
    }
}

/// SpecialValueDecimal.builder for a numeric(p, s) column, or
/// VariableScaleDecimal for an unconstrained one in precise mode.
fn numeric(type_modifier: i32, decimals: DecimalMode) -> ConnectSchema {
    match decimals {
        DecimalMode::String => ConnectSchema::plain(Kind::String),
        DecimalMode::Double => ConnectSchema::plain(Kind::Float64),
        // An unconstrained numeric has typmod -1: no declared scale.
        DecimalMode::Precise if type_modifier < 4 => ConnectSchema {
            doc: Some("Variable scaled decimal"),
            ..ConnectSchema::logical(
                Kind::Struct(vec![
                    ("scale".into(), ConnectSchema::plain(Kind::Int32)),
                    ("value".into(), ConnectSchema::plain(Kind::Bytes)),
                ]),
                "io.debezium.data.VariableScaleDecimal",
            )
        },
        DecimalMode::Precise => {
            // Postgres's make_numeric_typmod: ((p << 16) | (s & 0x7ff)) + 4,
            // the scale an 11-bit signed number (negative from PostgreSQL 15).
            let packed = type_modifier - 4;
            let precision = (packed >> 16) & 0xffff;
            let scale = ((packed & 0x7ff) ^ 0x400) - 0x400;
            ConnectSchema {
                parameters: vec![
                    ("scale", scale.to_string()),
                    ("connect.decimal.precision", precision.to_string()),
                ],
                ..ConnectSchema::logical(Kind::Bytes, "org.apache.kafka.connect.data.Decimal")
            }
        }
    }
}

/// The schema a payload carries: its column's, or the one
/// --expand-json-payload inferred, or none at all (a top-level `[]`).
#[derive(Debug, Clone, PartialEq)]
pub enum PayloadSchema {
    Column,
    Inferred(ConnectSchema),
    Null,
}

/// The schemas of one outbox table's records under json-with-schema, and
/// the documents that carry them; a side without a schema is written bare.
#[derive(Debug, Clone, Default)]
pub struct RecordSchemas {
    key: Option<String>,
    value: Option<String>,
    /// The envelope struct and the start of its name, `<prefix>.<schema>.<table>`.
    envelope: Option<(ConnectSchema, String)>,
}

impl RecordSchemas {
    /// `key` and `value` are the key and payload columns' schemas;
    /// `envelope` the envelope struct (instead of `value`) and its name's start.
    pub fn new(
        key: Option<ConnectSchema>,
        value: Option<ConnectSchema>,
        envelope: Option<(ConnectSchema, String)>,
    ) -> Self {
        RecordSchemas {
            key: key.map(|s| s.json(None)),
            value: value.map(|s| s.json(None)),
            envelope,
        }
    }

    /// The key's JSON, with its schema when it has one.
    pub fn key(&self, json: String) -> String {
        match &self.key {
            Some(schema) => with_schema(schema, &json),
            None => json,
        }
    }

    /// The payload's JSON (no envelope), with its schema when the value has one.
    pub fn value(&self, json: String, payload: &PayloadSchema) -> String {
        let Some(column) = &self.value else {
            return json;
        };
        match payload {
            PayloadSchema::Column => with_schema(column, &json),
            PayloadSchema::Inferred(schema) => with_schema(&schema.json(None), &json),
            // JsonConverter's envelope of a null schema (asJsonSchema(null)).
            PayloadSchema::Null => with_schema("null", &json),
        }
    }

    /// An envelope's JSON, with its schema named after the event's route-by
    /// value (getSchemaName's routedTopic is the field, not the topic) and
    /// the payload's schema as its first field's.
    pub fn envelope(
        &self,
        json: String,
        route_value: Option<&[u8]>,
        version: Option<i32>,
        payload: &PayloadSchema,
    ) -> String {
        let Some((schema, row)) = &self.envelope else {
            return json;
        };
        // getValueSchema(…, version, …): SchemaBuilder.version.
        let versioned;
        let schema = match version {
            Some(version) => {
                versioned = ConnectSchema {
                    version: Some(version),
                    ..schema.clone()
                };
                &versioned
            }
            None => schema,
        };
        // Java's string concatenation of a null route-by value.
        let route = route_value.map_or("null".into(), String::from_utf8_lossy);
        let name = envelope_name(row, &route);
        match (payload, &schema.kind) {
            (PayloadSchema::Inferred(inferred), Kind::Struct(fields)) => {
                let mut fields = fields.clone();
                if let Some((_, first)) = fields.first_mut() {
                    *first = inferred.clone();
                }
                let schema = ConnectSchema {
                    kind: Kind::Struct(fields),
                    ..schema.clone()
                };
                with_schema(&schema.json(Some(&name)), &json)
            }
            _ => with_schema(&schema.json(Some(&name)), &json),
        }
    }
}

/// EventRouterDelegate.getSchemaName: the row's value schema name
/// (TableSchemaBuilder: `<topic.prefix>.<schema>.<table>` then `.Value`)
/// with the route-by value put before its last part. `row` is the part
/// before `.Value`.
fn envelope_name(row: &str, route_value: &str) -> String {
    format!("{row}.{route_value}.Value")
}

/// JsonConverter's schemas.enable=true document: `{"schema":…,"payload":…}`.
fn with_schema(schema: &str, payload: &str) -> String {
    format!("{{\"schema\":{schema},\"payload\":{payload}}}")
}

use super::connect::json_string;

#[cfg(test)]
mod tests {
    use super::*;

    fn column(type_oid: u32, type_modifier: i32, optional: bool) -> String {
        ConnectSchema::of_column(type_oid, type_modifier, DecimalMode::Precise, optional)
            .unwrap()
            .json(None)
    }

    #[test]
    fn primitive_columns_write_type_then_optional() {
        // JsonSchema.STRING_SCHEMA is {"type":"string"}; asJsonSchema adds "optional".
        assert_eq!(column(25, -1, true), r#"{"type":"string","optional":true}"#);
        assert_eq!(
            column(25, -1, false),
            r#"{"type":"string","optional":false}"#
        );
        assert_eq!(column(17, -1, true), r#"{"type":"bytes","optional":true}"#);
        assert_eq!(
            column(16, -1, false),
            r#"{"type":"boolean","optional":false}"#
        );
        assert_eq!(column(21, -1, true), r#"{"type":"int16","optional":true}"#);
        assert_eq!(column(23, -1, true), r#"{"type":"int32","optional":true}"#);
        assert_eq!(column(20, -1, true), r#"{"type":"int64","optional":true}"#);
        assert_eq!(column(700, -1, true), r#"{"type":"float","optional":true}"#);
        assert_eq!(
            column(701, -1, true),
            r#"{"type":"double","optional":true}"#
        );
    }

    #[test]
    fn logical_types_add_name_and_version_after_optional() {
        assert_eq!(
            column(3802, -1, true),
            r#"{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1}"#
        );
        assert_eq!(
            column(114, -1, false),
            r#"{"type":"string","optional":false,"name":"io.debezium.data.Json","version":1}"#
        );
        assert_eq!(
            column(2950, -1, true),
            r#"{"type":"string","optional":true,"name":"io.debezium.data.Uuid","version":1}"#
        );
        assert_eq!(
            column(more_oid::DATE, -1, true),
            r#"{"type":"int32","optional":true,"name":"io.debezium.time.Date","version":1}"#
        );
        assert_eq!(
            column(more_oid::TIMESTAMP, -1, true),
            r#"{"type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp","version":1}"#
        );
        assert_eq!(
            column(more_oid::TIMESTAMP, 3, true),
            r#"{"type":"int64","optional":true,"name":"io.debezium.time.Timestamp","version":1}"#
        );
        assert_eq!(
            column(more_oid::TIMESTAMPTZ, -1, false),
            r#"{"type":"string","optional":false,"name":"io.debezium.time.ZonedTimestamp","version":1}"#
        );
    }

    #[test]
    fn decimals_carry_scale_then_precision_parameters() {
        // numeric(10, 2): typmod ((10 << 16) | 2) + 4.
        assert_eq!(
            column(more_oid::NUMERIC, (10 << 16 | 2) + 4, true),
            "{\"type\":\"bytes\",\"optional\":true,\"name\":\"org.apache.kafka.connect.data.Decimal\",\
             \"version\":1,\"parameters\":{\"scale\":\"2\",\"connect.decimal.precision\":\"10\"}}"
        );
        // A struct's "fields" come before "optional"; its fields are required.
        assert_eq!(
            column(more_oid::NUMERIC, -1, true),
            "{\"type\":\"struct\",\"fields\":[{\"type\":\"int32\",\"optional\":false,\"field\":\"scale\"},\
             {\"type\":\"bytes\",\"optional\":false,\"field\":\"value\"}],\"optional\":true,\
             \"name\":\"io.debezium.data.VariableScaleDecimal\",\"version\":1,\"doc\":\"Variable scaled decimal\"}"
        );
        let string = ConnectSchema::of_column(more_oid::NUMERIC, -1, DecimalMode::String, true);
        assert_eq!(
            string.unwrap().json(None),
            r#"{"type":"string","optional":true}"#
        );
    }

    #[test]
    fn an_envelope_is_a_required_named_struct_with_fields_in_order() {
        let envelope = ConnectSchema::envelope(vec![
            (
                "payload".into(),
                ConnectSchema::of_column(3802, -1, DecimalMode::Precise, true).unwrap(),
            ),
            (
                "n".into(),
                ConnectSchema::of_column(23, -1, DecimalMode::Precise, false).unwrap(),
            ),
        ]);
        let name = envelope_name("dbserver1.public.outbox", "order");
        assert_eq!(name, "dbserver1.public.outbox.order.Value");
        assert_eq!(
            envelope.json(Some(&name)),
            "{\"type\":\"struct\",\"fields\":[{\"type\":\"string\",\"optional\":true,\
             \"name\":\"io.debezium.data.Json\",\"version\":1,\"field\":\"payload\"},\
             {\"type\":\"int32\",\"optional\":false,\"field\":\"n\"}],\"optional\":false,\
             \"name\":\"dbserver1.public.outbox.order.Value\"}"
        );
        assert_eq!(with_schema("S", "null"), r#"{"schema":S,"payload":null}"#);
    }

    #[test]
    fn record_schemas_wrap_only_the_sides_that_have_one() {
        let string = ConnectSchema::of_column(25, -1, DecimalMode::Precise, false).unwrap();
        let schemas = RecordSchemas::new(Some(string), None, None);
        assert_eq!(
            schemas.key("\"k\"".into()),
            r#"{"schema":{"type":"string","optional":false},"payload":"k"}"#
        );
        assert_eq!(
            schemas.value("\"v\"".into(), &PayloadSchema::Column),
            "\"v\""
        );
        let envelope = ConnectSchema::envelope(vec![]);
        let schemas = RecordSchemas::new(None, None, Some((envelope, "p.public.outbox".into())));
        // Java concatenates a null route-by value as "null".
        assert_eq!(
            schemas.envelope("{}".into(), None, None, &PayloadSchema::Column),
            r#"{"schema":{"type":"struct","fields":[],"optional":false,"name":"p.public.outbox.null.Value"},"payload":{}}"#
        );
    }

    #[test]
    fn a_type_without_a_known_schema_is_refused_with_the_fix() {
        // interval (1186) is io.debezium.time.MicroDuration, which walrelay does not write.
        let err = ConnectSchema::of_column(1186, -1, DecimalMode::Precise, true).unwrap_err();
        assert!(err.contains("oid 1186"), "{err}");
        assert!(err.contains("schemas.enable=false"), "{err}");
    }
}
