//! Formats that live in a schema registry (`--key-format`/`--value-format`
//! `avro`, `json-schema` or `protobuf`): what Confluent's `AvroConverter`,
//! `JsonSchemaConverter` and `ProtobufConverter` write after Debezium's
//! outbox router, in the Confluent wire format (a zero magic byte, the
//! schema's id as a big-endian i32, then the Avro binary datum, the JSON
//! text, or Protobuf's message indexes and the message's binary).
//!
//! The seam: the mapping writes the record as JsonConverter with
//! schemas.enable=true would (`outbox::schema`), the Connect schema and
//! value walrelay already derives; this module reads that document back
//! (`connect_schema`), converts the schema as `AvroData` (`avro`),
//! `JsonSchemaData` (`json_schema`) or `ProtobufData` (`protobuf`) does,
//! registers it under the subject the strategy names (`client`), and
//! encodes the value. The formats share the client, the subject strategies
//! and the id cache.

pub mod avro;
pub mod client;
pub mod connect_schema;
pub mod json_schema;
pub mod login;
pub mod names;
pub mod protobuf;
pub mod trouble;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::error::Error;
use crate::metrics::Metrics;
use crate::outbox::format::Format;
use crate::outbox::mapping::OutboxEvent;
use client::{Auth, Client};
use connect_schema::Connect;
use names::NameAdjustment;
use trouble::Trouble;

/// How a subject is named (Confluent's `key.subject.name.strategy` /
/// `value.subject.name.strategy`, io.confluent.kafka.serializers.subject).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum SubjectStrategy {
    /// TopicNameStrategy: `<topic>-key` / `<topic>-value`.
    #[default]
    #[value(name = "topic")]
    Topic,
    /// RecordNameStrategy: the record's full name.
    #[value(name = "record")]
    Record,
    /// TopicRecordNameStrategy: `<topic>-<record full name>`.
    #[value(name = "topic-record")]
    TopicRecord,
}

/// The registry settings, from the `--schema-registry-*` flags.
#[derive(Debug, Clone)]
pub struct RegistrySettings {
    pub url: String,
    pub auth: Auth,
    pub ca_file: Option<String>,
    pub strategy: SubjectStrategy,
    /// `auto.register.schemas` (true by default, as Confluent's).
    pub auto_register: bool,
    /// `use.latest.version`: with auto-register off, write under the
    /// subject's latest version instead of looking this schema up.
    pub use_latest_version: bool,
    pub names: NameAdjustment,
}

/// Which side of the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Key,
    Value,
}

/// A format whose schemas live in the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Confluent's AvroConverter.
    Avro,
    /// Confluent's JsonSchemaConverter.
    JsonSchema,
    /// Confluent's ProtobufConverter.
    Protobuf,
}

impl Encoding {
    /// The registry format `--key-format`/`--value-format` names, if any.
    pub fn of(format: Format) -> Option<Self> {
        match format {
            Format::Avro => Some(Encoding::Avro),
            Format::JsonSchema => Some(Encoding::JsonSchema),
            Format::Protobuf => Some(Encoding::Protobuf),
            _ => None,
        }
    }

    /// The registry's `schemaType`: none for Avro, its default.
    fn schema_type(self) -> Option<&'static str> {
        match self {
            Encoding::Avro => None,
            Encoding::JsonSchema => Some("JSON"),
            Encoding::Protobuf => Some("PROTOBUF"),
        }
    }

    /// The format's name in `--key-format`/`--value-format`.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Avro => "avro",
            Encoding::JsonSchema => "json-schema",
            Encoding::Protobuf => "protobuf",
        }
    }

    fn index(self) -> usize {
        match self {
            Encoding::Avro => 0,
            Encoding::JsonSchema => 1,
            Encoding::Protobuf => 2,
        }
    }
}

/// What walrelay would register for a record's side (`walrelay check`).
#[derive(Debug)]
pub struct Planned {
    pub subject: String,
    pub schema: String,
    /// The registry's schemaType; None for Avro.
    pub schema_type: Option<&'static str>,
}

/// Why an event's bytes could not be made.
#[derive(Debug)]
pub enum Unwritten {
    /// The event itself cannot be written (an incompatible schema, a name
    /// Avro refuses): the poison policy decides, with this reason.
    Poison(String),
    /// The registry cannot be used now or at all: transient errors hold
    /// the events (the session restarts from the confirmed position),
    /// permanent ones stop walrelay.
    Stop(Error),
}

/// A Connect schema ready to write: its registry text and how to encode.
struct Compiled {
    connect: Connect,
    encoding: Encoding,
    /// The Avro or JSON Schema text that is registered.
    text: String,
    /// The name RecordNameStrategy uses; a JSON Schema without a title
    /// has none.
    record_name: Option<String>,
    /// Protobuf's message indexes, written after the id (empty otherwise).
    indexes: Vec<u8>,
    /// Its id under each subject it was written to.
    ids: Mutex<HashMap<String, i32>>,
}

/// Writes records in the Confluent wire format, with one registry request
/// per new (subject, schema) and none per event.
pub struct Serializer {
    client: Client,
    settings: RegistrySettings,
    /// By the JsonConverter schema text, one map per `Encoding::index`.
    compiled: [Mutex<HashMap<String, Arc<Compiled>>>; 3],
    /// With use.latest.version: each subject's latest id and schema text.
    latest: Mutex<HashMap<String, (i32, String)>>,
}

impl std::fmt::Debug for Serializer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serializer")
            .field("client", &self.client)
            .finish()
    }
}

impl Serializer {
    pub fn new(settings: RegistrySettings) -> Result<Self, String> {
        let client = Client::new(&settings.url, &settings.auth, settings.ca_file.as_deref())?;
        Ok(Serializer {
            client,
            settings,
            compiled: Default::default(),
            latest: Mutex::new(HashMap::new()),
        })
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Whether records are written under each subject's latest id
    /// (`--schema-registry-use-latest-version`).
    pub fn uses_latest_version(&self) -> bool {
        !self.settings.auto_register && self.settings.use_latest_version
    }

    /// The wire-format bytes of one side of a record, from the document
    /// the mapping wrote (`{"schema":…,"payload":…}`). A null payload
    /// stays a null (the converters write no bytes for it).
    pub async fn encode(
        &self,
        metrics: &Metrics,
        topic: &str,
        side: Side,
        encoding: Encoding,
        document: &[u8],
    ) -> Result<Option<Bytes>, Unwritten> {
        let (compiled, payload, payload_text) = self.read(document, encoding)?;
        if payload.is_null() {
            return Ok(None);
        }
        let subject = self.subject(topic, side, &compiled)?;
        let id = self.id(metrics, &subject, &compiled).await?;
        let mut out = Vec::with_capacity(document.len());
        out.push(0);
        out.extend_from_slice(&id.to_be_bytes());
        let refused = |e: String| Unwritten::Poison(format!("{}: {e}", what(side, encoding)));
        match encoding {
            Encoding::Avro => {
                avro::encode(&compiled.connect, &payload, &mut out).map_err(refused)?
            }
            Encoding::JsonSchema => match json_schema::value(&compiled.connect, &payload) {
                Ok(None) => out.extend_from_slice(payload_text.as_bytes()),
                Ok(Some(rewritten)) => out.extend_from_slice(rewritten.to_string().as_bytes()),
                Err(e) => return Err(refused(e)),
            },
            Encoding::Protobuf => {
                out.extend_from_slice(&compiled.indexes);
                protobuf::encode(&compiled.connect, &payload, &mut out).map_err(refused)?
            }
        }
        Ok(Some(Bytes::from(out)))
    }

    /// The subject and schema walrelay would register for a document
    /// (`walrelay check`'s dry run).
    pub fn plan(
        &self,
        topic: &str,
        side: Side,
        encoding: Encoding,
        document: &[u8],
    ) -> Result<Planned, Unwritten> {
        let (compiled, _, _) = self.read(document, encoding)?;
        Ok(Planned {
            subject: self.subject(topic, side, &compiled)?,
            schema: compiled.text.clone(),
            schema_type: encoding.schema_type(),
        })
    }

    /// The event with its key and value (in the registry format each
    /// names, if any) in the wire format; on a refusal, the event as it
    /// came, for the poison policy's dead-letter copy.
    pub async fn encode_event(
        &self,
        metrics: &Metrics,
        topic: &str,
        mut event: OutboxEvent,
        key: Option<Encoding>,
        value: Option<Encoding>,
    ) -> Result<OutboxEvent, (OutboxEvent, Unwritten)> {
        let key = match (&event.key, key) {
            (Some(document), Some(encoding)) => {
                self.encode(metrics, topic, Side::Key, encoding, document)
                    .await
            }
            _ => Ok(event.key.clone()),
        };
        let key = match key {
            Ok(key) => key,
            Err(refusal) => return Err((event, refusal)),
        };
        let value = match (&event.payload, value) {
            (Some(document), Some(encoding)) => {
                self.encode(metrics, topic, Side::Value, encoding, document)
                    .await
            }
            _ => Ok(event.payload.clone()),
        };
        match value {
            Ok(value) => {
                event.key = key;
                event.payload = value;
                Ok(event)
            }
            Err(refusal) => Err((event, refusal)),
        }
    }

    /// The document's compiled schema (cached by its text), its payload
    /// and the payload's text as the mapping wrote it.
    fn read<'d>(
        &self,
        document: &'d [u8],
        encoding: Encoding,
    ) -> Result<(Arc<Compiled>, Value, &'d str), Unwritten> {
        let poison =
            |why: String| Unwritten::Poison(format!("the {} format: {why}", encoding.name()));
        let parts: HashMap<&str, &RawValue> =
            serde_json::from_slice(document).map_err(|e| poison(e.to_string()))?;
        let schema = parts
            .get("schema")
            .map(|raw| raw.get())
            .ok_or_else(|| poison("the record has no Connect schema".into()))?;
        let (payload, payload_text): (Value, &str) = match parts.get("payload") {
            Some(raw) => (
                serde_json::from_str(raw.get()).map_err(|e| poison(e.to_string()))?,
                raw.get(),
            ),
            None => (Value::Null, "null"),
        };
        let cache = &self.compiled[encoding.index()];
        if let Some(hit) = cache.lock().expect("not poisoned").get(schema) {
            return Ok((hit.clone(), payload, payload_text));
        }
        if schema == "null" {
            return Err(poison(
                "the payload has no schema (a top-level empty array), which the converter \
                 cannot write"
                    .into(),
            ));
        }
        let connect = Connect::parse(schema).map_err(poison)?;
        let (text, record_name, indexes) = match encoding {
            Encoding::Avro => {
                let avro = avro::schema_text(&connect, self.settings.names).map_err(poison)?;
                let name = avro::record_name(&connect, self.settings.names)
                    .map_err(poison)?
                    .unwrap_or_else(|| avro_type_name(&avro));
                (avro, Some(name), Vec::new())
            }
            Encoding::JsonSchema => (
                json_schema::schema_text(&connect),
                json_schema::record_name(&connect),
                Vec::new(),
            ),
            Encoding::Protobuf => {
                let file = protobuf::schema(&connect, self.settings.names).map_err(poison)?;
                (file.text, Some(file.message), file.indexes)
            }
        };
        let compiled = Arc::new(Compiled {
            connect,
            encoding,
            text,
            record_name,
            indexes,
            ids: Mutex::new(HashMap::new()),
        });
        cache
            .lock()
            .expect("not poisoned")
            .insert(schema.to_string(), compiled.clone());
        Ok((compiled, payload, payload_text))
    }

    fn subject(&self, topic: &str, side: Side, compiled: &Compiled) -> Result<String, Unwritten> {
        let suffix = match side {
            Side::Key => "key",
            Side::Value => "value",
        };
        let record = || {
            compiled.record_name.as_deref().ok_or_else(|| {
                Unwritten::Poison(format!(
                    "{}: the {suffix}'s schema has no name (a JSON Schema title) for \
                     --schema-registry-subject-strategy {:?} to name its subject by; use topic",
                    what(side, compiled.encoding),
                    self.settings.strategy
                ))
            })
        };
        Ok(match self.settings.strategy {
            SubjectStrategy::Topic => format!("{topic}-{suffix}"),
            SubjectStrategy::Record => record()?.to_string(),
            SubjectStrategy::TopicRecord => format!("{topic}-{}", record()?),
        })
    }

    /// The schema's id under `subject`: cached, or asked once.
    async fn id(
        &self,
        metrics: &Metrics,
        subject: &str,
        compiled: &Compiled,
    ) -> Result<i32, Unwritten> {
        if let Some(id) = compiled.ids.lock().expect("not poisoned").get(subject) {
            return Ok(*id);
        }
        let (text, schema_type) = (&compiled.text, compiled.encoding.schema_type());
        let answer = if self.settings.auto_register {
            self.client.register(subject, text, schema_type).await
        } else if self.settings.use_latest_version {
            self.latest_of(subject, compiled).await
        } else {
            self.client.lookup(subject, text, schema_type).await
        };
        let reachable = !matches!(answer, Err(Trouble::Unreachable(_)));
        metrics.set_schema_registry_reachable(reachable);
        let id = answer.map_err(|trouble| self.refusal(subject, trouble))?;
        compiled
            .ids
            .lock()
            .expect("not poisoned")
            .insert(subject.to_string(), id);
        Ok(id)
    }

    /// use.latest.version: the subject's latest id, if the latest schema
    /// is walrelay's own up to what leaves the bytes and their meaning
    /// alone. walrelay writes its own schema's bytes (Confluent's Avro
    /// serializer re-encodes the datum with the latest schema instead), so
    /// under another schema's id they would be read wrong, without a word.
    async fn latest_of(&self, subject: &str, compiled: &Compiled) -> Result<i32, Trouble> {
        let cached = self
            .latest
            .lock()
            .expect("not poisoned")
            .get(subject)
            .cloned();
        let (id, latest) = match cached {
            Some(hit) => hit,
            None => {
                let answer = self.client.latest(subject).await?;
                self.latest
                    .lock()
                    .expect("not poisoned")
                    .insert(subject.to_string(), answer.clone());
                answer
            }
        };
        if same_bytes(compiled.encoding, &compiled.text, &latest) {
            return Ok(id);
        }
        Err(Trouble::NotLatest(format!(
            "--schema-registry-use-latest-version: the latest version of subject {subject:?} (id {id}) is \
             not the schema walrelay writes by (`walrelay check` shows it); walrelay writes \
             its own schema's bytes, which another schema would read wrong: register that \
             schema as the latest version, or drop --schema-registry-use-latest-version"
        )))
    }

    fn refusal(&self, subject: &str, trouble: Trouble) -> Unwritten {
        match trouble {
            Trouble::Unreachable(m) => Unwritten::Stop(Error::transient(format!(
                "{m}; the events wait in the slot and walrelay tries again with backoff"
            ))),
            Trouble::Refused(m) => Unwritten::Stop(
                Error::permanent(format!("{m}; {}", client::CREDENTIALS_FIX))
                    .with_fix(client::CREDENTIALS_FIX),
            ),
            Trouble::NotARegistry(m) => Unwritten::Stop(Error::refusal(m, client::URL_FIX)),
            Trouble::Incompatible(m) => Unwritten::Poison(format!(
                "the schema registry refuses the schema for subject {subject:?} as \
                 incompatible: {m}"
            )),
            Trouble::NotFound(m) if !self.settings.auto_register => Unwritten::Poison(format!(
                "subject {subject:?} has no such schema and auto-registration is off \
                 (--schema-registry-auto-register false): register it, or turn \
                 auto-registration on: {m}"
            )),
            Trouble::NotLatest(m) => Unwritten::Poison(m),
            Trouble::NotFound(m) | Trouble::Rejected(m) => Unwritten::Poison(format!(
                "the schema registry refuses subject {subject:?}: {m}"
            )),
        }
    }
}

/// Whether bytes written by `ours` read the same under `latest`: Avro's
/// canonical forms agree (with the logical types kept); a Protobuf file is
/// the same text but for white space; JSON Schema's bytes are JSON text,
/// which a reader validates against the latest schema itself.
pub fn same_bytes(encoding: Encoding, ours: &str, latest: &str) -> bool {
    match encoding {
        Encoding::Avro => match (avro::canonical(ours), avro::canonical(latest)) {
            (Some(ours), Some(latest)) => ours == latest,
            _ => false,
        },
        Encoding::Protobuf => ours.split_whitespace().eq(latest.split_whitespace()),
        Encoding::JsonSchema => true,
    }
}

/// The flag that asked for this side's format, for messages.
fn what(side: Side, encoding: Encoding) -> String {
    match side {
        Side::Key => format!("--key-format {}", encoding.name()),
        Side::Value => format!("--value-format {}", encoding.name()),
    }
}

/// The name Avro gives a schema that is no record (`"string"`, `"bytes"`,
/// or `union` for an optional one), as AvroSchema.name() does.
fn avro_type_name(avro: &str) -> String {
    match serde_json::from_str::<Value>(avro) {
        Ok(Value::String(t)) => t,
        Ok(Value::Object(o)) => o["type"].as_str().unwrap_or("record").to_string(),
        Ok(Value::Array(_)) => "union".into(),
        _ => "record".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serializer(strategy: SubjectStrategy) -> Serializer {
        Serializer::new(RegistrySettings {
            url: "http://127.0.0.1:1/".into(),
            auth: Auth::None,
            ca_file: None,
            strategy,
            auto_register: true,
            use_latest_version: false,
            names: NameAdjustment::None,
        })
        .unwrap()
    }

    #[test]
    fn subjects_are_named_as_confluents_three_strategies_name_them() {
        // io.confluent.kafka.serializers.subject: TopicNameStrategy
        // "<topic>-key|value", RecordNameStrategy the record's full name,
        // TopicRecordNameStrategy "<topic>-<full name>".
        let document = br#"{"schema":{"type":"struct","fields":[],"optional":false,"name":"p.public.outbox.order.Value"},"payload":{}}"#;
        let subject = |strategy| {
            serializer(strategy)
                .plan("outbox.event.order", Side::Value, Encoding::Avro, document)
                .unwrap()
                .subject
        };
        assert_eq!(subject(SubjectStrategy::Topic), "outbox.event.order-value");
        assert_eq!(
            subject(SubjectStrategy::Record),
            "p.public.outbox.order.Value"
        );
        assert_eq!(
            subject(SubjectStrategy::TopicRecord),
            "outbox.event.order-p.public.outbox.order.Value"
        );
        let key = br#"{"schema":{"type":"string","optional":false},"payload":"k"}"#;
        let planned = serializer(SubjectStrategy::Topic)
            .plan("t", Side::Key, Encoding::Avro, key)
            .unwrap();
        assert_eq!(
            (planned.subject.as_str(), planned.schema.as_str()),
            ("t-key", "\"string\"")
        );
    }

    #[test]
    fn the_latest_version_is_taken_only_when_it_writes_the_same_bytes() {
        // Avro: the canonical forms (avro/canonical.rs); Protobuf: the same
        // text but for white space; JSON Schema: JSON text either way.
        let connect =
            r#"{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Json"}"#;
        assert!(same_bytes(Encoding::Avro, connect, r#""string""#));
        assert!(!same_bytes(
            Encoding::Avro,
            connect,
            r#"["null",{"type":"string"}]"#
        ));
        let proto = "syntax = \"proto3\";\n\nmessage V {\n  string a = 1;\n}\n";
        assert!(same_bytes(
            Encoding::Protobuf,
            proto,
            "syntax = \"proto3\";\nmessage V {\n    string a = 1;\n}"
        ));
        assert!(!same_bytes(
            Encoding::Protobuf,
            proto,
            "syntax = \"proto3\";\nmessage V {\n  int64 a = 1;\n}"
        ));
        assert!(same_bytes(
            Encoding::JsonSchema,
            "{}",
            r#"{"type":"object"}"#
        ));
    }

    #[test]
    fn a_json_schema_is_registered_as_json_under_the_subject_its_title_names() {
        // JsonSchema.name() is the schema's title (confluentinc/schema-registry
        // json-schema-provider/.../JsonSchema.java), and its schemaType "JSON".
        let document = br#"{"schema":{"type":"struct","fields":[],"optional":false,"name":"p.public.outbox.order.Value"},"payload":{}}"#;
        let planned = serializer(SubjectStrategy::Record)
            .plan("t", Side::Value, Encoding::JsonSchema, document)
            .unwrap();
        assert_eq!(planned.subject, "p.public.outbox.order.Value");
        assert_eq!(planned.schema_type, Some("JSON"));
        let key = br#"{"schema":{"type":"string","optional":false},"payload":"k"}"#;
        let Err(Unwritten::Poison(why)) =
            serializer(SubjectStrategy::Record).plan("t", Side::Key, Encoding::JsonSchema, key)
        else {
            panic!("a string key has no title to name a subject by");
        };
        assert!(why.contains("--key-format json-schema"), "{why}");
    }
}
