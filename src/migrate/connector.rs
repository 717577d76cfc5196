//! Reading a Kafka Connect connector's options: its file (Kafka Connect
//! JSON or .properties), the regex list of `table.include.list`, and the
//! converter classes.

use std::collections::BTreeMap;

use crate::error::{Error, Result};

/// The outbox tables named by `table.include.list`, a comma-separated list
/// of regular expressions matched against `schema.table`, as the value of
/// `--table`; or why not.
pub fn outbox_tables(list: &str) -> std::result::Result<String, String> {
    let entries: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    let mut tables = Vec::with_capacity(entries.len());
    for entry in entries {
        // `public\.outbox` and `public.outbox` name the same table; anything
        // else with regex syntax matches tables walrelay cannot guess.
        let literal = entry.replace("\\.", ".");
        let plain = literal
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '.' || c == '$');
        match literal.split('.').collect::<Vec<_>>()[..] {
            [schema, table] if plain && !schema.is_empty() && !table.is_empty() => {
                tables.push(literal)
            }
            _ => {
                return Err(format!(
                    "table.include.list {entry:?} is a pattern, not one schema.table: pass \
                     --table with the outbox tables it matches, comma-separated (walrelay reads \
                     public.outbox otherwise)"
                ))
            }
        }
    }
    if tables.is_empty() {
        return Err("table.include.list is empty: pass --table schema.table".into());
    }
    Ok(tables.join(","))
}

/// The walrelay format for a side's converter, and a note when it differs.
pub fn converter_format(
    side: &str,
    converter: Option<&str>,
    schemas_enable: Option<&str>,
) -> (&'static str, Option<String>) {
    let Some(converter) = converter else {
        return (
            "string",
            Some(format!(
                "no {side}.converter: the Connect worker's default applies; --{side}-format string \
                 matches StringConverter, json matches JsonConverter with schemas.enable=false, \
                 json-with-schema with schemas.enable=true"
            )),
        );
    };
    let class = converter.rsplit('.').next().unwrap_or(converter);
    match class {
        "StringConverter" | "BinaryDataConverter" | "ByteArrayConverter" => ("string", None),
        "JsonConverter" => {
            // JsonConverterConfig.SCHEMAS_ENABLE_DEFAULT is true.
            let schemas = schemas_enable.is_none_or(|v| v.trim().eq_ignore_ascii_case("true"));
            if schemas {
                ("json-with-schema", None)
            } else {
                ("json", None)
            }
        }
        _ => (
            "string",
            Some(format!(
                "{side}.converter={converter}: walrelay writes no such format; it writes the \
                 column's bytes as they are (--{side}-format string)"
            )),
        ),
    }
}

/// Kafka Connect JSON (`{"name", "config": {…}}` or a flat object) or .properties.
pub fn parse(text: &str) -> Result<BTreeMap<String, String>> {
    if text.trim_start().starts_with('{') {
        let doc: serde_json::Value = serde_json::from_str(text).map_err(|e| {
            Error::permanent("the connector configuration is not valid JSON").with_source(e)
        })?;
        let object = doc
            .get("config")
            .unwrap_or(&doc)
            .as_object()
            .ok_or_else(|| {
                Error::permanent("expected a JSON object with the connector's options")
            })?;
        return Ok(object
            .iter()
            .map(|(k, v)| {
                let value = v
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| v.to_string());
                (k.clone(), value)
            })
            .collect());
    }
    let mut map = BTreeMap::new();
    let mut pending = String::new();
    for line in text.lines() {
        let line = line.trim();
        if pending.is_empty() && (line.is_empty() || line.starts_with('#') || line.starts_with('!'))
        {
            continue;
        }
        // A trailing backslash continues the line.
        if let Some(start) = line.strip_suffix('\\') {
            pending.push_str(start);
            continue;
        }
        pending.push_str(line);
        let entry = std::mem::take(&mut pending);
        let split = entry.find(['=', ':']).ok_or_else(|| {
            Error::permanent(format!(
                "cannot read the properties line {entry:?}: expected key=value"
            ))
        })?;
        map.insert(
            entry[..split].trim().to_string(),
            entry[split + 1..].trim().to_string(),
        );
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converters_map_to_formats_and_schemas_enable_defaults_to_true() {
        let json = "org.apache.kafka.connect.json.JsonConverter";
        let string = "org.apache.kafka.connect.storage.StringConverter";
        assert_eq!(
            converter_format("key", Some(string), None),
            ("string", None)
        );
        assert_eq!(
            converter_format("value", Some(json), Some("false")),
            ("json", None)
        );
        assert_eq!(
            converter_format("value", Some(json), Some("FALSE ")),
            ("json", None)
        );
        // JsonConverterConfig.SCHEMAS_ENABLE_DEFAULT = true (apache/kafka
        // connect/json/.../JsonConverterConfig.java): unset means schemas.
        assert_eq!(
            converter_format("value", Some(json), None),
            ("json-with-schema", None)
        );
        assert_eq!(
            converter_format("key", Some(json), Some("true")),
            ("json-with-schema", None)
        );
        let (format, note) = converter_format(
            "value",
            Some("io.debezium.converters.BinaryDataConverter"),
            None,
        );
        assert_eq!((format, note), ("string", None));
        let (_, note) = converter_format(
            "value",
            Some("io.confluent.connect.avro.AvroConverter"),
            None,
        );
        assert!(note.unwrap().contains("AvroConverter"));
    }

    #[test]
    fn table_include_list_names_the_outbox_tables_or_a_note() {
        assert_eq!(outbox_tables("public\\.outbox").unwrap(), "public.outbox");
        assert_eq!(
            outbox_tables(" inventory.outbox_events ").unwrap(),
            "inventory.outbox_events"
        );
        assert_eq!(
            outbox_tables("public.outbox, billing\\.outbox").unwrap(),
            "public.outbox,billing.outbox"
        );
        assert!(outbox_tables("public\\.outbox.*").is_err());
        assert!(outbox_tables("outbox").is_err());
    }
}
