//! A Kafka Connect schema read back from the text JsonConverter writes for
//! it (`outbox::schema`), with its parameters in their order: the one
//! description of a record both the JSON-with-schema and the registry
//! formats start from, so they cannot drift apart.
//!
//! The names follow apache/kafka connect/json/.../JsonSchema.java and
//! JsonConverter.asConnectSchema: "type", "optional", "name", "version",
//! "doc", "parameters", "default", "fields" (each with "field"), "items",
//! "keys" and "values".

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// JSON with objects kept in their written order (serde_json's own map
/// sorts them, and Connect's parameters keep insertion order).
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    fn str(&self, key: &str) -> Option<&str> {
        match self.get(key) {
            Some(Json::String(s)) => Some(s),
            _ => None,
        }
    }

    /// The compact JSON text of the value.
    pub fn text(&self) -> String {
        match self {
            Json::Null => "null".into(),
            Json::Bool(b) => b.to_string(),
            Json::Number(n) => n.to_string(),
            Json::String(s) => serde_json::Value::String(s.clone()).to_string(),
            Json::Array(items) => {
                let items: Vec<String> = items.iter().map(Json::text).collect();
                format!("[{}]", items.join(","))
            }
            Json::Object(entries) => {
                let entries: Vec<String> = entries
                    .iter()
                    .map(|(k, v)| format!("{}:{}", serde_json::Value::String(k.clone()), v.text()))
                    .collect();
                format!("{{{}}}", entries.join(","))
            }
        }
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Ordered;
        impl<'de> Visitor<'de> for Ordered {
            type Value = Json;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_unit<E>(self) -> Result<Json, E> {
                Ok(Json::Null)
            }
            fn visit_bool<E>(self, b: bool) -> Result<Json, E> {
                Ok(Json::Bool(b))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Json, E> {
                Ok(Json::Number(n.into()))
            }
            fn visit_u64<E>(self, n: u64) -> Result<Json, E> {
                Ok(Json::Number(n.into()))
            }
            fn visit_f64<E>(self, n: f64) -> Result<Json, E> {
                Ok(serde_json::Number::from_f64(n).map_or(Json::Null, Json::Number))
            }
            fn visit_str<E>(self, s: &str) -> Result<Json, E> {
                Ok(Json::String(s.to_string()))
            }
            fn visit_string<E>(self, s: String) -> Result<Json, E> {
                Ok(Json::String(s))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Json::Array(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
                let mut entries = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, Json>()? {
                    entries.push((key, value));
                }
                Ok(Json::Object(entries))
            }
        }
        deserializer.deserialize_any(Ordered)
    }
}

/// A Connect schema's type, with what a struct, array or map holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Int8,
    Int16,
    Int32,
    Int64,
    Float32,
    Float64,
    Boolean,
    String,
    Bytes,
    Array(Box<Connect>),
    Map(Box<Connect>, Box<Connect>),
    Struct(Vec<(String, Connect)>),
}

/// A Kafka Connect schema.
#[derive(Debug, Clone, PartialEq)]
pub struct Connect {
    pub kind: Kind,
    pub optional: bool,
    pub name: Option<String>,
    pub version: Option<i64>,
    pub doc: Option<String>,
    pub parameters: Vec<(String, String)>,
    /// The default value, as JsonConverter wrote it.
    pub default: Option<Json>,
}

impl Connect {
    /// The schema of JsonConverter's text; Err says what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let json: Json = serde_json::from_str(text).map_err(|e| e.to_string())?;
        Self::from_json(&json)
    }

    fn from_json(json: &Json) -> Result<Self, String> {
        let type_name = json
            .str("type")
            .ok_or_else(|| format!("a schema without a type: {}", json.text()))?;
        let child = |key: &str| -> Result<Box<Connect>, String> {
            let node = json
                .get(key)
                .ok_or_else(|| format!("a {type_name} schema without {key:?}"))?;
            Ok(Box::new(Self::from_json(node)?))
        };
        let kind = match type_name {
            "int8" => Kind::Int8,
            "int16" => Kind::Int16,
            "int32" => Kind::Int32,
            "int64" => Kind::Int64,
            "float" => Kind::Float32,
            "double" => Kind::Float64,
            "boolean" => Kind::Boolean,
            "string" => Kind::String,
            "bytes" => Kind::Bytes,
            "array" => Kind::Array(child("items")?),
            "map" => Kind::Map(child("keys")?, child("values")?),
            "struct" => {
                let Some(Json::Array(fields)) = json.get("fields") else {
                    return Err("a struct schema without \"fields\"".into());
                };
                let mut out = Vec::with_capacity(fields.len());
                for field in fields {
                    let name = field
                        .str("field")
                        .ok_or("a struct field without a name")?
                        .to_string();
                    out.push((name, Self::from_json(field)?));
                }
                Kind::Struct(out)
            }
            other => return Err(format!("an unknown schema type {other:?}")),
        };
        let parameters = match json.get("parameters") {
            Some(Json::Object(entries)) => entries
                .iter()
                .map(|(k, v)| match v {
                    Json::String(s) => (k.clone(), s.clone()),
                    other => (k.clone(), other.text()),
                })
                .collect(),
            _ => Vec::new(),
        };
        let version = match json.get("version") {
            Some(Json::Number(n)) => n.as_i64(),
            _ => None,
        };
        Ok(Connect {
            kind,
            optional: json.get("optional") == Some(&Json::Bool(true)),
            name: json.str("name").map(str::to_string),
            version,
            doc: json.str("doc").map(str::to_string),
            parameters,
            default: json.get("default").cloned(),
        })
    }

    pub fn parameter(&self, key: &str) -> Option<&str> {
        self.parameters
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Where in a value a field is, for an error: "the value" or "the field
/// \"a.b\"" (`at` is the path the encoders build, ".a.b").
pub fn place(at: &str) -> String {
    if at.is_empty() {
        "the value".into()
    } else {
        format!("the field {:?}", at.trim_start_matches('.'))
    }
}

/// A JSON number, or the strings Jackson writes for non-finite ones.
pub fn float(value: &serde_json::Value) -> Option<f64> {
    match value {
        serde_json::Value::Number(n) => n.as_f64(),
        serde_json::Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

/// A value that does not fit its schema. The path to it is gathered as the
/// error returns, innermost part first, so that a value that fits (every
/// event but a poison one) builds no path at all.
pub struct Misfit {
    parts: Vec<String>,
    why: String,
}

impl Misfit {
    pub fn new(why: String) -> Self {
        Misfit {
            parts: Vec::new(),
            why,
        }
    }

    pub fn within(mut self, part: String) -> Self {
        self.parts.push(part);
        self
    }

    pub fn message(self) -> String {
        let at: String = self.parts.iter().rev().map(String::as_str).collect();
        format!("{} {}", place(&at), self.why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decimal_schema_keeps_its_parameters_in_their_order() {
        // outbox::schema's text for numeric(10, 2), as JsonConverter writes it.
        let schema = Connect::parse(
            "{\"type\":\"bytes\",\"optional\":true,\"name\":\"org.apache.kafka.connect.data.Decimal\",\
             \"version\":1,\"parameters\":{\"scale\":\"2\",\"connect.decimal.precision\":\"10\"}}",
        )
        .unwrap();
        assert_eq!(schema.kind, Kind::Bytes);
        assert!(schema.optional);
        assert_eq!(schema.version, Some(1));
        let keys: Vec<&str> = schema.parameters.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["scale", "connect.decimal.precision"]);
    }

    #[test]
    fn a_struct_schema_keeps_its_fields_in_order() {
        let schema = Connect::parse(
            r#"{"type":"struct","fields":[{"type":"string","optional":false,"field":"b"},{"type":"int64","optional":true,"field":"a"}],"optional":false,"name":"x.y"}"#,
        )
        .unwrap();
        let Kind::Struct(fields) = &schema.kind else {
            panic!("{schema:?}")
        };
        assert_eq!(fields[0].0, "b");
        assert_eq!(fields[1].1.kind, Kind::Int64);
        assert!(Connect::parse(r#"{"type":"uuid"}"#).is_err());
    }
}
