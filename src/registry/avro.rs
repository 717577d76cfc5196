//! A Connect schema as Confluent's `AvroData.fromConnectSchema` turns it
//! into Avro, written as Avro's `Schema.toString` writes it, and a Connect
//! value (JsonConverter's payload) in Avro's binary encoding.
//!
//! Sources: confluentinc/schema-registry avro-data/.../AvroData.java
//! (`fromConnectSchema`, `addAvroRecordField`, `maybeMakeOptional`,
//! `getNameOrDefault`, `defaultValueFromConnect`) with its defaults
//! (connect.meta.data=true, enhanced.avro.schema.support=false,
//! scrub.invalid.names=false); apache/avro lang/java/.../Schema.java
//! (`toJson`: "type", "name", "namespace" only where it differs from the
//! enclosing one, "doc", "fields", then the properties in insertion order;
//! a named type already written is referred to by name); the Avro 1.11
//! specification, "Binary Encoding" (zig-zag varints, length-prefixed
//! strings and bytes, little-endian floats, union branch index, blocks for
//! arrays and maps).

use std::collections::HashSet;

use base64::Engine;
use serde_json::Value;

mod canonical;

use super::connect_schema::{float, place, Connect, Json, Kind};
use super::names::{adjust, NameAdjustment};

pub use canonical::canonical;

/// AvroData.NAMESPACE and DEFAULT_SCHEMA_NAME: an unnamed struct's record.
const DEFAULT_NAMESPACE: &str = "io.confluent.connect.avro";
const DEFAULT_NAME: &str = "ConnectDefault";
const DECIMAL: &str = "org.apache.kafka.connect.data.Decimal";
/// CONNECT_AVRO_DECIMAL_PRECISION_DEFAULT, for a Decimal without a precision.
const DEFAULT_PRECISION: i64 = 64;

/// The Avro schema's text (what is registered) for a Connect schema.
pub fn schema_text(schema: &Connect, names: NameAdjustment) -> Result<String, String> {
    let mut writer = Writer {
        out: String::new(),
        defined: Vec::new(),
        full_names: HashSet::new(),
        space: None,
        unnamed: 0,
        names,
    };
    writer.schema(schema, false)?;
    Ok(writer.out)
}

/// The record's full name of a struct schema, as RecordNameStrategy names
/// its subject; None for a schema that is no record.
pub fn record_name(schema: &Connect, names: NameAdjustment) -> Result<Option<String>, String> {
    match (&schema.kind, &schema.name) {
        (Kind::Struct(_), Some(name)) => adjust(name, names).map(Some),
        (Kind::Struct(_), None) => Ok(Some(format!("{DEFAULT_NAMESPACE}.{DEFAULT_NAME}"))),
        _ => Ok(None),
    }
}

struct Writer {
    out: String,
    /// Structs already written as records, and their full names: a second
    /// use is a reference (AvroData's schemaMap, Avro's Names).
    defined: Vec<(Connect, String)>,
    full_names: HashSet<String>,
    /// The enclosing namespace (Avro's Names.space()).
    space: Option<String>,
    /// Unnamed structs so far (FromConnectContext.incrementAndGetNameIndex).
    unnamed: u32,
    names: NameAdjustment,
}

impl Writer {
    fn schema(&mut self, schema: &Connect, ignore_optional: bool) -> Result<(), String> {
        if let Kind::Struct(_) = schema.kind {
            // An optional struct is a union of null and the required record,
            // whatever its default (the STRUCT branch of fromConnectSchema).
            if schema.optional && !ignore_optional {
                self.out.push_str("[\"null\",");
                self.record(schema)?;
                self.out.push(']');
                return Ok(());
            }
            return self.record(schema);
        }
        // maybeMakeOptional: null first, unless a default must come first.
        let optional = schema.optional && !ignore_optional;
        let null_last = schema.default.is_some();
        if optional && !null_last {
            self.out.push_str("[\"null\",");
        } else if optional {
            self.out.push('[');
        }
        self.plain(schema)?;
        if optional && null_last {
            self.out.push_str(",\"null\"]");
        } else if optional {
            self.out.push(']');
        }
        Ok(())
    }

    /// A schema that is not a record: its type, with properties when it has any.
    fn plain(&mut self, schema: &Connect) -> Result<(), String> {
        let mut props: Vec<(String, String)> = Vec::new();
        let type_name = match &schema.kind {
            Kind::Int8 | Kind::Int16 | Kind::Int32 => "int",
            Kind::Int64 => "long",
            Kind::Float32 => "float",
            Kind::Float64 => "double",
            Kind::Boolean => "boolean",
            Kind::String => "string",
            Kind::Bytes => "bytes",
            Kind::Array(_) => "array",
            Kind::Map(key, _) if key.kind == Kind::String && !key.optional => "map",
            Kind::Map(..) => {
                return Err(
                    "a map whose keys are not required strings has no Avro schema \
                            walrelay writes"
                        .into(),
                )
            }
            Kind::Struct(_) => unreachable!("records are written by `record`"),
        };
        let decimal = schema
            .name
            .as_deref()
            .is_some_and(|n| n.eq_ignore_ascii_case(DECIMAL));
        if decimal && schema.kind == Kind::Bytes {
            let scale = schema.parameter("scale").unwrap_or("0");
            let precision = schema
                .parameter("connect.decimal.precision")
                .map_or(DEFAULT_PRECISION.to_string(), str::to_string);
            props.push(("scale".into(), scale.to_string()));
            props.push(("precision".into(), precision));
        }
        self.meta(schema, &mut props);
        if let Some(logical) = logical_type(schema) {
            props.push(("logicalType".into(), json_str(logical)));
        }
        let nested = match &schema.kind {
            Kind::Array(items) => Some(("items", items.as_ref())),
            Kind::Map(_, values) => Some(("values", values.as_ref())),
            _ => None,
        };
        if props.is_empty() && nested.is_none() {
            self.out.push_str(&json_str(type_name));
            return Ok(());
        }
        self.out.push_str("{\"type\":");
        self.out.push_str(&json_str(type_name));
        if let Some((key, inner)) = nested {
            self.out.push_str(&format!(",{}:", json_str(key)));
            self.schema(inner, false)?;
        }
        write_props(&mut self.out, &props);
        self.out.push('}');
        Ok(())
    }

    /// The connect.* properties, in fromConnectSchema's order (values as JSON).
    fn meta(&self, schema: &Connect, props: &mut Vec<(String, String)>) {
        if let Some(doc) = &schema.doc {
            props.push(("connect.doc".into(), json_str(doc)));
        }
        if let Some(version) = schema.version {
            props.push(("connect.version".into(), version.to_string()));
        }
        if !schema.parameters.is_empty() {
            let params = Json::Object(
                schema
                    .parameters
                    .iter()
                    .map(|(k, v)| (k.clone(), Json::String(v.clone())))
                    .collect(),
            );
            props.push(("connect.parameters".into(), params.text()));
        }
        if let Some(default) = &schema.default {
            props.push(("connect.default".into(), default_value(schema, default)));
        }
        if let Some(name) = &schema.name {
            props.push(("connect.name".into(), json_str(name)));
        }
        match schema.kind {
            Kind::Int8 => props.push(("connect.type".into(), json_str("int8"))),
            Kind::Int16 => props.push(("connect.type".into(), json_str("int16"))),
            _ => {}
        }
    }

    fn record(&mut self, schema: &Connect) -> Result<(), String> {
        let required = Connect {
            optional: false,
            ..schema.clone()
        };
        if let Some((_, full)) = self.defined.iter().find(|(s, _)| *s == required) {
            let (space, name) = split_name(full);
            let reference = if space.as_deref() == self.space.as_deref() {
                name.to_string()
            } else {
                full.clone()
            };
            self.out.push_str(&json_str(&reference));
            return Ok(());
        }
        let full = match &schema.name {
            Some(name) => adjust(name, self.names)?,
            None => {
                self.unnamed += 1;
                match self.unnamed {
                    1 => format!("{DEFAULT_NAMESPACE}.{DEFAULT_NAME}"),
                    n => format!("{DEFAULT_NAMESPACE}.{DEFAULT_NAME}{n}"),
                }
            }
        };
        if !self.full_names.insert(full.clone()) {
            return Err(format!(
                "two different structs are both named {full:?}, which one Avro schema cannot hold"
            ));
        }
        self.defined.push((required, full.clone()));
        let (space, name) = split_name(&full);
        self.out.push_str("{\"type\":\"record\",\"name\":");
        self.out.push_str(&json_str(name));
        match (&space, &self.space) {
            (Some(space), enclosing) if Some(space) != enclosing.as_ref() => {
                self.out
                    .push_str(&format!(",\"namespace\":{}", json_str(space)));
            }
            (None, Some(_)) => self.out.push_str(",\"namespace\":\"\""),
            _ => {}
        }
        let saved = std::mem::replace(&mut self.space, space);
        self.out.push_str(",\"fields\":[");
        let Kind::Struct(fields) = &schema.kind else {
            unreachable!("a record is a struct")
        };
        for (i, (field_name, field)) in fields.iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            let field_name = adjust_field(field_name, self.names)?;
            self.out.push_str("{\"name\":");
            self.out.push_str(&json_str(&field_name));
            self.out.push_str(",\"type\":");
            self.schema(field, false)?;
            // addAvroRecordField: the field's default, else null when optional.
            match &field.default {
                Some(default) => {
                    self.out.push_str(",\"default\":");
                    self.out.push_str(&default_value(field, default));
                }
                None if field.optional => self.out.push_str(",\"default\":null"),
                None => {}
            }
            self.out.push('}');
        }
        self.out.push(']');
        self.space = saved;
        let mut props = Vec::new();
        self.meta(schema, &mut props);
        write_props(&mut self.out, &props);
        self.out.push('}');
        Ok(())
    }
}

/// A field's name: an Avro name, which holds no namespace's dots.
fn adjust_field(name: &str, names: NameAdjustment) -> Result<String, String> {
    match names {
        NameAdjustment::Avro => Ok(adjust(name, names)?.replace('.', "_")),
        NameAdjustment::None if name.contains('.') => Err(format!(
            "the field name {name:?} holds a '.', which Avro refuses; set \
             --schema-name-adjustment-mode avro or rename it"
        )),
        NameAdjustment::None => adjust(name, names),
    }
}

/// The Avro logical type fromConnectSchema adds for Connect's own logical
/// types (Debezium's io.debezium.* names are not among them).
fn logical_type(schema: &Connect) -> Option<&'static str> {
    let name = schema.name.as_deref()?;
    let is = |n: &str| name.eq_ignore_ascii_case(n);
    if is(DECIMAL) && schema.kind == Kind::Bytes {
        let precision: i64 = schema
            .parameter("connect.decimal.precision")
            .and_then(|p| p.parse().ok())
            .unwrap_or(DEFAULT_PRECISION);
        let scale: i64 = schema
            .parameter("scale")
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        // A scale outside 0..=precision keeps the legacy property only when
        // connect.decimal.precision is set; either way the text says decimal.
        let native = (0..=precision).contains(&scale);
        (native || schema.parameter("connect.decimal.precision").is_some()).then_some("decimal")
    } else if is("org.apache.kafka.connect.data.Time") {
        Some("time-millis")
    } else if is("org.apache.kafka.connect.data.Timestamp") {
        Some("timestamp-millis")
    } else if is("org.apache.kafka.connect.data.Date") {
        Some("date")
    } else {
        None
    }
}

/// defaultValueFromConnect: JSON as it is, bytes as Avro's ISO-8859-1 string.
fn default_value(schema: &Connect, default: &Json) -> String {
    match (&schema.kind, default) {
        (Kind::Bytes, Json::String(b64)) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap_or_default();
            let latin1: String = bytes.iter().map(|&b| char::from(b)).collect();
            json_str(&latin1)
        }
        _ => default.text(),
    }
}

fn write_props(out: &mut String, props: &[(String, String)]) {
    for (key, value) in props {
        out.push(',');
        out.push_str(&json_str(key));
        out.push(':');
        out.push_str(value);
    }
}

/// AvroData.splitName: the namespace before the last '.', the name after it.
fn split_name(full: &str) -> (Option<String>, &str) {
    match full.rsplit_once('.') {
        Some((space, name)) => (Some(space.to_string()), name),
        None => (None, full),
    }
}

fn json_str(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// The Avro binary encoding of `value` (JsonConverter's payload JSON) under
/// `schema`, appended to `out`.
pub fn encode(schema: &Connect, value: &Value, out: &mut Vec<u8>) -> Result<(), String> {
    encode_at(schema, value, out, "")
}

fn encode_at(schema: &Connect, value: &Value, out: &mut Vec<u8>, at: &str) -> Result<(), String> {
    if schema.optional {
        // The union's branches, as `Writer::schema` ordered them.
        let null_last = schema.default.is_some() && !matches!(schema.kind, Kind::Struct(_));
        let (null_branch, value_branch) = if null_last { (1, 0) } else { (0, 1) };
        if value.is_null() {
            put_long(out, null_branch);
            return Ok(());
        }
        put_long(out, value_branch);
    } else if value.is_null() {
        return Err(format!(
            "{} is null but its schema is not optional",
            place(at)
        ));
    }
    let wrong = |what: &str| format!("{} is not {what}: {value}", place(at));
    match &schema.kind {
        Kind::Int8 | Kind::Int16 | Kind::Int32 => {
            let n = value.as_i64().ok_or_else(|| wrong("an integer"))?;
            let n = i32::try_from(n).map_err(|_| wrong("a 32-bit integer"))?;
            put_long(out, i64::from(n));
        }
        Kind::Int64 => put_long(out, value.as_i64().ok_or_else(|| wrong("an integer"))?),
        Kind::Float32 => {
            let f = float(value).ok_or_else(|| wrong("a number"))?;
            out.extend_from_slice(&(f as f32).to_le_bytes());
        }
        Kind::Float64 => {
            let f = float(value).ok_or_else(|| wrong("a number"))?;
            out.extend_from_slice(&f.to_le_bytes());
        }
        Kind::Boolean => out.push(u8::from(value.as_bool().ok_or_else(|| wrong("a boolean"))?)),
        Kind::String => put_bytes(
            out,
            value.as_str().ok_or_else(|| wrong("a string"))?.as_bytes(),
        ),
        Kind::Bytes => {
            // JsonConverter writes bytes (and a Decimal's unscaled
            // two's-complement bytes, which Avro's decimal holds too) in Base64.
            let text = value.as_str().ok_or_else(|| wrong("Base64 bytes"))?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|_| wrong("Base64 bytes"))?;
            put_bytes(out, &bytes);
        }
        Kind::Array(items) => {
            let list = value.as_array().ok_or_else(|| wrong("an array"))?;
            if !list.is_empty() {
                put_long(out, list.len() as i64);
                for (i, item) in list.iter().enumerate() {
                    encode_at(items, item, out, &format!("{at}[{i}]"))?;
                }
            }
            put_long(out, 0);
        }
        Kind::Map(_, values) => {
            let map = value.as_object().ok_or_else(|| wrong("an object"))?;
            if !map.is_empty() {
                put_long(out, map.len() as i64);
                for (key, item) in map {
                    put_bytes(out, key.as_bytes());
                    encode_at(values, item, out, &format!("{at}.{key}"))?;
                }
            }
            put_long(out, 0);
        }
        Kind::Struct(fields) => {
            let object = value.as_object().ok_or_else(|| wrong("an object"))?;
            for (name, field) in fields {
                let item = object.get(name).unwrap_or(&Value::Null);
                encode_at(field, item, out, &format!("{at}.{name}"))?;
            }
        }
    }
    Ok(())
}

/// A long (and an int, which encodes the same) as a zig-zag varint.
fn put_long(out: &mut Vec<u8>, n: i64) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_long(out, bytes.len() as i64);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests;
