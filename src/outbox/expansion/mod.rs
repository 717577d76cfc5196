//! `--expand-json-payload` as Debezium's outbox router does it
//! (debezium/debezium v3.6.1.Final debezium-connect-plugins/.../transforms/outbox/
//! EventRouterDelegate.java `apply` and JsonSchemaData.java): a payload string
//! that starts with `{` or `[` is read as JSON (`jackson`), a Connect schema
//! is inferred from it (`toConnectSchema`), the JSON becomes a struct of that
//! schema (`toConnectData`), and JsonConverter writes both.
//!
//! The inference, as JsonSchemaData builds it:
//! - every schema is optional; a string, boolean, int, long or double is
//!   OPTIONAL_STRING, _BOOLEAN, _INT32, _INT64, _FLOAT64 (a BigIntegerNode
//!   too is FLOAT64);
//! - an object is a struct named after its path (`payload`, `payload.address`,
//!   the payload column's name first), fields in the document's order; a
//!   field whose schema is null is left out;
//! - `null` has no schema (`table.json.payload.null.behavior=ignore`) or
//!   OPTIONAL_BYTES (`optional_bytes`); an empty array none (`ignore`) or an
//!   optional array of optional strings (`optional_string`, Debezium after
//!   3.6.1);
//! - an array's members must share one type, nulls aside, and numbers one
//!   schema ("Field is not a homogenous array"); objects' schemas are
//!   merged: a field of any member, a bytes (null) field giving way to a
//!   typed one. Several distinct member schemas merge into a *required*
//!   struct (SchemaUtil.copySchemaBasics keeps the name, not `optional`);
//!   the members of an array of arrays take the first member's schema.
//!
//! Three outcomes, as the router's `try`/`catch` around the two steps makes them:
//! - the struct (`Expanded`);
//! - no schema could be made (not JSON, mixed member types, a field named
//!   ""): "JSON expansion failed" is logged and the payload is unchanged
//!   (`Kept`);
//! - a schema was made but the value does not fit it (a top-level array, a
//!   BigIntegerNode, merged members whose fields disagree, a null member of
//!   a required struct, a nested array whose members differ): the payload
//!   stays a string but its schema is the new one (`Unfit`), which
//!   JsonConverter cannot write, so Debezium's task fails; with no schema at
//!   all (a top-level `[]`) the string is written without one.

mod jackson;

use jackson::{read_tree, Node};

use super::connect::java_double;
use super::schema::{ConnectSchema, Kind};

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

/// What became of a payload string.
#[derive(Debug, Clone, PartialEq)]
pub enum Expansion {
    /// A struct: JsonConverter's text of it, and its schema.
    Expanded { json: String, schema: ConnectSchema },
    /// No schema could be made: the payload is as it was.
    Kept,
    /// The value does not fit the schema inferred from it (None: no schema
    /// at all); `why` says where.
    Unfit {
        schema: Option<ConnectSchema>,
        why: String,
    },
}

/// The expansion of `text`, the payload column `field`'s string.
pub fn expand(text: &str, field: &str, behaviour: Behaviour) -> Expansion {
    if !text.starts_with(['{', '[']) {
        return Expansion::Kept;
    }
    let Some(node) = read_tree(text) else {
        return Expansion::Kept;
    };
    let infer = Infer { behaviour };
    let schema = match infer.schema(Some(field), &node) {
        Ok(schema) => schema,
        Err(()) => return Expansion::Kept,
    };
    let Some(schema) = schema else {
        return Expansion::Unfit {
            schema: None,
            why: "a top-level empty array has no schema".into(),
        };
    };
    let mut json = String::with_capacity(text.len());
    let fits = match (&node, schema.kind()) {
        (Node::Object(_), Kind::Struct(_)) => write(&node, &schema, &mut json),
        _ => Err("a top-level array is no struct".into()),
    };
    match fits {
        Ok(()) => Expansion::Expanded { json, schema },
        Err(why) => Expansion::Unfit {
            schema: Some(schema),
            why,
        },
    }
}

struct Infer {
    behaviour: Behaviour,
}

impl Infer {
    /// JsonSchemaData.toConnectSchema(key, node): Ok(None) is no schema,
    /// Err a ConnectException.
    fn schema(&self, key: Option<&str>, node: &Node) -> Result<Option<ConnectSchema>, ()> {
        let optional = |kind| Ok(Some(ConnectSchema::optional(kind, None)));
        match node {
            Node::String(_) => optional(Kind::String),
            Node::Bool(_) => optional(Kind::Boolean),
            Node::Int(i) if i32::try_from(*i).is_ok() => optional(Kind::Int32),
            Node::Int(_) => optional(Kind::Int64),
            Node::Double(_) | Node::Big => optional(Kind::Float64),
            Node::Array(items) if items.is_empty() => {
                if !self.behaviour.keep_empty_arrays {
                    return Ok(None);
                }
                let items = ConnectSchema::optional(Kind::String, None);
                optional(Kind::Array(Box::new(items)))
            }
            Node::Array(items) => optional(Kind::Array(Box::new(self.members(key, items)?))),
            Node::Object(fields) => {
                let mut out: Vec<(String, ConnectSchema)> = Vec::new();
                for (name, value) in fields {
                    let field_key = match key {
                        Some(key) if !key.trim().is_empty() => format!("{key}.{name}"),
                        _ => name.clone(),
                    };
                    let Some(schema) = self.schema(Some(&field_key), value)? else {
                        continue;
                    };
                    if out.iter().any(|(n, _)| n == name) {
                        continue;
                    }
                    // SchemaBuilder.field: "fieldName cannot be null."
                    if name.is_empty() {
                        return Err(());
                    }
                    out.push((name.clone(), schema));
                }
                Ok(Some(ConnectSchema::optional(
                    Kind::Struct(out),
                    key.map(str::to_string),
                )))
            }
            Node::Null if self.behaviour.keep_null_fields => optional(Kind::Bytes),
            Node::Null => Ok(None),
        }
    }

    /// toConnectSchemaWithCycles: the members' schema.
    fn members(&self, key: Option<&str>, items: &[Node]) -> Result<ConnectSchema, ()> {
        let sample = self.first_member(items)?;
        if !matches!(sample, Node::Object(_)) {
            // "Array '…' has unrecognized member schema."
            return self.schema(None, sample)?.ok_or(());
        }
        // A HashSet of the members' schemas, merged. Java iterates it in
        // the order of identity hash codes; walrelay in the order first seen.
        let mut distinct: Vec<ConnectSchema> = Vec::new();
        for item in items.iter().filter(|i| matches!(i, Node::Object(_))) {
            if let Some(schema) = self.schema(key, item)? {
                if !distinct.contains(&schema) {
                    distinct.push(schema);
                }
            }
        }
        let mut distinct = distinct.into_iter();
        let first = distinct.next().ok_or(())?;
        Ok(distinct.fold(first, merge))
    }

    /// getFirstArrayElement: the first member that is not null, once every
    /// member has its type, and every number its schema.
    fn first_member<'n>(&self, items: &'n [Node]) -> Result<&'n Node, ()> {
        let mut sample: Option<&Node> = None;
        for item in items.iter().filter(|i| **i != Node::Null) {
            let first = *sample.get_or_insert(item);
            if std::mem::discriminant(&kind(first)) != std::mem::discriminant(&kind(item)) {
                return Err(());
            }
            if kind(first) == JsonType::Number
                && self.schema(None, first)? != self.schema(None, item)?
            {
                return Err(());
            }
        }
        Ok(sample.unwrap_or(&Node::Null))
    }
}

/// mergeSchema: `left`'s fields, then `right`'s new ones; a bytes field
/// gives way to one of another type. The result is required.
fn merge(left: ConnectSchema, right: ConnectSchema) -> ConnectSchema {
    let (Kind::Struct(mut fields), Kind::Struct(more)) = (left.kind().clone(), right.kind()) else {
        return left;
    };
    for (name, schema) in more {
        match fields.iter_mut().find(|(n, _)| n == name) {
            None => fields.push((name.clone(), schema.clone())),
            Some((_, old))
                if old != schema && *old.kind() == Kind::Bytes && *schema.kind() != Kind::Bytes =>
            {
                *old = schema.clone()
            }
            Some(_) => {}
        }
    }
    let name = left.name().map(str::to_string);
    ConnectSchema::optional(Kind::Struct(fields), name).required()
}

/// JsonNodeType, where a number is one type.
#[derive(Debug, PartialEq, Eq)]
enum JsonType {
    Bool,
    Number,
    String,
    Array,
    Object,
    Null,
}

fn kind(node: &Node) -> JsonType {
    match node {
        Node::Null => JsonType::Null,
        Node::Bool(_) => JsonType::Bool,
        Node::Int(_) | Node::Double(_) | Node::Big => JsonType::Number,
        Node::String(_) => JsonType::String,
        Node::Array(_) => JsonType::Array,
        Node::Object(_) => JsonType::Object,
    }
}

/// toConnectData then JsonConverter's text of it: getStructFieldValue's
/// Java value must pass ConnectSchema.validateValue (Struct.put), or the
/// error says where it does not.
fn write(node: &Node, schema: &ConnectSchema, out: &mut String) -> Result<(), String> {
    let mismatch = |what: &str| {
        let wanted = match schema.is_optional() {
            true => "an optional ",
            false => "a required ",
        };
        Err(format!(
            "{what} where the schema inferred from the payload wants {wanted}{}",
            schema.type_name()
        ))
    };
    match (node, schema.kind()) {
        // getStructFieldValue's default: null, which an optional schema takes.
        (Node::Null, _) if schema.is_optional() => out.push_str("null"),
        (Node::Null, _) => return mismatch("a null"),
        (Node::Bool(b), Kind::Boolean) => out.push_str(if *b { "true" } else { "false" }),
        // asInt is an Integer, asLong a Long: INT32 and INT64 take only their own.
        (Node::Int(i), Kind::Int32) if i32::try_from(*i).is_ok() => out.push_str(&i.to_string()),
        (Node::Int(i), Kind::Int64) if i32::try_from(*i).is_err() => out.push_str(&i.to_string()),
        (Node::Double(d), Kind::Float64) if d.is_finite() => out.push_str(&java_double(*d)),
        // Jackson quotes what is not a number (QUOTE_NON_NUMERIC_NUMBERS).
        (Node::Double(d), Kind::Float64) => {
            out.push('"');
            out.push_str(&java_double(*d));
            out.push('"');
        }
        (Node::String(literal), Kind::String) => out.push_str(literal),
        (Node::Array(items), Kind::Array(member)) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(item, member, out)?;
            }
            out.push(']');
        }
        (Node::Object(fields), Kind::Struct(schema_fields)) => {
            out.push('{');
            for (i, (name, field_schema)) in schema_fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&super::connect::json_string(name));
                out.push(':');
                match fields.iter().find(|(n, _)| n == name) {
                    Some((_, value)) => write(value, field_schema, out)?,
                    None => out.push_str("null"),
                }
            }
            out.push('}');
        }
        (Node::Big, _) => return mismatch("an integer beyond a long (a BigDecimal)"),
        (Node::Int(i), _) if i32::try_from(*i).is_ok() => return mismatch("an int"),
        (Node::Int(_), _) => return mismatch("a long"),
        (Node::Double(_), _) => return mismatch("a double"),
        (Node::Bool(_), _) => return mismatch("a boolean"),
        (Node::String(_), _) => return mismatch("a string"),
        (Node::Array(_), _) => return mismatch("an array"),
        (Node::Object(_), _) => return mismatch("an object"),
    }
    Ok(())
}

#[cfg(test)]
mod tests;
