//! A Connect schema as Confluent's `JsonSchemaData.fromConnectSchema` turns
//! it into JSON Schema (`--key-format`/`--value-format json-schema`), and a
//! Connect value (JsonConverter's payload) as `JsonSchemaData.fromConnectData`
//! writes it, for the Confluent wire format's JSON body.
//!
//! Source: confluentinc/schema-registry json-schema-converter/.../
//! JsonSchemaData.java (`rawSchemaFromConnectSchema`, `fromConnectData`)
//! and JsonSchemaDataConfig.java, with their defaults
//! (object.additional.properties=true, decimal.format=BASE64,
//! generalized sum types off):
//! - int8..int64 are `{"type":"integer"}`, float32/float64
//!   `{"type":"number"}`, each with its `connect.type`; bytes, a Decimal
//!   among them, are a string with `connect.type: bytes` (decimal.format
//!   BASE64: JsonSchemaDataTest.testFromConnectBase64Decimal);
//! - a struct is an object with its fields as `properties`, each carrying
//!   `connect.index` (its position);
//! - an optional schema is `{"oneOf":[{"type":"null"}, <schema>]}` with the
//!   `connect.index` on the `oneOf`;
//! - a schema's name is its `title`, its doc its `description`, its version
//!   `connect.version`, its parameters `connect.parameters`;
//! - a map with string keys is an object of `additionalProperties`; any
//!   other map an array of `{"key":…,"value":…}` objects.
//!
//! The value: JsonConverter's payload and fromConnectData's JSON agree but
//! for maps whose keys are not strings (JsonConverter writes `[key, value]`
//! pairs, JsonSchemaData `{"key","value"}` objects). A Decimal stays Base64,
//! as decimal.format=BASE64 writes it.
//!
//! The schema text: serde_json writes object keys sorted, which is the order
//! Confluent's `JsonSchema.normalize()` gives (objectMapperWithOrderedProps);
//! everit's own `toString` order is not reproduced, so a subject Confluent's
//! converter registered may get one more version, equal in meaning.

use serde_json::{json, Map, Value};

use super::connect_schema::{Connect, Json, Kind, Misfit};

/// JsonSchemaData.NAMESPACE: parameters under it are the converter's own
/// and are not written as `connect.parameters`.
const NAMESPACE: &str = "io.confluent.connect.json";

/// The JSON Schema's text (what is registered, schemaType JSON).
pub fn schema_text(schema: &Connect) -> String {
    to_json_schema(schema, None).to_string()
}

/// The name RecordNameStrategy gives the subject: JsonSchema.name(), the
/// schema's `title`, which is the Connect schema's name.
pub fn record_name(schema: &Connect) -> Option<String> {
    schema.name.clone()
}

/// Whether the payload's JSON must be rewritten (a map whose keys are not
/// plain strings); otherwise the payload's text is written as it came.
pub fn needs_rewrite(schema: &Connect) -> bool {
    match &schema.kind {
        // JsonConverter writes such a map as [[k, v], ...]; JSON Schema
        // wants [{"key": k, "value": v}, ...].
        Kind::Map(keys, values) => {
            keys.kind != Kind::String || keys.optional || needs_rewrite(values)
        }
        Kind::Array(items) => needs_rewrite(items),
        Kind::Struct(fields) => fields.iter().any(|(_, f)| needs_rewrite(f)),
        _ => false,
    }
}

fn to_json_schema(schema: &Connect, index: Option<usize>) -> Value {
    let mut out = Map::new();
    let mut connect_type = None;
    match &schema.kind {
        Kind::Struct(fields) => {
            if schema.optional {
                // The struct branch: null or the struct made required; the
                // title and the rest go on the struct.
                let required = Connect {
                    optional: false,
                    ..schema.clone()
                };
                let mut one_of = Map::new();
                one_of.insert(
                    "oneOf".into(),
                    json!([{"type": "null"}, to_json_schema(&required, None)]),
                );
                if let Some(i) = index {
                    one_of.insert("connect.index".into(), json!(i));
                }
                return Value::Object(one_of);
            }
            let properties: Map<String, Value> = fields
                .iter()
                .enumerate()
                .map(|(i, (name, field))| (name.clone(), to_json_schema(field, Some(i))))
                .collect();
            out.insert("type".into(), json!("object"));
            out.insert("properties".into(), Value::Object(properties));
        }
        Kind::Int8 | Kind::Int16 | Kind::Int32 | Kind::Int64 => {
            out.insert("type".into(), json!("integer"));
            connect_type = Some(match schema.kind {
                Kind::Int8 => "int8",
                Kind::Int16 => "int16",
                Kind::Int32 => "int32",
                _ => "int64",
            });
        }
        Kind::Float32 => {
            out.insert("type".into(), json!("number"));
            connect_type = Some("float32");
        }
        Kind::Float64 => {
            out.insert("type".into(), json!("number"));
            connect_type = Some("float64");
        }
        Kind::Boolean => {
            out.insert("type".into(), json!("boolean"));
        }
        Kind::String => {
            out.insert("type".into(), json!("string"));
        }
        Kind::Bytes => {
            // A Decimal too: with decimal.format=BASE64 its value is text.
            out.insert("type".into(), json!("string"));
            connect_type = Some("bytes");
        }
        Kind::Array(items) => {
            out.insert("type".into(), json!("array"));
            out.insert("items".into(), to_json_schema(items, None));
        }
        Kind::Map(keys, values) => {
            if keys.kind == Kind::String && !keys.optional {
                out.insert("type".into(), json!("object"));
                out.insert("additionalProperties".into(), to_json_schema(values, None));
            } else {
                let entry = json!({
                    "type": "object",
                    "properties": {
                        "key": to_json_schema(keys, Some(0)),
                        "value": to_json_schema(values, Some(1)),
                    }
                });
                out.insert("type".into(), json!("array"));
                out.insert("items".into(), entry);
            }
            connect_type = Some("map");
        }
    }
    if let Some(t) = connect_type {
        out.insert("connect.type".into(), json!(t));
    }
    describe(schema, &mut out);
    if schema.optional {
        let mut one_of = Map::new();
        one_of.insert(
            "oneOf".into(),
            json!([{"type": "null"}, Value::Object(out)]),
        );
        if let Some(i) = index {
            one_of.insert("connect.index".into(), json!(i));
        }
        return Value::Object(one_of);
    }
    if let Some(i) = index {
        out.insert("connect.index".into(), json!(i));
    }
    Value::Object(out)
}

/// The name, version, doc, parameters and default of a schema that is no
/// `oneOf`, where JsonSchemaData writes them.
fn describe(schema: &Connect, out: &mut Map<String, Value>) {
    if let Some(name) = &schema.name {
        out.insert("title".into(), json!(name));
    }
    if let Some(version) = schema.version {
        out.insert("connect.version".into(), json!(version));
    }
    if let Some(doc) = &schema.doc {
        out.insert("description".into(), json!(doc));
    }
    let parameters: Map<String, Value> = schema
        .parameters
        .iter()
        .filter(|(k, _)| !k.starts_with(NAMESPACE))
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    if !parameters.is_empty() {
        out.insert("connect.parameters".into(), Value::Object(parameters));
    }
    if let Some(default) = &schema.default {
        out.insert("default".into(), plain(default));
    }
}

fn plain(json: &Json) -> Value {
    match json {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => Value::Number(n.clone()),
        Json::String(s) => Value::String(s.clone()),
        Json::Array(items) => Value::Array(items.iter().map(plain).collect()),
        Json::Object(entries) => {
            Value::Object(entries.iter().map(|(k, v)| (k.clone(), plain(v))).collect())
        }
    }
}

/// The value as fromConnectData writes it, checked against the schema:
/// None when the payload's own text may be written as it is.
pub fn value(schema: &Connect, payload: &Value) -> Result<Option<Value>, String> {
    let rewrite = needs_rewrite(schema);
    let out = conform(schema, payload, rewrite).map_err(Misfit::message)?;
    Ok(rewrite.then_some(out))
}

/// Checks `value` against `schema`; with `rewrite`, returns it with maps
/// of non-string keys as `{"key","value"}` objects (Null otherwise).
fn conform(schema: &Connect, value: &Value, rewrite: bool) -> Result<Value, Misfit> {
    if value.is_null() {
        if schema.optional {
            return Ok(Value::Null);
        }
        return Err(Misfit::new("is null but its schema is not optional".into()));
    }
    let wrong = |what: &str| Misfit::new(format!("is not {what}: {value}"));
    let keep = || if rewrite { value.clone() } else { Value::Null };
    match &schema.kind {
        Kind::Int8 | Kind::Int16 | Kind::Int32 | Kind::Int64 => {
            if !(value.is_i64() || value.is_u64()) {
                return Err(wrong("an integer"));
            }
            Ok(keep())
        }
        Kind::Float32 | Kind::Float64 => match value {
            Value::Number(_) => Ok(keep()),
            Value::String(s) if ["NaN", "Infinity", "-Infinity"].contains(&s.as_str()) => {
                Ok(keep())
            }
            _ => Err(wrong("a number")),
        },
        Kind::Boolean => value
            .as_bool()
            .map(|_| keep())
            .ok_or_else(|| wrong("a boolean")),
        // Bytes (a Decimal too, decimal.format=BASE64) are Base64 text.
        Kind::String | Kind::Bytes => value.as_str().map(|_| keep()).ok_or_else(|| {
            wrong(if schema.kind == Kind::String {
                "a string"
            } else {
                "Base64 bytes"
            })
        }),
        Kind::Array(items) => {
            let list = value.as_array().ok_or_else(|| wrong("an array"))?;
            let mut out = Vec::new();
            for (i, item) in list.iter().enumerate() {
                let item = conform(items, item, rewrite).map_err(|m| m.within(format!("[{i}]")))?;
                if rewrite {
                    out.push(item);
                }
            }
            Ok(kept(rewrite, Value::Array(out)))
        }
        Kind::Map(keys, values) if keys.kind == Kind::String && !keys.optional => {
            let map = value.as_object().ok_or_else(|| wrong("an object"))?;
            let mut out = Map::new();
            for (key, item) in map {
                let item =
                    conform(values, item, rewrite).map_err(|m| m.within(format!(".{key}")))?;
                if rewrite {
                    out.insert(key.clone(), item);
                }
            }
            Ok(kept(rewrite, Value::Object(out)))
        }
        Kind::Map(keys, values) => {
            // JsonConverter writes such a map as [key, value] pairs.
            let pairs = value
                .as_array()
                .ok_or_else(|| wrong("an array of [key, value] pairs"))?;
            let mut out = Vec::new();
            for (i, pair) in pairs.iter().enumerate() {
                let [key, item] = pair.as_array().map(Vec::as_slice).unwrap_or_default() else {
                    return Err(wrong("an array of [key, value] pairs"));
                };
                let key = conform(keys, key, true).map_err(|m| m.within(format!("[{i}].key")))?;
                let item =
                    conform(values, item, true).map_err(|m| m.within(format!("[{i}].value")))?;
                out.push(json!({"key": key, "value": item}));
            }
            Ok(Value::Array(out))
        }
        Kind::Struct(fields) => {
            let object = value.as_object().ok_or_else(|| wrong("an object"))?;
            let mut out = Map::new();
            for (name, field) in fields {
                let item = object.get(name).unwrap_or(&Value::Null);
                let item =
                    conform(field, item, rewrite).map_err(|m| m.within(format!(".{name}")))?;
                if rewrite {
                    out.insert(name.clone(), item);
                }
            }
            Ok(kept(rewrite, Value::Object(out)))
        }
    }
}

#[cfg(test)]
mod tests;

/// The rebuilt value when rewriting, else Null (the text is written as is).
fn kept(rewrite: bool, rebuilt: Value) -> Value {
    if rewrite {
        rebuilt
    } else {
        Value::Null
    }
}
