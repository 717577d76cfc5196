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
    // Confluent's and Apicurio's: the registry flags come from
    // migrate::registry.
    if let Some(format) = super::registry::format_of(converter) {
        return (format, None);
    }
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
        // Debezium's CloudEvents converter after the router reads the
        // record's source block from headers that a HeaderFrom transform
        // copied (metadata.source=header) and embeds it in every event.
        "CloudEventsConverter" => (
            "string",
            Some(format!(
                "{side}.converter={converter}: walrelay does not write CloudEvents (Debezium's \
                 event embeds its own source block: version, sequence, lsn, txId); the command \
                 writes the column's bytes as they are (--{side}-format string), so consumers \
                 that parse CloudEvents must change before the switch"
            )),
        ),
        // Other Avro converters (AWS Glue's, Karapace's) have settings
        // walrelay does not carry.
        class if class.contains("Avro") => (
            "string",
            Some(format!(
                "{side}.converter={converter}: walrelay writes Avro with a Confluent-compatible \
                 registry (Confluent's or Apicurio's converter settings); this converter's are \
                 not carried, so the command writes the column's bytes as they are \
                 (--{side}-format string): set --{side}-format avro and --schema-registry-url \
                 by hand if the registry speaks Confluent's API"
            )),
        ),
        // Other Protobuf converters (Apicurio's, AWS Glue's) likewise.
        class if class.contains("Protobuf") => (
            "string",
            Some(format!(
                "{side}.converter={converter}: walrelay writes Protobuf as Confluent's \
                 ProtobufConverter does; this converter's settings are not carried, so the \
                 command writes the column's bytes as they are (--{side}-format string): set \
                 --{side}-format protobuf and --schema-registry-url by hand if the registry \
                 speaks Confluent's API and its schemas are ProtobufData's"
            )),
        ),
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
    properties(text)
}

/// A .properties file read as java.util.Properties `load` reads it, as
/// Kafka Connect does: `#`/`!` comments, a line ending in an odd number of
/// backslashes continued on the next (its leading blanks dropped), the key
/// ended by the first unescaped `=`, `:` or blank, and the escapes `\t`,
/// `\n`, `\r`, `\f`, `\uXXXX` and `\x` for any other x (so `public\\.outbox`
/// is the regex `public\.outbox`). Trailing blanks of a value are dropped.
fn properties(text: &str) -> Result<BTreeMap<String, String>> {
    let mut map = BTreeMap::new();
    let mut pending = String::new();
    let mut continued = false;
    for line in text.lines() {
        let line = line.trim_start_matches([' ', '\t', '\x0c']);
        if !continued && (line.is_empty() || line.starts_with('#') || line.starts_with('!')) {
            continue;
        }
        let backslashes = line.chars().rev().take_while(|&c| c == '\\').count();
        if backslashes % 2 == 1 {
            pending.push_str(&line[..line.len() - 1]);
            continued = true;
            continue;
        }
        pending.push_str(line);
        continued = false;
        let (key, value) = entry(&std::mem::take(&mut pending))?;
        map.insert(key, value);
    }
    if continued {
        let (key, value) = entry(&pending)?;
        map.insert(key, value);
    }
    Ok(map)
}

/// One logical line's key and value, unescaped: after the key, blanks and
/// at most one `=` or `:` are skipped (Properties.load0).
fn entry(line: &str) -> Result<(String, String)> {
    let blank = |c: char| matches!(c, ' ' | '\t' | '\x0c');
    let mut chars = line.char_indices();
    let mut key_end = line.len();
    let mut has_separator = false;
    while let Some((i, c)) = chars.next() {
        if c == '\\' {
            chars.next();
        } else if c == '=' || c == ':' || blank(c) {
            key_end = i;
            has_separator = !blank(c);
            break;
        }
    }
    let mut value = line.get(key_end + 1..).unwrap_or("");
    while let Some(c) = value.chars().next() {
        if blank(c) {
        } else if !has_separator && (c == '=' || c == ':') {
            has_separator = true;
        } else {
            break;
        }
        value = &value[c.len_utf8()..];
    }
    Ok((
        unescape(&line[..key_end])?,
        unescape(value.trim_end_matches(blank))?,
    ))
}

fn unescape(text: &str) -> Result<String> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\x0c'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                let code = u32::from_str_radix(&hex, 16)
                    .ok()
                    .filter(|_| hex.len() == 4)
                    .and_then(char::from_u32)
                    .ok_or_else(|| {
                        Error::permanent(format!(
                            "cannot read the properties text {text:?}: malformed \\u{hex} escape"
                        ))
                    })?;
                out.push(code);
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    Ok(out)
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
        // Confluent's and Apicurio's Avro converters become avro (the
        // registry flags come from migrate::registry); another keeps string.
        for avro in [
            "io.confluent.connect.avro.AvroConverter",
            "io.apicurio.registry.utils.converter.AvroConverter",
        ] {
            assert_eq!(converter_format("value", Some(avro), None), ("avro", None));
        }
        assert_eq!(
            converter_format(
                "value",
                Some("io.confluent.connect.json.JsonSchemaConverter"),
                None
            ),
            ("json-schema", None)
        );
        let (format, note) = converter_format(
            "value",
            Some("com.amazonaws.services.schemaregistry.kafkaconnect.AWSKafkaAvroConverter"),
            None,
        );
        assert_eq!(format, "string");
        assert!(note.unwrap().contains("--value-format avro"));
        let (format, note) = converter_format(
            "value",
            Some("io.apicurio.registry.utils.converter.ProtobufConverter"),
            None,
        );
        assert_eq!(format, "string");
        assert!(note.unwrap().contains("--value-format protobuf"));
        let (format, note) = converter_format(
            "value",
            Some("io.debezium.converters.CloudEventsConverter"),
            None,
        );
        assert_eq!(format, "string");
        assert!(note.unwrap().contains("does not write CloudEvents"));
    }

    #[test]
    fn properties_are_read_as_java_util_properties_reads_them() {
        let map = parse(
            "# a comment\n\
             ! another\n\
             table.include.list=public\\\\.outbox\n\
             transforms.outbox.route.topic.regex = (?<x>[a-z]+)\\\\.(?<y>\\\\w+)  \n\
             key\\ with\\=odd\\:chars value\n\
             spaced   :  v\n\
             long=a,\\\n\
             \x20   b\n\
             ends.in.backslash=c:\\\\\\\\\n\
             unicode=caf\\u00e9\\tx\n\
             empty\n",
        )
        .unwrap();
        assert_eq!(map["table.include.list"], "public\\.outbox");
        assert_eq!(
            map["transforms.outbox.route.topic.regex"],
            "(?<x>[a-z]+)\\.(?<y>\\w+)"
        );
        assert_eq!(map["key with=odd:chars"], "value");
        assert_eq!(map["spaced"], "v");
        assert_eq!(map["long"], "a,b");
        assert_eq!(map["ends.in.backslash"], "c:\\\\");
        assert_eq!(map["unicode"], "caf\u{e9}\tx");
        assert_eq!(map["empty"], "");
        assert!(parse("bad=\\u12").is_err());
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
