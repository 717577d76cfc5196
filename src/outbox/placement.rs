//! Debezium's `table.fields.additional.placement`: extra outbox columns
//! copied into a header, into an envelope around the payload, or used as the
//! partition number. Values keep their column's type in the envelope.

use std::str::FromStr;

use bytes::Bytes;
use serde_json::{Map, Value};

/// Postgres type OIDs walrelay treats specially.
pub mod oid {
    pub const BOOL: u32 = 16;
    pub const BYTEA: u32 = 17;
    pub const INT8: u32 = 20;
    pub const INT2: u32 = 21;
    pub const INT4: u32 = 23;
    pub const JSON: u32 = 114;
    pub const FLOAT4: u32 = 700;
    pub const FLOAT8: u32 = 701;
    pub const JSONB: u32 = 3802;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Header(String),
    Envelope(String),
    Partition,
}

/// One `column:header[:alias]`, `column:envelope[:alias]` or `column:partition`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub column: String,
    pub target: Target,
}

impl FromStr for Placement {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split(':').collect();
        let column = parts.first().filter(|c| !c.is_empty()).ok_or_else(|| {
            format!("{s:?}: expected column:header[:alias], column:envelope[:alias] or column:partition")
        })?;
        let alias = |i: usize| parts.get(i).map_or(column.to_string(), |a| a.to_string());
        let target = match (parts.get(1).copied(), parts.len()) {
            (Some("header"), 2 | 3) => Target::Header(alias(2)),
            (Some("envelope"), 2 | 3) => Target::Envelope(alias(2)),
            (Some("partition"), 2) => Target::Partition,
            _ => {
                return Err(format!(
                    "{s:?}: expected column:header[:alias], column:envelope[:alias] or column:partition"
                ))
            }
        };
        Ok(Placement {
            column: column.to_string(),
            target,
        })
    }
}

/// A column value as JSON, by its Postgres type: numbers and booleans stay
/// typed, json and jsonb are embedded, everything else is a string.
pub fn to_json(value: Option<&Bytes>, type_oid: u32, embed_text_as_json: bool) -> Value {
    let Some(bytes) = value else {
        return Value::Null;
    };
    let text = String::from_utf8_lossy(bytes);
    let parsed = match type_oid {
        oid::INT2 | oid::INT4 | oid::INT8 => text.parse::<i64>().ok().map(Value::from),
        oid::FLOAT4 | oid::FLOAT8 => text.parse::<f64>().ok().map(Value::from),
        oid::BOOL => Some(Value::Bool(text == "t")),
        oid::JSON | oid::JSONB => serde_json::from_slice(bytes).ok(),
        _ if embed_text_as_json => serde_json::from_slice(bytes).ok(),
        _ => None,
    };
    parsed.unwrap_or_else(|| Value::String(text.into_owned()))
}

/// `{"payload": …, alias: …}`, Debezium's value when any column goes to the envelope.
pub fn envelope(payload: Value, fields: Vec<(String, Value)>) -> Bytes {
    let mut map = Map::with_capacity(fields.len() + 1);
    map.insert("payload".into(), payload);
    for (alias, value) in fields {
        map.insert(alias, value);
    }
    Bytes::from(serde_json::to_vec(&Value::Object(map)).expect("JSON serialises"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placements_parse_as_debezium_writes_them() {
        let p: Placement = "event_type:header:eventType".parse().unwrap();
        assert_eq!(p.target, Target::Header("eventType".into()));
        let p: Placement = "aggregate_type:envelope".parse().unwrap();
        assert_eq!(p.target, Target::Envelope("aggregate_type".into()));
        let p: Placement = "shard:partition".parse().unwrap();
        assert_eq!((p.column.as_str(), p.target), ("shard", Target::Partition));
        assert!("shard:partition:x".parse::<Placement>().is_err());
        assert!("x:somewhere".parse::<Placement>().is_err());
    }

    #[test]
    fn values_keep_their_type_in_json() {
        let b = |s: &str| Bytes::copy_from_slice(s.as_bytes());
        assert_eq!(to_json(Some(&b("42")), oid::INT4, false), Value::from(42));
        assert_eq!(to_json(Some(&b("t")), oid::BOOL, false), Value::Bool(true));
        assert_eq!(
            to_json(Some(&b(r#"{"a": 1}"#)), oid::JSONB, false),
            serde_json::json!({"a": 1})
        );
        assert_eq!(
            to_json(Some(&b(r#"{"a": 1}"#)), 25, false),
            Value::from(r#"{"a": 1}"#)
        );
        assert_eq!(
            to_json(Some(&b(r#"{"a": 1}"#)), 25, true),
            serde_json::json!({"a": 1})
        );
        assert_eq!(to_json(None, 25, false), Value::Null);
    }
}
