//! Debezium's CloudEventsConverter after the router, the worker's
//! `header.converter`, and the `HeaderFrom$Value` transform that feeds the
//! converter, as walrelay flags (`--value-format cloudevents`,
//! `--header-format`, `--metadata-headers`).
//!
//! Read from Debezium 3.6.1's CloudEventsConverter, CloudEventsConverterConfig
//! and documentation/modules/ROOT/pages/integrations/cloudevents.adoc
//! ("Obtaining record metadata"): after the router the value is no change
//! event, so the converter writes a null value unless `metadata.source` is
//! `header` and a `HeaderFrom$Value` transform copied `source`, `op` and
//! `transaction` into headers, which it reads back with a JsonConverter
//! (schemas on).

use std::collections::BTreeMap;

use crate::error::{Error, Result};

const HEADER_FROM: &str = "org.apache.kafka.connect.transforms.HeaderFrom$Value";

/// What a connector's converters and transforms become.
#[derive(Debug, Default)]
pub struct Carried {
    /// walrelay flags, each with its value (None for a switch).
    pub flags: Vec<(&'static str, Option<String>)>,
    /// The options read, so they get no "no equivalent" note.
    pub used: Vec<String>,
}

/// `header.converter`: the walrelay `--header-format`.
pub fn header_format(
    config: &BTreeMap<String, String>,
    carried: &mut Carried,
) -> Result<&'static str> {
    let get = |key: &str| config.get(key).map(|v| v.trim());
    carried
        .used
        .extend(["header.converter", "header.converter.schemas.enable"].map(String::from));
    let format = match get("header.converter").map(|c| c.rsplit('.').next().unwrap_or(c)) {
        None | Some("SimpleHeaderConverter") | Some("StringConverter") => "string",
        Some("JsonConverter") => {
            // JsonConverterConfig.SCHEMAS_ENABLE_DEFAULT is true.
            match get("header.converter.schemas.enable") {
                Some(v) if v.eq_ignore_ascii_case("false") => "json",
                _ => "json-with-schema",
            }
        }
        Some(other) => {
            return Err(Error::permanent(format!(
                "header.converter={other}: walrelay writes headers as SimpleHeaderConverter \
                 (string) or JsonConverter (json, json-with-schema) do; use one of those or \
                 convert by hand"
            )))
        }
    };
    Ok(format)
}

/// The HeaderFrom$Value transforms copying the change event's `source`,
/// `op` and `transaction` (cloudevents.adoc's example); their keys are used.
fn metadata_copy(config: &BTreeMap<String, String>, carried: &mut Carried) -> bool {
    let names: Vec<&str> = config
        .get("transforms")
        .map(|t| t.split(',').map(str::trim).collect())
        .unwrap_or_default();
    let mut found = false;
    for name in names {
        let key = |k: &str| format!("transforms.{name}.{k}");
        if config.get(&key("type")).map(|t| t.trim()) != Some(HEADER_FROM) {
            continue;
        }
        let list = |k: &str| -> Vec<String> {
            config
                .get(&key(k))
                .map(|v| v.split(',').map(|s| s.trim().to_string()).collect())
                .unwrap_or_default()
        };
        let (fields, headers) = (list("fields"), list("headers"));
        let copies = fields == ["source", "op", "transaction"] && headers == fields;
        let operation = config.get(&key("operation")).map(|v| v.trim());
        if copies && operation.is_some_and(|o| o.eq_ignore_ascii_case("copy")) {
            found = true;
            carried.used.extend(
                [
                    "type",
                    "fields",
                    "headers",
                    "operation",
                    "predicate",
                    "negate",
                ]
                .map(key),
            );
            // The predicate only keeps heartbeats out, which walrelay never sends.
            if let Some(predicate) = config.get(&key("predicate")) {
                let p = predicate.trim();
                carried.used.push("predicates".into());
                carried.used.extend(
                    config
                        .keys()
                        .filter(|k| k.starts_with(&format!("predicates.{p}.")))
                        .cloned(),
                );
            }
        }
    }
    found
}

/// Debezium's CloudEventsConverter as the value converter: the flags, or
/// why the set-up has nothing to carry over (it writes null values) or
/// needs what walrelay does not offer.
pub fn value_flags(config: &BTreeMap<String, String>, carried: &mut Carried) -> Result<()> {
    let get = |key: &str| config.get(key).map(|v| v.trim());
    let option = |key: &str| format!("value.converter.{key}");
    // CloudEventsConverterConfig: metadata.source's first entry is the
    // global source (default value); later `field:source` entries override.
    let source = get(&option("metadata.source")).unwrap_or("value");
    let mut entries = source.split(',').map(str::trim);
    let global = entries.next().unwrap_or("value");
    if !global.eq_ignore_ascii_case("header") {
        return Err(Error::permanent(format!(
            "value.converter.metadata.source={source}: after the outbox router the value is no \
             change event, so Debezium's CloudEventsConverter reads no metadata from it and \
             writes a null value for every event; walrelay carries over only the documented \
             set-up, metadata.source=header with a HeaderFrom$Value transform copying source, \
             op and transaction"
        )));
    }
    for entry in entries {
        let (field, from) = entry.split_once(':').unwrap_or((entry, ""));
        let allowed =
            matches!(field, "id" | "type" | "traceparent") && from.eq_ignore_ascii_case("header");
        if !allowed {
            return Err(Error::permanent(format!(
                "value.converter.metadata.source entry {entry:?}: walrelay takes the id and the \
                 type from the id and type headers (header) and generates nothing else; drop \
                 the entry or convert by hand"
            )));
        }
    }
    for (key, default) in [
        ("serializer.type", "json"),
        ("data.serializer.type", "json"),
    ] {
        let value = get(&option(key)).unwrap_or(default);
        if !value.eq_ignore_ascii_case("json") {
            return Err(Error::permanent(format!(
                "value.converter.{key}={value}: Avro CloudEvents need a schema registry, which \
                 walrelay does not use; walrelay writes JSON CloudEvents only"
            )));
        }
    }
    let on = |key: &str, default: bool| {
        get(&option(key)).map_or(default, |v| v.eq_ignore_ascii_case("true"))
    };
    if on("opentelemetry.tracing.attributes.enable", false) {
        return Err(Error::permanent(
            "value.converter.opentelemetry.tracing.attributes.enable=true: walrelay writes no \
             traceparent attribute into CloudEvents (it passes the writer's trace headers \
             through); turn it off or convert by hand",
        ));
    }
    if !metadata_copy(config, carried) {
        return Err(Error::permanent(
            "value.converter=CloudEventsConverter with metadata.source=header but no \
             HeaderFrom$Value transform copying source,op,transaction (in that order, with \
             operation=copy) into headers of the same names: \
             Debezium writes a null value for every event; add the transform (cloudevents.adoc, \
             \"Obtaining record metadata\") or convert by hand",
        ));
    }
    carried
        .flags
        .push(("--value-format", Some("cloudevents".into())));
    carried.flags.push(("--metadata-headers", None));
    if !on("json.schemas.enable", true) {
        carried
            .flags
            .push(("--cloudevents-data-schema", Some("false".into())));
    }
    if !on("extension.attributes.enable", true) {
        carried
            .flags
            .push(("--cloudevents-extension-attributes", Some("false".into())));
    }
    carried.used.extend(
        [
            "value.converter",
            "value.converter.metadata.source",
            "value.converter.serializer.type",
            "value.converter.data.serializer.type",
            "value.converter.json.schemas.enable",
            "value.converter.extension.attributes.enable",
            "value.converter.opentelemetry.tracing.attributes.enable",
            // They name the Avro schema, which walrelay does not write.
            "value.converter.schema.cloudevents.name",
            "value.converter.schema.name.adjustment.mode",
        ]
        .map(String::from),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migrate::connector::parse;

    /// cloudevents.adoc's example, "Obtaining record metadata".
    const DOCUMENTED: &str = "transforms=addMetadataHeaders,outbox\n\
        transforms.addMetadataHeaders.type=org.apache.kafka.connect.transforms.HeaderFrom$Value\n\
        transforms.addMetadataHeaders.fields=source,op,transaction\n\
        transforms.addMetadataHeaders.headers=source,op,transaction\n\
        transforms.addMetadataHeaders.operation=copy\n\
        transforms.addMetadataHeaders.predicate=isHeartbeat\n\
        transforms.addMetadataHeaders.negate=true\n\
        predicates=isHeartbeat\n\
        predicates.isHeartbeat.type=org.apache.kafka.connect.transforms.predicates.TopicNameMatches\n\
        predicates.isHeartbeat.pattern=__debezium-heartbeat.*\n\
        value.converter=io.debezium.converters.CloudEventsConverter\n\
        header.converter=org.apache.kafka.connect.json.JsonConverter\n\
        header.converter.schemas.enable=true\n";

    fn carry(extra: &str) -> Result<Carried> {
        let config = parse(&format!("{DOCUMENTED}{extra}")).unwrap();
        let mut carried = Carried::default();
        value_flags(&config, &mut carried)?;
        Ok(carried)
    }

    #[test]
    fn the_documented_set_up_becomes_cloudevents_with_metadata_headers() {
        let carried = carry("value.converter.metadata.source=header\n").unwrap();
        let flags: Vec<&str> = carried.flags.iter().map(|(f, _)| *f).collect();
        assert_eq!(flags, ["--value-format", "--metadata-headers"]);
        assert!(carried
            .used
            .iter()
            .any(|k| k == "predicates.isHeartbeat.pattern"));
        let plain = carry(
            "value.converter.metadata.source=header,id:header,type:header\n\
             value.converter.json.schemas.enable=false\n\
             value.converter.extension.attributes.enable=false\n",
        )
        .unwrap();
        assert!(plain
            .flags
            .contains(&("--cloudevents-data-schema", Some("false".into()))));
        assert!(plain
            .flags
            .contains(&("--cloudevents-extension-attributes", Some("false".into()))));
        let config = parse(DOCUMENTED).unwrap();
        let mut headers = Carried::default();
        assert_eq!(
            header_format(&config, &mut headers).unwrap(),
            "json-with-schema"
        );
    }

    #[test]
    fn set_ups_where_debezium_writes_null_values_or_needs_a_registry_are_refused() {
        // metadata.source defaults to value: after the router, no envelope.
        let err = carry("").unwrap_err().to_string();
        assert!(err.contains("null value for every event"), "{err}");
        let err = carry("value.converter.metadata.source=header,id:generate\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("id:generate"), "{err}");
        let err = carry(
            "value.converter.metadata.source=header\nvalue.converter.data.serializer.type=avro\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("schema registry"), "{err}");
        let config = parse(
            "value.converter=io.debezium.converters.CloudEventsConverter\n\
             value.converter.metadata.source=header\n",
        )
        .unwrap();
        let err = value_flags(&config, &mut Carried::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("HeaderFrom$Value"), "{err}");
    }
}
