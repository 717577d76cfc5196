//! The Kafka Connect converter a Debezium set-up used for keys and values,
//! and so the bytes walrelay writes (`--key-format`, `--value-format`).

/// Which converter's bytes to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// StringConverter: the column's text as it is (a bytea column's raw bytes).
    #[default]
    String,
    /// JsonConverter with schemas.enable=false: a JSON value (text columns
    /// become JSON strings, a NULL the text `null`).
    Json,
    /// JsonConverter with schemas.enable=true: `{"schema":...,"payload":...}`,
    /// the schema Debezium gives the column (or the envelope struct).
    JsonWithSchema,
}

impl Format {
    /// Whether the bytes are JsonConverter's, with or without a schema.
    pub fn is_json(self) -> bool {
        matches!(self, Format::Json | Format::JsonWithSchema)
    }
}
