//! The Kafka Connect converter a Debezium set-up used for keys, values and
//! headers, and so the bytes walrelay writes (`--key-format`,
//! `--value-format`, `--header-format`).

use bytes::Bytes;

use super::connect::json_string;

/// Which converter's bytes to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// StringConverter (SimpleHeaderConverter for headers): the column's
    /// text as it is (a bytea column's raw bytes).
    #[default]
    String,
    /// JsonConverter with schemas.enable=false: a JSON value (text columns
    /// become JSON strings, a NULL the text `null`).
    Json,
    /// JsonConverter with schemas.enable=true: `{"schema":...,"payload":...}`,
    /// the schema Debezium gives the column (or the envelope struct).
    JsonWithSchema,
    /// Values only: Debezium's CloudEventsConverter after the outbox router
    /// (metadata.source=header), a CloudEvent in JSON around the expanded
    /// payload (see outbox::cloudevents).
    #[value(name = "cloudevents")]
    CloudEvents,
    /// Confluent's AvroConverter: the Connect schema json-with-schema
    /// writes, as Avro registered in --schema-registry-url, and the record
    /// in the Confluent wire format (see `registry`).
    Avro,
    /// Confluent's JsonSchemaConverter: the same Connect schema as JSON
    /// Schema registered in --schema-registry-url, and the record's JSON in
    /// the Confluent wire format (see `registry::json_schema`).
    #[value(name = "json-schema")]
    JsonSchema,
    /// Confluent's ProtobufConverter: the same Connect schema as a proto3
    /// file registered in --schema-registry-url, and the record as that
    /// message's binary in the Confluent wire format (see
    /// `registry::protobuf`).
    Protobuf,
}

/// Kafka Connect's schema of a plain string (`Schema.STRING_SCHEMA`), as
/// JsonConverter writes it.
pub const STRING_SCHEMA: &str = r#"{"type":"string","optional":false}"#;

impl Format {
    /// Whether the bytes are JsonConverter's, with or without a schema.
    pub fn is_json(self) -> bool {
        matches!(self, Format::Json | Format::JsonWithSchema)
    }

    /// What the mapping writes for this format: the registry's formats
    /// start from JsonConverter's schema and payload, which `registry`
    /// turns into Avro or JSON Schema.
    pub fn mapped(self) -> Self {
        match self {
            Format::Avro | Format::JsonSchema | Format::Protobuf => Format::JsonWithSchema,
            other => other,
        }
    }

    /// A header's bytes in this format, from the value's JSON and its
    /// schema's: JsonConverter as a `header.converter` writes it. For
    /// `String`, `text` (SimpleHeaderConverter's) is used as it is.
    pub fn header(
        self,
        text: Option<Bytes>,
        json: impl FnOnce() -> String,
        schema: &str,
    ) -> Option<Bytes> {
        match self {
            Format::String | Format::CloudEvents => text,
            Format::Json => Some(Bytes::from(json())),
            // --header-format avro/json-schema/protobuf is refused at start-up.
            Format::JsonWithSchema | Format::Avro | Format::JsonSchema | Format::Protobuf => Some(
                Bytes::from(format!("{{\"schema\":{schema},\"payload\":{}}}", json())),
            ),
        }
    }

    /// A string header (Debezium's own: context, trace) in this format.
    pub fn string_header(self, text: Option<Bytes>) -> Option<Bytes> {
        match self {
            Format::String | Format::CloudEvents => text,
            _ => {
                let json = match &text {
                    Some(t) => json_string(&String::from_utf8_lossy(t)),
                    None => "null".into(),
                };
                self.header(text, || json, STRING_SCHEMA)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_string_header_under_json_converter_is_a_json_string_with_its_schema() {
        // JsonConverter.fromConnectHeader of a String with Schema.STRING_SCHEMA
        // (seen from Debezium 3.6.1's worker with header.converter=JsonConverter:
        // {"schema":{"type":"string","optional":false},"payload":"dbz"}).
        let text = Some(Bytes::from_static(b"dbz"));
        assert_eq!(
            Format::JsonWithSchema.string_header(text.clone()).unwrap(),
            r#"{"schema":{"type":"string","optional":false},"payload":"dbz"}"#
        );
        assert_eq!(
            Format::Json.string_header(text.clone()).unwrap(),
            r#""dbz""#
        );
        assert_eq!(Format::String.string_header(text.clone()), text);
    }
}
