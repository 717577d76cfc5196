//! `--expand-json-payload` as Debezium's outbox router does it
//! (debezium-connect-plugins/.../transforms/outbox/JsonSchemaData.java): the
//! payload text is parsed, a Connect schema is inferred from it, and
//! JsonConverter writes the resulting struct. So `null` fields and empty
//! arrays disappear (`table.json.payload.null.behavior` and
//! `…empty.array.behavior`, both `ignore` by default), numbers are Java's,
//! and a document Debezium cannot turn into a struct (an array at the top,
//! an array of mixed types) keeps its text: "JSON expansion failed".

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use super::connect::{java_double, json_string};

/// What the two behaviours keep (Debezium's `ignore` drops, the others keep).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Behaviour {
    /// `table.json.payload.null.behavior=optional_bytes`: keep null fields.
    pub keep_null_fields: bool,
    /// `table.json.payload.empty.array.behavior=optional_string`: keep empty arrays.
    pub keep_empty_arrays: bool,
}

/// Debezium's `table.json.payload.null.behavior`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum NullBehavior {
    /// Leave null fields out.
    #[default]
    Ignore,
    /// Keep them as null.
    OptionalBytes,
}

/// Debezium's `table.json.payload.empty.array.behavior`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum EmptyArrayBehavior {
    /// Leave empty arrays out.
    #[default]
    Ignore,
    /// Keep them as empty arrays.
    OptionalString,
}

/// A parsed JSON value that keeps the order of object fields.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    Null,
    Bool(bool),
    /// Jackson's IntNode (fits an int) or LongNode.
    Int(i64),
    Double(f64),
    /// An integer beyond a long: Jackson's BigIntegerNode, which Debezium cannot expand.
    Big,
    String(String),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
}

/// Connect schema kinds, enough to tell array members apart.
#[derive(Debug, Clone, PartialEq)]
enum Schema {
    Bool,
    Int32,
    Int64,
    Float64,
    String,
    Bytes,
    Array(Box<Schema>),
    Struct(Vec<(String, Schema)>),
}

/// The expanded payload as JsonConverter writes it, or None when Debezium
/// would keep the string.
pub fn expand(text: &str, behaviour: Behaviour) -> Option<String> {
    if !text.starts_with(['{', '[']) {
        return None;
    }
    let node: Node = serde_json::from_str(text).ok()?;
    // jsonNodeToStructInternal needs a struct at the top.
    let schema @ Schema::Struct(_) = schema_of(&node, behaviour).ok()?? else {
        return None;
    };
    let mut out = String::with_capacity(text.len());
    write(&node, &schema, &mut out)?;
    Some(out)
}

/// JsonSchemaData.toConnectSchema: Ok(None) is a field left out; Err fails the expansion.
fn schema_of(node: &Node, behaviour: Behaviour) -> Result<Option<Schema>, ()> {
    Ok(Some(match node {
        Node::String(_) => Schema::String,
        Node::Bool(_) => Schema::Bool,
        Node::Int(i) if i32::try_from(*i).is_ok() => Schema::Int32,
        Node::Int(_) => Schema::Int64,
        Node::Double(_) | Node::Big => Schema::Float64,
        Node::Array(items) if items.is_empty() => {
            if !behaviour.keep_empty_arrays {
                return Ok(None);
            }
            Schema::Array(Box::new(Schema::String))
        }
        Node::Array(items) => Schema::Array(Box::new(member_schema(items, behaviour)?)),
        Node::Object(fields) => {
            let mut out: Vec<(String, Schema)> = Vec::new();
            for (name, value) in fields {
                if let Some(schema) = schema_of(value, behaviour)? {
                    if !out.iter().any(|(n, _)| n == name) {
                        out.push((name.clone(), schema));
                    }
                }
            }
            Schema::Struct(out)
        }
        Node::Null if behaviour.keep_null_fields => Schema::Bytes,
        Node::Null => return Ok(None),
    }))
}

/// toConnectSchemaWithCycles and getFirstArrayElement: members must share a
/// type (nulls skipped); objects' fields are merged in the order first seen.
fn member_schema(items: &[Node], behaviour: Behaviour) -> Result<Schema, ()> {
    let mut sample: Option<&Node> = None;
    let mut sample_schema: Option<Schema> = None;
    for item in items.iter().filter(|i| **i != Node::Null) {
        let Some(first) = sample else {
            sample = Some(item);
            continue;
        };
        if std::mem::discriminant(&kind(first)) != std::mem::discriminant(&kind(item)) {
            return Err(());
        }
        if kind(first) == Kind::Number {
            let first_schema = match &sample_schema {
                Some(s) => s.clone(),
                None => schema_of(first, behaviour)?.ok_or(())?,
            };
            if schema_of(item, behaviour)?.as_ref() != Some(&first_schema) {
                return Err(());
            }
            sample_schema = Some(first_schema);
        }
    }
    let sample = sample.ok_or(())?;
    if let Node::Object(_) = sample {
        let mut merged: Vec<(String, Schema)> = Vec::new();
        for item in items {
            if let (Node::Object(_), Some(Schema::Struct(fields))) =
                (item, schema_of(item, behaviour)?)
            {
                for (name, schema) in fields {
                    match merged.iter_mut().find(|(n, _)| *n == name) {
                        None => merged.push((name, schema)),
                        // mergeSchema: a bytes (null) field gives way to a typed one.
                        Some((_, old)) if *old == Schema::Bytes && schema != Schema::Bytes => {
                            *old = schema
                        }
                        Some(_) => {}
                    }
                }
            }
        }
        return Ok(Schema::Struct(merged));
    }
    schema_of(sample, behaviour)?.ok_or(())
}

#[derive(Debug, PartialEq, Eq)]
enum Kind {
    Null,
    Bool,
    Number,
    String,
    Array,
    Object,
}

fn kind(node: &Node) -> Kind {
    match node {
        Node::Null => Kind::Null,
        Node::Bool(_) => Kind::Bool,
        Node::Int(_) | Node::Double(_) | Node::Big => Kind::Number,
        Node::String(_) => Kind::String,
        Node::Array(_) => Kind::Array,
        Node::Object(_) => Kind::Object,
    }
}

/// JsonConverter's output of the struct built by toConnectData; None where
/// Connect would refuse the value (Struct.put validates it), failing the expansion.
fn write(node: &Node, schema: &Schema, out: &mut String) -> Option<()> {
    match (node, schema) {
        (Node::Null, _) => out.push_str("null"),
        (Node::Bool(b), Schema::Bool) => out.push_str(if *b { "true" } else { "false" }),
        (Node::Int(i), Schema::Int32 | Schema::Int64) => out.push_str(&i.to_string()),
        (Node::Double(d), Schema::Float64) => out.push_str(&java_double(*d)),
        (Node::String(s), Schema::String) => out.push_str(&json_string(s)),
        (Node::Array(items), Schema::Array(member)) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(item, member, out)?;
            }
            out.push(']');
        }
        (Node::Object(fields), Schema::Struct(schema_fields)) => {
            out.push('{');
            for (i, (name, field_schema)) in schema_fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&json_string(name));
                out.push(':');
                match fields.iter().find(|(n, _)| n == name) {
                    Some((_, value)) => write(value, field_schema, out)?,
                    None => out.push_str("null"),
                }
            }
            out.push('}');
        }
        _ => return None,
    }
    Some(())
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NodeVisitor;

        impl<'de> Visitor<'de> for NodeVisitor {
            type Value = Node;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
                Ok(Node::Bool(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
                Ok(Node::Int(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
                Ok(i64::try_from(v).map_or(Node::Big, Node::Int))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
                Ok(Node::Double(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Node, E> {
                Ok(Node::String(v.to_string()))
            }
            fn visit_string<E>(self, v: String) -> Result<Node, E> {
                Ok(Node::String(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Node::Array(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
                let mut fields = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, Node>()? {
                    fields.push((key, value));
                }
                Ok(Node::Object(fields))
            }
        }

        deserializer.deserialize_any(NodeVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ignore(text: &str) -> Option<String> {
        expand(text, Behaviour::default())
    }

    #[test]
    fn the_documented_payload_expands_to_compact_json() {
        // outbox-event-router.adoc, "Expanding escaped JSON String as JSON".
        let text = r#"{"id": 1, "lineItems": [{"id": 1, "item": "Debezium in Action", "status": "ENTERED", "quantity": 2, "totalPrice": 39.98}, {"id": 2, "item": "Debezium for Dummies", "status": "ENTERED", "quantity": 1, "totalPrice": 29.99}], "orderDate": "2019-01-31T12:13:01", "customerId": 123}"#;
        assert_eq!(
            ignore(text).unwrap(),
            r#"{"id":1,"lineItems":[{"id":1,"item":"Debezium in Action","status":"ENTERED","quantity":2,"totalPrice":39.98},{"id":2,"item":"Debezium for Dummies","status":"ENTERED","quantity":1,"totalPrice":29.99}],"orderDate":"2019-01-31T12:13:01","customerId":123}"#
        );
    }

    #[test]
    fn null_fields_and_empty_arrays_follow_the_behaviour_options() {
        // toConnectSchema: NULL gives no schema under ignore (OPTIONAL_BYTES
        // under optional_bytes); an empty array none under ignore, an
        // optional string array under optional_string.
        let text = r#"{"a": null, "b": [], "c": 1}"#;
        assert_eq!(ignore(text).unwrap(), r#"{"c":1}"#);
        let keep = Behaviour {
            keep_null_fields: true,
            keep_empty_arrays: true,
        };
        assert_eq!(expand(text, keep).unwrap(), r#"{"a":null,"b":[],"c":1}"#);
    }

    #[test]
    fn documents_debezium_cannot_expand_keep_their_text() {
        // getFirstArrayElement: "Field is not a homogenous array".
        assert_eq!(ignore(r#"{"a": [1, "x"]}"#), None);
        // Different number schemas (INT32 x FLOAT64) are not homogenous either.
        assert_eq!(ignore(r#"{"a": [1, 2.5]}"#), None);
        // A top-level array is no struct.
        assert_eq!(ignore("[1, 2]"), None);
        assert_eq!(ignore("not json"), None);
    }

    #[test]
    fn numbers_are_written_as_java_writes_them() {
        assert_eq!(
            ignore(r#"{"i": 10, "l": 9007199254740993, "d": 1.0, "e": 1e10}"#).unwrap(),
            r#"{"i":10,"l":9007199254740993,"d":1.0,"e":1.0E10}"#
        );
    }

    #[test]
    fn arrays_of_objects_share_one_merged_schema() {
        // mergeSchema: fields of every element; a missing one is null.
        assert_eq!(
            ignore(r#"{"xs": [{"a": 1}, {"b": "y"}]}"#).unwrap(),
            r#"{"xs":[{"a":1,"b":null},{"a":null,"b":"y"}]}"#
        );
    }
}
