//! Debezium's `io.debezium.converters.CloudEventsConverter` after the
//! outbox router (`--value-format cloudevents`), and the `source`, `op` and
//! `transaction` headers its documented set-up copies with a `HeaderFrom`
//! transform (`--metadata-headers`).
//!
//! Debezium's converter reads the change event's metadata from those
//! headers (`metadata.source=header`), because the router's record is no
//! longer a change event; walrelay has the same facts from the stream
//! itself: the commit's time and xid from BEGIN, the row's LSN from its
//! XLogData, the last commit's end LSN from the COMMIT before it.
//!
//! Sources (debezium/debezium at aad55199, 3.6.1.Final):
//! - `CloudEventsConverter.fromConnectData` and `convertToCloudEventsFormat`:
//!   `id`, `source`, `specversion`, `type`, `time`, `datacontenttype`, then
//!   the extension attributes (`iodebeziumop`, one per source field, one per
//!   transaction field; an int64 written as its decimal string), then `data`;
//!   with the data converter's `json.schemas.enable` (default true) `data`
//!   is `{"schema":…,"payload":…}` spliced into the event.
//! - `CloudEventsMaker.ceSource` (`/debezium/postgresql/<topic.prefix>`),
//!   `ceTime` (`yyyy-MM-dd'T'HH:mm:ss.SSSXXX` in UTC, from `ts_ms`).
//! - `RecordAndMetadataBaseImpl.dataSchema`: the value's fields under a new
//!   struct named `io.debezium.connector.postgresql.Data`, required.
//! - `RecordAndMetadataHeaderImpl`: the `id` and `type` headers are required.
//! - `PostgresSourceInfoStructMaker` and `SourceInfo`: the source block's
//!   fields and schema (seen byte for byte from Debezium's worker in
//!   tests/debezium_oracle.rs's `cloudevents` cases).

use super::connect::json_string;
use super::format::Format;
use crate::postgres::lsn::Lsn;

/// The Debezium release whose records walrelay reproduces: the source
/// block's `version`, so consumers that read it see no change at the switch.
pub const DEBEZIUM_VERSION: &str = "3.6.1.Final";

/// `io.debezium.connector.postgresql.Data`: the name of `data`'s schema.
pub const DATA_SCHEMA_NAME: &str = "io.debezium.connector.postgresql.Data";

/// The CloudEvents options (`value.converter.*` of Debezium's converter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CloudEventsConfig {
    /// `json.schemas.enable`: `data` carries its schema.
    pub data_with_schema: bool,
    /// `extension.attributes.enable`: the `iodebezium*` attributes.
    pub extension_attributes: bool,
}

/// Where and when a row was written: what Debezium's source block says of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    /// The commit's time (a snapshot's or replay's: when the row was read).
    pub commit_time_us: i64,
    pub xid: Option<u32>,
    /// The row's own LSN: where its change is in the WAL.
    pub lsn: Option<Lsn>,
    /// The end LSN of the commit read before this transaction, in this
    /// session (Debezium's `lastCommitLsn`).
    pub last_commit: Option<Lsn>,
    /// Read by a snapshot or a replay, not from the WAL: op `r`.
    pub read: bool,
}

impl Change {
    /// A row read with SQL at `now_us` (snapshot, replay): no WAL position.
    pub fn read_at(now_us: i64) -> Self {
        Change {
            commit_time_us: now_us,
            xid: None,
            lsn: None,
            last_commit: None,
            read: true,
        }
    }

    /// Debezium's `op`: `c` for an INSERT read from the WAL, `r` for a read.
    pub fn op(&self) -> &'static str {
        if self.read {
            "r"
        } else {
            "c"
        }
    }
}

/// One field of the source block.
enum Value {
    Str(String),
    Int(i64),
    Null,
}

/// Debezium's source block of one row: `server` is the topic.prefix,
/// `database` the database's name, `schema.table` the outbox table.
pub struct SourceBlock<'a> {
    pub server: &'a str,
    pub database: &'a str,
    pub schema: &'a str,
    pub table: &'a str,
    pub change: &'a Change,
}

/// The source block's schema as JsonConverter writes it
/// (io.debezium.connector.postgresql.Source, version 1).
const SOURCE_SCHEMA: &str = concat!(
    r#"{"type":"struct","fields":["#,
    r#"{"type":"string","optional":false,"field":"version"},"#,
    r#"{"type":"string","optional":false,"field":"connector"},"#,
    r#"{"type":"string","optional":false,"field":"name"},"#,
    r#"{"type":"int64","optional":false,"field":"ts_ms"},"#,
    r#"{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,"#,
    r#""parameters":{"allowed":"true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},"#,
    r#""default":"false","field":"snapshot"},"#,
    r#"{"type":"string","optional":false,"field":"db"},"#,
    r#"{"type":"string","optional":true,"field":"sequence"},"#,
    r#"{"type":"int64","optional":true,"field":"ts_us"},"#,
    r#"{"type":"int64","optional":true,"field":"ts_ns"},"#,
    r#"{"type":"string","optional":false,"field":"schema"},"#,
    r#"{"type":"string","optional":false,"field":"table"},"#,
    r#"{"type":"int64","optional":true,"field":"txId"},"#,
    r#"{"type":"int64","optional":true,"field":"lsn"},"#,
    r#"{"type":"int64","optional":true,"field":"xmin"},"#,
    r#"{"type":"string","optional":true,"field":"origin"},"#,
    r#"{"type":"int64","optional":true,"field":"origin_lsn"}],"#,
    r#""optional":false,"name":"io.debezium.connector.postgresql.Source","version":1}"#
);

/// TransactionMonitor.TRANSACTION_BLOCK_SCHEMA (`event.block`): walrelay,
/// like a connector without provide.transaction.metadata, writes it null.
const TRANSACTION_SCHEMA: &str = concat!(
    r#"{"type":"struct","fields":["#,
    r#"{"type":"string","optional":false,"field":"id"},"#,
    r#"{"type":"int64","optional":false,"field":"total_order"},"#,
    r#"{"type":"int64","optional":false,"field":"data_collection_order"}],"#,
    r#""optional":true,"name":"event.block","version":1}"#
);

/// The transaction block's fields, for their (null) extension attributes.
const TRANSACTION_FIELDS: [&str; 3] = ["id", "total_order", "data_collection_order"];

impl SourceBlock<'_> {
    fn fields(&self) -> [(&'static str, Value); 16] {
        let c = self.change;
        let lsn = |l: Option<Lsn>| l.map_or(Value::Null, |l| Value::Int(l.0 as i64));
        // PostgresOffsetContext: `[lastCommitLsn, lsn]` as a JSON array of
        // strings, each null when unknown.
        let quoted = |l: Option<Lsn>| l.map_or("null".to_string(), |l| format!("\"{}\"", l.0));
        let sequence = format!("[{},{}]", quoted(c.last_commit), quoted(c.lsn));
        [
            ("version", Value::Str(DEBEZIUM_VERSION.into())),
            ("connector", Value::Str("postgresql".into())),
            ("name", Value::Str(self.server.into())),
            ("ts_ms", Value::Int(c.commit_time_us.div_euclid(1000))),
            (
                "snapshot",
                Value::Str(if c.read { "true" } else { "false" }.into()),
            ),
            ("db", Value::Str(self.database.into())),
            ("sequence", Value::Str(sequence)),
            ("ts_us", Value::Int(c.commit_time_us)),
            ("ts_ns", Value::Int(c.commit_time_us.saturating_mul(1000))),
            ("schema", Value::Str(self.schema.into())),
            ("table", Value::Str(self.table.into())),
            ("txId", c.xid.map_or(Value::Null, |x| Value::Int(x.into()))),
            ("lsn", lsn(c.lsn)),
            ("xmin", Value::Null),
            ("origin", Value::Null),
            ("origin_lsn", Value::Null),
        ]
    }

    /// The block as a JSON object (`source` of a change event).
    fn json(&self) -> String {
        let mut out = String::from("{");
        for (i, (name, value)) in self.fields().into_iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&json_string(name));
            out.push(':');
            match value {
                Value::Str(s) => out.push_str(&json_string(&s)),
                Value::Int(n) => out.push_str(&n.to_string()),
                Value::Null => out.push_str("null"),
            }
        }
        out.push('}');
        out
    }

    /// The `source`, `op` and `transaction` headers HeaderFrom$Value copies
    /// from the change event, in `format` (JsonConverter as the worker's
    /// header.converter; the caller refuses SimpleHeaderConverter's).
    pub fn headers(&self, format: Format) -> [crate::sink::Header; 3] {
        use std::borrow::Cow;
        let op = json_string(self.change.op());
        [
            (
                Cow::Borrowed("source"),
                format.header(None, || self.json(), SOURCE_SCHEMA),
            ),
            (
                Cow::Borrowed("op"),
                format.header(None, || op, super::format::STRING_SCHEMA),
            ),
            (
                Cow::Borrowed("transaction"),
                format.header(None, || "null".into(), TRANSACTION_SCHEMA),
            ),
        ]
    }

    /// The CloudEvent in JSON: `id` and `type` from the event's headers,
    /// `data` the value the router made, as the data converter writes it.
    pub fn cloud_event(
        &self,
        config: CloudEventsConfig,
        id: &str,
        kind: &str,
        data: &str,
    ) -> Result<String, String> {
        let c = self.change;
        // RFC 3339 writes four-digit years: a commit time past 9999 (a
        // server clock gone wrong) has no `time`.
        const YEAR_10000_US: i64 = 253_402_300_800_000_000;
        if !(0..YEAR_10000_US).contains(&c.commit_time_us) {
            return Err(format!(
                "the commit time ({} µs since 1970) is outside the years 1970 to 9999; check the \
                 database server's clock",
                c.commit_time_us
            ));
        }
        let time = humantime::format_rfc3339_millis(
            std::time::UNIX_EPOCH + std::time::Duration::from_micros(c.commit_time_us as u64),
        );
        let mut out = String::with_capacity(data.len() + 1024);
        let field = |out: &mut String, name: &str, value: &str| {
            out.push_str(&json_string(name));
            out.push(':');
            out.push_str(value);
            out.push(',');
        };
        out.push('{');
        field(&mut out, "id", &json_string(id));
        let source = format!("/debezium/postgresql/{}", self.server);
        field(&mut out, "source", &json_string(&source));
        field(&mut out, "specversion", "\"1.0\"");
        field(&mut out, "type", &json_string(kind));
        field(&mut out, "time", &json_string(&time.to_string()));
        field(&mut out, "datacontenttype", "\"application/json\"");
        if config.extension_attributes {
            field(&mut out, "iodebeziumop", &json_string(c.op()));
            for (name, value) in self.fields() {
                let value = match value {
                    Value::Str(s) => json_string(&s),
                    // ceValueFromStruct: an int64 becomes its decimal string.
                    Value::Int(n) => json_string(&n.to_string()),
                    Value::Null => "null".into(),
                };
                field(&mut out, &extension_name(name), &value);
            }
            for name in TRANSACTION_FIELDS {
                field(&mut out, &extension_name(&format!("tx{name}")), "null");
            }
        }
        out.push_str("\"data\":");
        out.push_str(data);
        out.push('}');
        Ok(out)
    }
}

/// CloudEventsConverter.adjustExtensionName: `iodebezium` and the name's
/// ASCII letters and digits.
fn extension_name(name: &str) -> String {
    let kept = name.chars().filter(|c| c.is_ascii_alphanumeric());
    "iodebezium".chars().chain(kept).collect()
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The first row Debezium's worker published in the oracle's run.
    pub const STREAMED: Change = Change {
        commit_time_us: 1_796_263_510_253_520,
        xid: Some(727),
        lsn: Some(Lsn(22_189_288)),
        last_commit: None,
        read: false,
    };

    fn change() -> Change {
        STREAMED
    }

    fn block(change: &Change) -> SourceBlock<'_> {
        SourceBlock {
            server: "dbz",
            database: "postgres",
            schema: "public",
            table: "outbox",
            change,
        }
    }

    #[test]
    fn extension_names_keep_only_letters_and_digits() {
        // CloudEventsConverter.adjustExtensionName and isValidExtensionNameCharacter.
        assert_eq!(extension_name("ts_ms"), "iodebeziumtsms");
        assert_eq!(extension_name("txId"), "iodebeziumtxId");
        assert_eq!(
            extension_name("txdata_collection_order"),
            "iodebeziumtxdatacollectionorder"
        );
    }

    #[test]
    fn the_event_has_debeziums_attributes_in_debeziums_order() {
        // AbstractCloudEventsConverterTest
        // .shouldConvertToCloudEventsInJsonWithMetadataAndIdAndTypeInHeadersAfterOutboxEventRouter
        // inserts this row and checks id, source "/debezium/postgresql/<server>",
        // specversion "1.0", type "UserCreated", datacontenttype
        // "application/json", no dataschema and no traceparent; the order and
        // the int64-as-string attributes are convertToCloudEventsFormat's.
        let change = change();
        let event = block(&change)
            .cloud_event(
                CloudEventsConfig {
                    data_with_schema: true,
                    extension_attributes: true,
                },
                "59a42efd-b015-44a9-9dde-cb36d9002425",
                "UserCreated",
                "{}",
            )
            .unwrap();
        let json: serde_json::Value = serde_json::from_str(&event).unwrap();
        let keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(json["id"], "59a42efd-b015-44a9-9dde-cb36d9002425");
        assert_eq!(json["source"], "/debezium/postgresql/dbz");
        assert_eq!(json["specversion"], "1.0");
        assert_eq!(json["type"], "UserCreated");
        assert_eq!(json["time"], "2026-12-03T02:05:10.253Z");
        assert_eq!(json["iodebeziumtxId"], "727");
        assert_eq!(json["iodebeziumsequence"], "[null,\"22189288\"]");
        assert!(json["iodebeziumtxtotalorder"].is_null());
        assert!(event.starts_with(r#"{"id":"#));
        assert!(event.ends_with(r#","data":{}}"#));
        assert_eq!(keys.len(), 6 + 1 + 16 + 3 + 1);
    }

    #[test]
    fn without_extension_attributes_the_event_has_only_the_required_ones() {
        let change = change();
        let event = block(&change)
            .cloud_event(
                CloudEventsConfig {
                    data_with_schema: false,
                    extension_attributes: false,
                },
                "i",
                "t",
                "{\"a\":1}",
            )
            .unwrap();
        assert_eq!(
            event,
            r#"{"id":"i","source":"/debezium/postgresql/dbz","specversion":"1.0","type":"t","time":"2026-12-03T02:05:10.253Z","datacontenttype":"application/json","data":{"a":1}}"#
        );
    }
}

#[cfg(test)]
mod time_tests {
    use super::*;

    #[test]
    fn a_commit_time_rfc_3339_cannot_write_is_refused_not_a_panic() {
        let change = Change {
            commit_time_us: i64::MAX,
            ..tests::STREAMED
        };
        let block = SourceBlock {
            server: "s",
            database: "d",
            schema: "public",
            table: "outbox",
            change: &change,
        };
        let config = CloudEventsConfig {
            data_with_schema: true,
            extension_attributes: true,
        };
        let err = block.cloud_event(config, "i", "t", "{}").unwrap_err();
        assert!(err.contains("server's clock"), "{err}");
    }
}
