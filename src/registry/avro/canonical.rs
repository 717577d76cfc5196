//! An Avro schema's Parsing Canonical Form (Avro specification, "Parsing
//! Canonical Form for Schemas"), with the logical types kept: two schemas
//! with the same form write the same bytes, and mean the same by them.
//!
//! The specification's transformations: [PRIMITIVES] a primitive in an
//! object of its own becomes its name; [FULLNAMES] names become full names
//! (a dotted name is full; otherwise the `namespace` attribute's, else the
//! enclosing named type's); [STRIP] only `type`, `name`, `fields`,
//! `symbols`, `items`, `values` and `size` stay; [ORDER] in that order;
//! [WHITESPACE] none. A named type is written whole where it is first
//! defined and by its full name after. Kept beyond it: `logicalType`,
//! `precision` and `scale`, since a decimal of another scale reads the
//! same bytes as another number.

use std::collections::HashSet;

use serde_json::{Map, Value};

const PRIMITIVES: [&str; 8] = [
    "null", "boolean", "int", "long", "float", "double", "bytes", "string",
];

/// The canonical form of the schema `text`, None when it is no Avro
/// schema walrelay can read.
pub fn canonical(text: &str) -> Option<String> {
    let schema: Value = serde_json::from_str(text).ok()?;
    let mut out = String::new();
    write(&schema, None, &mut HashSet::new(), &mut out)?;
    Some(out)
}

fn write(
    schema: &Value,
    space: Option<&str>,
    seen: &mut HashSet<String>,
    out: &mut String,
) -> Option<()> {
    match schema {
        Value::String(name) if PRIMITIVES.contains(&name.as_str()) => quoted(name, out),
        Value::String(name) => quoted(&full_name(name, None, space), out),
        Value::Array(branches) => {
            out.push('[');
            for (i, branch) in branches.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(branch, space, seen, out)?;
            }
            out.push(']');
        }
        Value::Object(object) => write_object(object, space, seen, out)?,
        _ => return None,
    }
    Some(())
}

fn write_object(
    object: &Map<String, Value>,
    space: Option<&str>,
    seen: &mut HashSet<String>,
    out: &mut String,
) -> Option<()> {
    let kind = match object.get("type")? {
        Value::String(kind) => kind.as_str(),
        // {"type": {...}} or {"type": [...]}: the inner schema.
        nested => return write(nested, space, seen, out),
    };
    let logical = ["logicalType", "precision", "scale"]
        .iter()
        .filter_map(|key| Some((*key, object.get(*key)?)))
        .collect::<Vec<_>>();
    let named = matches!(kind, "record" | "error" | "enum" | "fixed");
    let full = if named {
        let name = object.get("name")?.as_str()?;
        let namespace = object.get("namespace").and_then(Value::as_str);
        Some(full_name(name, namespace, space))
    } else {
        None
    };
    if let Some(full) = &full {
        if !seen.insert(full.clone()) {
            quoted(full, out);
            return Some(());
        }
    }
    if PRIMITIVES.contains(&kind) && logical.is_empty() {
        quoted(kind, out);
        return Some(());
    }
    out.push('{');
    if let Some(full) = &full {
        out.push_str("\"name\":");
        quoted(full, out);
        out.push(',');
    }
    out.push_str("\"type\":");
    quoted(kind, out);
    // A named type's own name is the namespace of what it holds.
    let inner = full
        .as_deref()
        .and_then(|f| f.rsplit_once('.').map(|(ns, _)| ns))
        .or(space);
    match kind {
        "record" | "error" => {
            out.push_str(",\"fields\":[");
            for (i, field) in object.get("fields")?.as_array()?.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str("{\"name\":");
                quoted(field.get("name")?.as_str()?, out);
                out.push_str(",\"type\":");
                write(field.get("type")?, inner, seen, out)?;
                out.push('}');
            }
            out.push(']');
        }
        "enum" => {
            out.push_str(",\"symbols\":");
            out.push_str(&object.get("symbols")?.to_string());
        }
        "array" => {
            out.push_str(",\"items\":");
            write(object.get("items")?, inner, seen, out)?;
        }
        "map" => {
            out.push_str(",\"values\":");
            write(object.get("values")?, inner, seen, out)?;
        }
        "fixed" => {
            out.push_str(",\"size\":");
            out.push_str(&object.get("size")?.to_string());
        }
        _ => {}
    }
    for (key, value) in logical {
        out.push_str(&format!(",\"{key}\":{value}"));
    }
    out.push('}');
    Some(())
}

/// [FULLNAMES]: a dotted name is full; else the namespace attribute's, or
/// the enclosing one's.
fn full_name(name: &str, namespace: Option<&str>, space: Option<&str>) -> String {
    if name.contains('.') {
        return name.to_string();
    }
    match namespace.filter(|ns| !ns.is_empty()).or(space) {
        Some(ns) => format!("{ns}.{name}"),
        None => name.to_string(),
    }
}

fn quoted(text: &str, out: &mut String) {
    out.push_str(&Value::String(text.to_string()).to_string());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_canonical_form_keeps_what_the_bytes_depend_on_and_nothing_else() {
        // The specification's rules: [PRIMITIVES] {"type":"int"} is "int";
        // [FULLNAMES] Foo in namespace x.y is x.y.Foo, and a nested record
        // takes its enclosing namespace; [STRIP] doc, default, connect.*
        // properties go; [ORDER] name, type, fields.
        let written = r#"{"type":"record","name":"Foo","namespace":"x.y","doc":"d",
            "connect.name":"x.y.Foo","fields":[
              {"name":"a","type":{"type":"int"},"default":0,"doc":"an a"},
              {"name":"b","type":["null",{"type":"record","name":"Bar","fields":[]}]},
              {"name":"c","type":"Bar"}]}"#;
        assert_eq!(
            canonical(written).unwrap(),
            r#"{"name":"x.y.Foo","type":"record","fields":[{"name":"a","type":"int"},{"name":"b","type":["null",{"name":"x.y.Bar","type":"record","fields":[]}]},{"name":"c","type":"x.y.Bar"}]}"#
        );
        // Properties that do not change the bytes do not change the form.
        assert_eq!(
            canonical(
                r#"{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Json"}"#
            ),
            canonical(r#""string""#)
        );
        // A decimal's scale does: kept beyond the specification.
        let decimal = |scale: u32| {
            canonical(&format!(
                r#"{{"type":"bytes","logicalType":"decimal","precision":10,"scale":{scale}}}"#
            ))
        };
        assert_ne!(decimal(2), decimal(3));
        assert_ne!(decimal(2), canonical(r#""bytes""#));
        // Field order changes the bytes.
        assert_ne!(
            canonical(
                r#"{"type":"record","name":"R","fields":[{"name":"a","type":"int"},{"name":"b","type":"string"}]}"#
            ),
            canonical(
                r#"{"type":"record","name":"R","fields":[{"name":"b","type":"string"},{"name":"a","type":"int"}]}"#
            )
        );
    }
}
