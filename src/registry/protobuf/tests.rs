//! Golden values from Confluent's sources (confluentinc/schema-registry:
//! protobuf-converter/src/test/.../ProtobufDataTest.java, and the text as
//! protobuf-provider/.../ProtobufSchemaUtils.toString writes it, seen in
//! core/src/test/.../rest/protobuf/RestApiTest.java) and from the
//! Protocol Buffers encoding guide (protobuf.dev/programming-guides/
//! encoding), each cited beside its test. Never from walrelay's own output.

use serde_json::json;

use super::*;

fn file(connect_json: &str) -> ProtoFile {
    schema(&Connect::parse(connect_json).unwrap(), NameAdjustment::None).unwrap()
}

fn refusal(connect_json: &str) -> String {
    schema(&Connect::parse(connect_json).unwrap(), NameAdjustment::None).unwrap_err()
}

fn bytes(connect_json: &str, value: serde_json::Value) -> Vec<u8> {
    let mut out = Vec::new();
    encode(&Connect::parse(connect_json).unwrap(), &value, &mut out).unwrap();
    out
}

fn field(connect: &str, name: &str) -> String {
    let open = connect.strip_suffix('}').expect("a schema object");
    format!("{open},\"field\":\"{name}\"}}")
}

fn record(fields: &[String]) -> String {
    format!(
        r#"{{"type":"struct","fields":[{}],"optional":false,"name":"p.public.outbox.order.Value"}}"#,
        fields.join(",")
    )
}

#[test]
fn a_primitive_root_is_its_wrapper_in_wrappers_proto() {
    // testFromConnectInt32 / testFromConnectString: the value parses as
    // Int32Value / StringValue, field `value` = 1. MessageIndexes: [7] is
    // the count then the index, zig-zag (confluent_kafka's _encode_varints
    // writes [7] as 02 0e).
    let string = file(r#"{"type":"string","optional":false}"#);
    assert_eq!(string.message, "google.protobuf.StringValue");
    assert_eq!(string.indexes, [0x02, 0x0e]);
    assert!(string
        .text
        .contains("message StringValue {\n  string value = 1;\n}\n"));
    assert!(string
        .text
        .starts_with("syntax = \"proto3\";\npackage google.protobuf;\n"));
    let int = file(r#"{"type":"int32","optional":false}"#);
    assert_eq!(
        (int.message.as_str(), int.indexes.as_slice()),
        ("google.protobuf.Int32Value", &[0x02, 0x08][..])
    );
    // testFromConnectInt16Struct: an int16 is an Int32Value too.
    assert_eq!(
        file(r#"{"type":"int16","optional":true}"#).message,
        "google.protobuf.Int32Value"
    );
    // Encoding guide: field 1 varint 15 is 08 0f; a string is 0a, its
    // length, its bytes.
    assert_eq!(
        bytes(r#"{"type":"int32","optional":false}"#, json!(15)),
        [0x08, 0x0f]
    );
    assert_eq!(
        bytes(r#"{"type":"string","optional":false}"#, json!("Hello")),
        b"\x0a\x05Hello"
    );
    // testFromConnectEmptyString: "" leaves no field; testFromConnectBooleanWithFalse
    // reads back false from no bytes.
    assert!(bytes(r#"{"type":"string","optional":false}"#, json!("")).is_empty());
    assert!(bytes(r#"{"type":"boolean","optional":false}"#, json!(false)).is_empty());
}

#[test]
fn a_struct_is_a_message_in_the_package_its_name_gives_and_the_text_is_confluents() {
    // ProtobufData.fromConnectSchema: splitName gives the package and the
    // message; dataTypeFromConnectSchema int16 is int32 with connect.type,
    // a Decimal confluent.type.Decimal (imported) with precision and scale;
    // testFromConnectNameCollision: a struct named as its field gets
    // "Message". The text: ProtobufSchemaUtils.toString (a blank line
    // before the imports, before the messages, and between a message's
    // fields and its nested messages), the field meta as RestApiTest's
    // `(confluent.field_meta) = {` block; ProtobufSchema.toOption writes a
    // precision or scale with its value first. A schema Debezium's
    // ProtobufConverter registered (quoted in redpanda-data/console#1184:
    // `int32 Register_Time = 5` with connect.type int16, a
    // `confluent.type.Decimal` with precision then scale, decimal.proto
    // imported and meta.proto not) reads the same way.
    let decimal = r#"{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"2","connect.decimal.precision":"10"}}"#;
    let address = r#"{"type":"struct","fields":[{"type":"string","optional":true,"field":"city"}],"optional":true,"name":"payload.address"}"#;
    let proto = file(&record(&[
        field(r#"{"type":"string","optional":false}"#, "id"),
        field(r#"{"type":"int16","optional":true}"#, "qty"),
        field(decimal, "amount"),
        field(
            r#"{"type":"array","items":{"type":"string","optional":true},"optional":true}"#,
            "tags",
        ),
        field(address, "address"),
    ]));
    let expected = "syntax = \"proto3\";\n\
package p.public.outbox.order;\n\
\n\
import \"confluent/type/decimal.proto\";\n\
\n\
message Value {\n\
\x20 string id = 1;\n\
\x20 int32 qty = 2 [(confluent.field_meta) = {\n\
\x20   params: [\n\
\x20     {\n\
\x20       key: \"connect.type\",\n\
\x20       value: \"int16\"\n\
\x20     }\n\
\x20   ]\n\
\x20 }];\n\
\x20 confluent.type.Decimal amount = 3 [(confluent.field_meta) = {\n\
\x20   params: [\n\
\x20     {\n\
\x20       value: \"10\",\n\
\x20       key: \"precision\"\n\
\x20     },\n\
\x20     {\n\
\x20       value: \"2\",\n\
\x20       key: \"scale\"\n\
\x20     }\n\
\x20   ]\n\
\x20 }];\n\
\x20 repeated string tags = 4;\n\
\x20 addressMessage address = 5;\n\
\n\
\x20 message addressMessage {\n\
\x20   string city = 1;\n\
\x20 }\n\
}\n";
    assert_eq!(proto.text, expected);
    // ProtobufSchema.name(): the message's full name, for RecordNameStrategy;
    // the first message of the file is written as the single index 0.
    assert_eq!(proto.message, "p.public.outbox.order.Value");
    assert_eq!(proto.indexes, [0]);
}

#[test]
fn unnamed_structs_and_maps_are_connect_defaults_numbered_in_order() {
    // testFromConnectComplex: the unnamed root is ConnectDefault1, and its
    // maps' entries ConnectDefault2Entry, 3, 4, each field `repeated`, an
    // int8 an int32.
    let proto = file(
        r#"{"type":"struct","fields":[
            {"type":"int8","optional":false,"field":"int8"},
            {"type":"map","keys":{"type":"string","optional":false},"values":{"type":"int32","optional":false},"optional":false,"field":"map"},
            {"type":"map","keys":{"type":"int32","optional":false},"values":{"type":"int32","optional":false},"optional":false,"field":"mapNonStringKeys"}
        ],"optional":false}"#,
    );
    assert_eq!(proto.message, "ConnectDefault1");
    assert!(proto
        .text
        .contains("message ConnectDefault1 {\n  int32 int8 = 1 ["));
    assert!(proto
        .text
        .contains("  repeated ConnectDefault2Entry map = 2;\n  repeated ConnectDefault3Entry mapNonStringKeys = 3;\n"));
    assert!(proto.text.contains(
        "  message ConnectDefault2Entry {\n    string key = 1;\n    int32 value = 2;\n  }\n"
    ));
    // ProtobufSchema.toMapEntry: a name with `_` in UpperCamel (Guava).
    assert_eq!(map_entry("order_lines"), "OrderLinesEntry");
    assert_eq!(map_entry("tags"), "tagsEntry");
    // testFromConnectComplex's values: the map {"field": 1} is one entry
    // message (key = 1, value = 2); int8 12 is 08 0c.
    let written = bytes(
        r#"{"type":"struct","fields":[
            {"type":"int8","optional":false,"field":"int8"},
            {"type":"map","keys":{"type":"string","optional":false},"values":{"type":"int32","optional":false},"optional":false,"field":"map"},
            {"type":"map","keys":{"type":"int32","optional":false},"values":{"type":"int32","optional":false},"optional":false,"field":"mapNonStringKeys"}
        ],"optional":false}"#,
        json!({"int8": 12, "map": {"field": 1}, "mapNonStringKeys": [[1, 1]]}),
    );
    assert_eq!(
        written,
        [
            &[0x08, 0x0c][..],
            &[0x12, 0x09, 0x0a, 0x05],
            b"field",
            &[0x10, 0x01],
            &[0x1a, 0x04, 0x08, 0x01, 0x10, 0x01],
        ]
        .concat()
    );
}

#[test]
fn values_follow_the_protobuf_encoding_guide() {
    // Encoding guide: a = 150 is 08 96 01; b = "testing" is 12 07 "testing";
    // c = Test1{a: 150} is 1a 03 08 96 01; repeated int32 f = 6 [3, 270,
    // 86942] is packed as 32 06 03 8e 02 9e a7 05; int32 -1 takes ten bytes
    // (sign-extended).
    let test1 = r#"{"type":"struct","fields":[{"type":"int32","optional":true,"field":"a"}],"optional":true,"name":"Test1"}"#;
    let schema = record(&[
        field(r#"{"type":"int32","optional":true}"#, "a"),
        field(r#"{"type":"string","optional":true}"#, "b"),
        field(test1, "c"),
        field(r#"{"type":"int32","optional":true}"#, "d"),
        field(r#"{"type":"boolean","optional":true}"#, "e"),
        field(
            r#"{"type":"array","items":{"type":"int32","optional":false},"optional":true}"#,
            "f",
        ),
    ]);
    assert_eq!(
        bytes(
            &schema,
            json!({"a": 150, "b": "testing", "c": {"a": 150}, "d": -1, "e": true, "f": [3, 270, 86942]})
        ),
        [
            &[0x08, 0x96, 0x01][..],
            b"\x12\x07testing",
            &[0x1a, 0x03, 0x08, 0x96, 0x01],
            &[0x20, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            &[0x28, 0x01],
            &[0x32, 0x06, 0x03, 0x8e, 0x02, 0x9e, 0xa7, 0x05],
        ]
        .concat()
    );
    // proto3 leaves out a scalar holding its default, a null and an empty
    // list (fromConnectData returns null for it), but writes a set message
    // even when it is empty.
    assert_eq!(
        bytes(
            &schema,
            json!({"a": 0, "b": "", "c": {}, "d": null, "e": false, "f": []})
        ),
        [0x1a, 0x00]
    );
}

#[test]
fn a_decimal_is_confluents_decimal_message_with_its_digits_and_scale() {
    // testFromConnectDecimal: BigDecimal(12345678, 3) is Decimal{value:
    // unscaledValue().toByteArray() (00 bc 61 4e), precision 8, scale 3}
    // (DecimalUtils.fromBigDecimal: the value's own precision).
    let decimal = r#"{"type":"bytes","optional":false,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"3"}}"#;
    let schema = record(&[field(decimal, "value")]);
    assert_eq!(
        bytes(&schema, json!({"value": "ALxhTg=="})),
        [0x0a, 0x0a, 0x0a, 0x04, 0x00, 0xbc, 0x61, 0x4e, 0x10, 0x08, 0x18, 0x03]
    );
    // BigDecimal.precision() is 1 for a zero, and counts a negative's digits.
    assert_eq!(encode::digits(&[0x00]), 1);
    assert_eq!(encode::digits(&[0xff]), 1);
    assert_eq!(encode::digits(&[0xfc, 0x18]), 4); // -1000
    assert!(file(&schema)
        .text
        .contains("import \"confluent/type/decimal.proto\";\n"));
}

#[test]
fn what_protobuf_cannot_hold_stops_the_event_with_its_place() {
    // ProtobufData: "Array cannot be nested", "Unsupported root schema of
    // type ARRAY"; DescriptorValidationException for a name protobuf
    // refuses (scrub.invalid.names is false by default).
    let nested = record(&[field(
        r#"{"type":"array","items":{"type":"array","items":{"type":"string","optional":true},"optional":true},"optional":true}"#,
        "grid",
    )]);
    assert!(
        refusal(&nested).contains("\"grid\""),
        "{}",
        refusal(&nested)
    );
    assert!(refusal(
        r#"{"type":"array","items":{"type":"string","optional":true},"optional":false}"#
    )
    .contains("root"));
    let dashed = record(&[field(r#"{"type":"string","optional":true}"#, "first-name")]);
    let why = refusal(&dashed);
    assert!(why.contains("--schema-name-adjustment-mode avro"), "{why}");
    let adjusted = schema(&Connect::parse(&dashed).unwrap(), NameAdjustment::Avro).unwrap();
    assert!(
        adjusted.text.contains("string first_name = 1;"),
        "{}",
        adjusted.text
    );
    // A null in a list: a repeated field cannot hold it.
    let list = record(&[field(
        r#"{"type":"array","items":{"type":"string","optional":true},"optional":true}"#,
        "tags",
    )]);
    let mut out = Vec::new();
    let why = encode(
        &Connect::parse(&list).unwrap(),
        &json!({"tags": ["a", null]}),
        &mut out,
    )
    .unwrap_err();
    assert!(why.contains("\"tags[1]\""), "{why}");
}
