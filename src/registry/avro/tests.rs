//! Golden values from Confluent's AvroDataTest and the Avro specification,
//! each cited beside its test; never from walrelay's own output.

use serde_json::json;

use super::*;

fn avro(connect_json: &str) -> String {
    schema_text(&Connect::parse(connect_json).unwrap(), NameAdjustment::None).unwrap()
}

fn datum(connect_json: &str, value: Value) -> Vec<u8> {
    let mut out = Vec::new();
    encode(&Connect::parse(connect_json).unwrap(), &value, &mut out).unwrap();
    out
}

#[test]
fn an_unnamed_struct_with_an_optional_field_is_connect_default_with_a_null_default() {
    // AvroDataTest.testFromConnectOptionalWithDefaultNull (confluentinc/
    // schema-registry avro-converter/src/test/.../AvroDataTest.java): record
    // ConnectDefault in io.confluent.connect.avro, field optionalBool of type
    // union(null, boolean) with default null.
    assert_eq!(
        avro(
            r#"{"type":"struct","fields":[{"type":"boolean","optional":true,"field":"optionalBool"}],"optional":false}"#
        ),
        r#"{"type":"record","name":"ConnectDefault","namespace":"io.confluent.connect.avro","fields":[{"name":"optionalBool","type":["null","boolean"],"default":null}]}"#
    );
}

#[test]
fn a_decimal_carries_scale_precision_connect_metadata_then_its_logical_type() {
    // AvroDataTest.createDecimalSchema / testFromConnectLogicalDecimal: props
    // scale, precision, connect.version 1, connect.parameters {scale,
    // connect.decimal.precision}, connect.name, logicalType decimal.
    assert_eq!(
        avro("{\"type\":\"bytes\",\"optional\":false,\"name\":\"org.apache.kafka.connect.data.Decimal\",\
              \"version\":1,\"parameters\":{\"scale\":\"2\",\"connect.decimal.precision\":\"64\"}}"),
        "{\"type\":\"bytes\",\"scale\":2,\"precision\":64,\"connect.version\":1,\
         \"connect.parameters\":{\"scale\":\"2\",\"connect.decimal.precision\":\"64\"},\
         \"connect.name\":\"org.apache.kafka.connect.data.Decimal\",\"logicalType\":\"decimal\"}"
    );
}

#[test]
fn connects_date_becomes_avros_date_and_debeziums_names_stay_connect_names() {
    // AvroDataTest.testFromConnectLogicalDate: int with connect.name, then
    // connect.version 1 and logicalType date (the test adds them in that
    // order; AvroData writes connect.version before connect.name).
    assert_eq!(
        avro(
            r#"{"type":"int32","optional":false,"name":"org.apache.kafka.connect.data.Date","version":1}"#
        ),
        r#"{"type":"int","connect.version":1,"connect.name":"org.apache.kafka.connect.data.Date","logicalType":"date"}"#
    );
    // AvroData.fromConnectSchema has no branch for Debezium's logical names
    // (io.debezium.data.Uuid, io.debezium.time.*): their base type with
    // connect.name; optional ones become union(null, T) (maybeMakeOptional).
    assert_eq!(
        avro(r#"{"type":"string","optional":true,"name":"io.debezium.data.Uuid","version":1}"#),
        r#"["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Uuid"}]"#
    );
    assert_eq!(
        avro(
            r#"{"type":"int64","optional":false,"name":"org.apache.kafka.connect.data.Timestamp","version":1}"#
        ),
        r#"{"type":"long","connect.version":1,"connect.name":"org.apache.kafka.connect.data.Timestamp","logicalType":"timestamp-millis"}"#
    );
}

#[test]
fn int16_is_an_avro_int_marked_with_its_connect_type() {
    // AvroData.fromConnectSchema, case INT16: intType() with connect.type "int16".
    assert_eq!(
        avro(r#"{"type":"int16","optional":false}"#),
        r#"{"type":"int","connect.type":"int16"}"#
    );
}

#[test]
fn a_named_envelope_splits_its_name_into_namespace_and_name_and_reuses_a_record() {
    // AvroData.splitName (the part after the last '.' is the name);
    // Avro's Schema.toString refers to a record already written by its name
    // (relative to the enclosing namespace when it is the same).
    let field = |name: &str| {
        format!(
            "{{\"type\":\"struct\",\"fields\":[{{\"type\":\"int32\",\"optional\":false,\"field\":\"scale\"}},\
             {{\"type\":\"bytes\",\"optional\":false,\"field\":\"value\"}}],\"optional\":true,\
             \"name\":\"io.debezium.data.VariableScaleDecimal\",\"version\":1,\
             \"doc\":\"Variable scaled decimal\",\"field\":\"{name}\"}}"
        )
    };
    let envelope = format!(
        "{{\"type\":\"struct\",\"fields\":[{},{}],\"optional\":false,\
         \"name\":\"dbserver1.public.outbox.order.Value\"}}",
        field("a"),
        field("b")
    );
    let text = avro(&envelope);
    assert!(
        text.starts_with(r#"{"type":"record","name":"Value","namespace":"dbserver1.public.outbox.order","fields":[{"name":"a","type":["null",{"type":"record","name":"VariableScaleDecimal","namespace":"io.debezium.data","fields":[{"name":"scale","type":"int"},{"name":"value","type":"bytes"}],"connect.doc":"Variable scaled decimal","connect.version":1,"connect.name":"io.debezium.data.VariableScaleDecimal"}],"default":null}"#),
        "{text}"
    );
    assert!(
        text.ends_with(r#"{"name":"b","type":["null","io.debezium.data.VariableScaleDecimal"],"default":null}],"connect.name":"dbserver1.public.outbox.order.Value"}"#),
        "{text}"
    );
}

#[test]
fn a_name_avro_refuses_stops_the_event_unless_names_are_adjusted() {
    let schema = Connect::parse(
        r#"{"type":"struct","fields":[],"optional":false,"name":"p.public.outbox.order-created.Value"}"#,
    )
    .unwrap();
    let refused = schema_text(&schema, NameAdjustment::None).unwrap_err();
    assert!(
        refused.contains("--schema-name-adjustment-mode avro"),
        "{refused}"
    );
    // SchemaNameAdjuster.validFullname: '-' becomes '_'; connect.name keeps
    // the name the Connect schema had.
    assert_eq!(
        schema_text(&schema, NameAdjustment::Avro).unwrap(),
        r#"{"type":"record","name":"Value","namespace":"p.public.outbox.order_created","fields":[],"connect.name":"p.public.outbox.order-created.Value"}"#
    );
}

#[test]
fn values_encode_as_the_avro_specification_shows() {
    // Avro 1.11 specification, "Binary Encoding": zig-zag 0→00, -1→01,
    // 1→02, -2→03, 2→04, -64→7f, 64→80 01; "foo" → 06 66 6f 6f.
    for (n, bytes) in [
        (0, vec![0x00]),
        (-1, vec![0x01]),
        (1, vec![0x02]),
        (-2, vec![0x03]),
        (2, vec![0x04]),
        (-64, vec![0x7f]),
        (64, vec![0x80, 0x01]),
    ] {
        assert_eq!(
            datum(r#"{"type":"int64","optional":false}"#, json!(n)),
            bytes
        );
    }
    assert_eq!(
        datum(r#"{"type":"string","optional":false}"#, json!("foo")),
        [0x06, 0x66, 0x6f, 0x6f]
    );
    // "the union schema ["null","string"] … the string "a" as 02 02 61",
    // null as 00.
    assert_eq!(
        datum(r#"{"type":"string","optional":true}"#, json!("a")),
        [0x02, 0x02, 0x61]
    );
    assert_eq!(
        datum(r#"{"type":"string","optional":true}"#, Value::Null),
        [0x00]
    );
    // Record {"a": 27 (long), "b": "foo"} → 36 06 66 6f 6f; array of longs
    // [3, 27] → 04 06 36 00.
    assert_eq!(
        datum(
            r#"{"type":"struct","fields":[{"type":"int64","optional":false,"field":"a"},{"type":"string","optional":false,"field":"b"}],"optional":false}"#,
            json!({"a": 27, "b": "foo"})
        ),
        [0x36, 0x06, 0x66, 0x6f, 0x6f]
    );
    assert_eq!(
        datum(
            r#"{"type":"array","items":{"type":"int64","optional":false},"optional":false}"#,
            json!([3, 27])
        ),
        [0x04, 0x06, 0x36, 0x00]
    );
}

#[test]
fn a_null_where_the_schema_wants_a_value_is_refused_with_the_field() {
    let schema = Connect::parse(
        r#"{"type":"struct","fields":[{"type":"string","optional":false,"field":"id"}],"optional":false}"#,
    )
    .unwrap();
    let err = encode(&schema, &json!({}), &mut Vec::new()).unwrap_err();
    assert!(err.contains("\"id\""), "{err}");
}
