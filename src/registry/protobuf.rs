//! A Connect schema as Confluent's `ProtobufData.fromConnectSchema` turns
//! it into a proto3 file (`--key-format`/`--value-format protobuf`), and the
//! message indexes that name the record's message in it.
//!
//! Source: confluentinc/schema-registry protobuf-converter/.../
//! ProtobufData.java (`fromConnectSchema`, `descriptorFromConnectSchema`,
//! `messageDefinitionFromConnectSchema`, `fieldDefinitionFromConnectSchema`,
//! `dataTypeFromConnectSchema`) with ProtobufDataConfig's defaults (no
//! wrappers or `optional` for nullable fields, names not scrubbed), and the
//! text as protobuf-provider/.../ProtobufSchemaUtils.toString writes a
//! ProtobufSchema's canonical string:
//! - a struct at the root is a message named after the schema's last name
//!   part, in the package of the parts before it (`ConnectDefault1` with no
//!   name); any other root is one of google/protobuf/wrappers.proto's
//!   messages, and the whole of that file is the schema;
//! - fields are numbered from 1 in order; int8 and int16 are `int32` with a
//!   `connect.type` parameter, int64 `int64`, float32 `float`, float64
//!   `double`, boolean `bool`; a Decimal is `confluent.type.Decimal`
//!   (imported from confluent/type/decimal.proto) with its scale and
//!   precision as parameters; parameters are `(confluent.field_meta)`
//!   options, whose file (confluent/meta.proto) is not imported, as
//!   ProtobufData leaves it and registries resolve it (a schema Debezium's
//!   converter registered, quoted in redpanda-data/console#1184, reads so;
//!   protoc wants the import added);
//! - an array is a `repeated` field of its items (an array of arrays is
//!   refused); a map a `repeated` field of a nested `<Name>Entry` message of
//!   `key` = 1 and `value` = 2;
//! - a nested struct is a nested message named after its schema's last name
//!   part (`ConnectDefaultN` when unnamed, with `Message` added when it
//!   equals the field's name), defined once per parent;
//! - docs, versions, defaults and other parameters are dropped, as proto3
//!   holds none of them.
//!
//! Known imports are not registered as references: the serializer's
//! `skip.known.types` is true by default, and registries know these files.

mod encode;

use super::connect_schema::{Connect, Kind};
use super::names::{self, NameAdjustment};

pub use encode::encode;

/// ProtobufData.DEFAULT_SCHEMA_NAME.
const DEFAULT_NAME: &str = "ConnectDefault";
const DECIMAL: &str = "org.apache.kafka.connect.data.Decimal";
const DECIMAL_TYPE: &str = "confluent.type.Decimal";
const DECIMAL_IMPORT: &str = "confluent/type/decimal.proto";

/// google/protobuf/wrappers.proto as ProtobufSchemaUtils.toString writes it
/// from the descriptor (protobuf's own file: options in toProtoFile's
/// order, comments gone). Its messages, in order, give the message index.
const WRAPPERS: &str = "syntax = \"proto3\";\n\
package google.protobuf;\n\
\n\
option java_package = \"com.google.protobuf\";\n\
option java_outer_classname = \"WrappersProto\";\n\
option java_multiple_files = true;\n\
option go_package = \"google.golang.org/protobuf/types/known/wrapperspb\";\n\
option cc_enable_arenas = true;\n\
option objc_class_prefix = \"GPB\";\n\
option csharp_namespace = \"Google.Protobuf.WellKnownTypes\";\n\
\n\
message DoubleValue {\n  double value = 1;\n}\n\
message FloatValue {\n  float value = 1;\n}\n\
message Int64Value {\n  int64 value = 1;\n}\n\
message UInt64Value {\n  uint64 value = 1;\n}\n\
message Int32Value {\n  int32 value = 1;\n}\n\
message UInt32Value {\n  uint32 value = 1;\n}\n\
message BoolValue {\n  bool value = 1;\n}\n\
message StringValue {\n  string value = 1;\n}\n\
message BytesValue {\n  bytes value = 1;\n}\n";

/// What is registered for a Connect schema, and how records name it.
#[derive(Debug, Clone, PartialEq)]
pub struct ProtoFile {
    /// The schema text (schemaType PROTOBUF).
    pub text: String,
    /// The record's message: its full name (ProtobufSchema.name(), which
    /// RecordNameStrategy uses) and its place in the file.
    pub message: String,
    /// The message indexes as the wire format writes them after the id.
    pub indexes: Vec<u8>,
}

/// The proto3 file ProtobufData makes of `schema`, or why it cannot.
pub fn schema(schema: &Connect, names: NameAdjustment) -> Result<ProtoFile, String> {
    if let Some(index) = wrapper_index(schema)? {
        return Ok(ProtoFile {
            text: WRAPPERS.to_string(),
            message: format!("google.protobuf.{}", WRAPPER_NAMES[index]),
            indexes: message_indexes(&[index]),
        });
    }
    let mut builder = Builder {
        names,
        default_index: 0,
        imports: Vec::new(),
    };
    let full = builder.full_name(schema.name.as_deref())?;
    let (package, name) = match full.rsplit_once('.') {
        Some((package, name)) => (Some(package), name),
        None => (None, full.as_str()),
    };
    for part in package.into_iter().flat_map(|p| p.split('.')).chain([name]) {
        identifier(part, "schema name", &full)?;
    }
    let message = builder.message(name, schema)?;
    let mut text = String::from("syntax = \"proto3\";\n");
    if let Some(package) = package {
        text.push_str(&format!("package {package};\n"));
    }
    if !builder.imports.is_empty() {
        text.push('\n');
        for import in &builder.imports {
            text.push_str(&format!("import \"{import}\";\n"));
        }
    }
    text.push('\n');
    text.push_str(&message.render());
    Ok(ProtoFile {
        text,
        message: full.clone(),
        indexes: message_indexes(&[0]),
    })
}

/// wrappers.proto's messages in their order: the index is the message's.
const WRAPPER_NAMES: [&str; 9] = [
    "DoubleValue",
    "FloatValue",
    "Int64Value",
    "UInt64Value",
    "Int32Value",
    "UInt32Value",
    "BoolValue",
    "StringValue",
    "BytesValue",
];

/// descriptorFromConnectSchema: the wrapper message a primitive root
/// becomes (its index in wrappers.proto), None for a struct.
fn wrapper_index(schema: &Connect) -> Result<Option<usize>, String> {
    Ok(Some(match &schema.kind {
        Kind::Struct(_) => return Ok(None),
        Kind::Float64 => 0,
        Kind::Float32 => 1,
        Kind::Int64 => 2,
        Kind::Int8 | Kind::Int16 | Kind::Int32 => 4,
        Kind::Boolean => 6,
        Kind::String => 7,
        Kind::Bytes if schema.name.as_deref() == Some(DECIMAL) => {
            // ProtobufData makes a BytesValue schema but a Decimal message
            // for the value, which no reader can decode.
            return Err("a Decimal at the root of the record, which Confluent's \
                        ProtobufConverter cannot write; place it in a struct"
                .into());
        }
        Kind::Bytes => 8,
        Kind::Array(_) | Kind::Map(..) => {
            let what = if matches!(schema.kind, Kind::Array(_)) {
                "array"
            } else {
                "map"
            };
            return Err(format!(
                "an {what} at the root of the record, which Protobuf cannot hold \
                 (\"Unsupported root schema\" in Confluent's ProtobufConverter)"
            ));
        }
    }))
}

/// MessageIndexes.toByteArray: the one index [0] as a single 0; otherwise
/// the count and each index as zig-zag varints.
fn message_indexes(indexes: &[usize]) -> Vec<u8> {
    if indexes == [0] {
        return vec![0];
    }
    let mut out = Vec::new();
    encode::put_zigzag(&mut out, indexes.len() as i64);
    for &i in indexes {
        encode::put_zigzag(&mut out, i as i64);
    }
    out
}

/// A proto identifier, as protobuf's DescriptorValidationException wants it.
fn identifier(part: &str, what: &str, within: &str) -> Result<(), String> {
    let mut chars = part.chars();
    let valid = match chars.next() {
        Some(first) => {
            (first == '_' || first.is_ascii_alphabetic())
                && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        }
        None => false,
    };
    if valid {
        return Ok(());
    }
    Err(format!(
        "the {what} {within:?} is no Protobuf name (\"{part}\" must be letters, digits and _, \
         not starting with a digit); set --schema-name-adjustment-mode avro, as Debezium's \
         schema.name.adjustment.mode=avro does, or rename it"
    ))
}

/// A message as ProtobufData's DynamicSchema builds it.
#[derive(Debug)]
struct Message {
    name: String,
    fields: Vec<Field>,
    nested: Vec<Message>,
}

#[derive(Debug)]
struct Field {
    repeated: bool,
    type_name: String,
    name: String,
    tag: usize,
    /// The Connect parameters ProtobufData keeps, as field meta.
    params: Vec<(&'static str, String)>,
}

/// FromConnectContext: the ConnectDefault counter and the imports.
struct Builder {
    names: NameAdjustment,
    default_index: u32,
    imports: Vec<&'static str>,
}

impl Builder {
    fn name_or_default(&mut self, name: Option<&str>) -> String {
        match name {
            Some(name) if !name.is_empty() => name.to_string(),
            _ => {
                self.default_index += 1;
                format!("{DEFAULT_NAME}{}", self.default_index)
            }
        }
    }

    /// getNameOrDefault, then the name as --schema-name-adjustment-mode
    /// leaves it (judged as Protobuf's under `none`, by `identifier`).
    fn full_name(&mut self, name: Option<&str>) -> Result<String, String> {
        let full = self.name_or_default(name);
        match self.names {
            NameAdjustment::Avro => names::adjust(&full, self.names),
            NameAdjustment::None => Ok(full),
        }
    }

    /// getUnqualifiedName: the last part of the name (or a default).
    fn unqualified(&mut self, name: Option<&str>) -> Result<String, String> {
        let full = self.full_name(name)?;
        let last = full.rsplit('.').next().unwrap_or_default().to_string();
        identifier(&last, "schema name", &full)?;
        Ok(last)
    }

    fn field_name(&self, name: &str) -> Result<String, String> {
        let name = match self.names {
            NameAdjustment::Avro => names::adjust(name, self.names)?.replace('.', "_"),
            NameAdjustment::None => name.to_string(),
        };
        identifier(&name, "field name", &name)?;
        Ok(name)
    }

    /// messageDefinitionFromConnectSchema.
    fn message(&mut self, name: &str, schema: &Connect) -> Result<Message, String> {
        let Kind::Struct(fields) = &schema.kind else {
            unreachable!("only a struct becomes a message")
        };
        let mut message = Message {
            name: name.to_string(),
            fields: Vec::new(),
            nested: Vec::new(),
        };
        for (i, (field_name, field)) in fields.iter().enumerate() {
            let field_name = self.field_name(field_name)?;
            let field = self.field(&mut message, field, field_name, i + 1)?;
            message.fields.push(field);
        }
        Ok(message)
    }

    /// fieldDefinitionFromConnectSchema: the field, and any message its
    /// type needs defined in `parent`.
    fn field(
        &mut self,
        parent: &mut Message,
        schema: &Connect,
        name: String,
        tag: usize,
    ) -> Result<Field, String> {
        let (repeated, schema) = match &schema.kind {
            Kind::Array(items) => {
                if matches!(items.kind, Kind::Array(_) | Kind::Map(..)) {
                    // "Array cannot be nested" in ProtobufData; an array of
                    // maps fails there when the value is written.
                    return Err(format!(
                        "the field {name:?} is an array of arrays or of maps, which \
                         Confluent's ProtobufConverter cannot write"
                    ));
                }
                (true, items.as_ref())
            }
            Kind::Map(..) => (true, schema),
            _ => (false, schema),
        };
        let mut params = Vec::new();
        let type_name = match &schema.kind {
            _ if schema.name.as_deref() == Some(DECIMAL) => {
                // Precision, then scale: the order in a schema Debezium's
                // ProtobufConverter registered (redpanda-data/console#1184).
                if let Some(precision) = schema.parameter("connect.decimal.precision") {
                    params.push(("precision", precision.to_string()));
                }
                if let Some(scale) = schema.parameter("scale") {
                    params.push(("scale", scale.to_string()));
                }
                if !self.imports.contains(&DECIMAL_IMPORT) {
                    self.imports.push(DECIMAL_IMPORT);
                }
                DECIMAL_TYPE.to_string()
            }
            Kind::Int8 | Kind::Int16 => {
                let connect = if schema.kind == Kind::Int8 {
                    "int8"
                } else {
                    "int16"
                };
                params.push(("connect.type", connect.to_string()));
                "int32".into()
            }
            Kind::Int32 => "int32".into(),
            Kind::Int64 => "int64".into(),
            Kind::Float32 => "float".into(),
            Kind::Float64 => "double".into(),
            Kind::Boolean => "bool".into(),
            Kind::String => "string".into(),
            Kind::Bytes => "bytes".into(),
            Kind::Array(_) => unreachable!("an array's items are no array here"),
            Kind::Map(keys, values) => {
                let entry = map_entry(&self.unqualified(schema.name.as_deref())?);
                // mapDefinitionFromConnectSchema: defined every time.
                let mut message = Message {
                    name: entry.clone(),
                    fields: Vec::new(),
                    nested: Vec::new(),
                };
                let key = self.field(&mut message, keys, "key".into(), 1)?;
                message.fields.push(key);
                let value = self.field(&mut message, values, "value".into(), 2)?;
                message.fields.push(value);
                if parent.nested.iter().any(|m| m.name == entry) {
                    return Err(format!(
                        "two maps in message {:?} are named {entry:?}, which Protobuf refuses",
                        parent.name
                    ));
                }
                parent.nested.push(message);
                entry
            }
            Kind::Struct(_) => {
                let mut type_name = self.unqualified(schema.name.as_deref())?;
                if type_name == name {
                    // A message type and a field cannot share a name.
                    type_name.push_str("Message");
                }
                if type_name == parent.name {
                    // FromConnectContext.contains takes this for the parent
                    // itself, so the value could not be written.
                    return Err(format!(
                        "the struct in field {name:?} has the name of the message that holds \
                         it ({type_name:?}), which Confluent's ProtobufConverter reads as a \
                         reference to that message"
                    ));
                }
                if !parent.nested.iter().any(|m| m.name == type_name) {
                    let message = self.message(&type_name, schema)?;
                    parent.nested.push(message);
                }
                type_name
            }
        };
        Ok(Field {
            repeated,
            type_name,
            name,
            tag,
            params,
        })
    }
}

/// ProtobufSchema.toMapEntry: a name with `_` in UpperCamel (Guava's
/// LOWER_UNDERSCORE to UPPER_CAMEL), then `Entry`.
fn map_entry(name: &str) -> String {
    let camel = if name.contains('_') {
        name.split('_')
            .map(|word| {
                let mut chars = word.chars();
                match chars.next() {
                    Some(first) => {
                        first.to_ascii_uppercase().to_string()
                            + &chars.as_str().to_ascii_lowercase()
                    }
                    None => String::new(),
                }
            })
            .collect()
    } else {
        name.to_string()
    };
    format!("{camel}Entry")
}

impl Message {
    /// ProtobufSchemaUtils.toString(MessageElement).
    fn render(&self) -> String {
        let mut out = format!("message {} {{", self.name);
        if !self.fields.is_empty() {
            out.push('\n');
            for field in &self.fields {
                indent(&mut out, &field.render());
            }
        }
        if !self.nested.is_empty() {
            out.push('\n');
            for message in &self.nested {
                indent(&mut out, &message.render());
            }
        }
        out.push_str("}\n");
        out
    }
}

impl Field {
    /// ProtobufSchemaUtils.toString(FieldElement), with the field meta as
    /// ProtobufSchema.toOption writes it (a precision or scale has its
    /// value first, "for backward compatibility").
    fn render(&self) -> String {
        let label = if self.repeated { "repeated " } else { "" };
        let mut out = format!("{label}{} {} = {}", self.type_name, self.name, self.tag);
        if !self.params.is_empty() {
            let last = self.params.len() - 1;
            let mut list = String::from("[\n");
            for (i, (key, value)) in self.params.iter().enumerate() {
                let entry = if matches!(*key, "precision" | "scale") {
                    format!("{{\n  value: \"{value}\",\n  key: \"{key}\"\n}}")
                } else {
                    format!("{{\n  key: \"{key}\",\n  value: \"{value}\"\n}}")
                };
                let comma = if i == last { "" } else { "," };
                indent(&mut list, &format!("{entry}{comma}"));
            }
            list.push(']');
            let mut option = String::from("(confluent.field_meta) = {\n");
            indent(&mut option, &format!("params: {list}"));
            option.push('}');
            out.push_str(&format!(" [{option}]"));
        }
        out.push_str(";\n");
        out
    }
}

/// appendIndented: each line of `text` with two more spaces.
fn indent(out: &mut String, text: &str) {
    for line in text.strip_suffix('\n').unwrap_or(text).split('\n') {
        out.push_str("  ");
        out.push_str(line);
        out.push('\n');
    }
}

#[cfg(test)]
mod tests;
