//! Golden values from Confluent's JsonSchemaDataTest (confluentinc/
//! schema-registry json-schema-converter/src/test/java/io/confluent/connect/
//! json/JsonSchemaDataTest.java), each cited beside its test; compared as
//! JSON values, since the registered text's key order is walrelay's (see
//! the module doc). Never from walrelay's own output.

use serde_json::json;

use super::*;

fn json_schema(connect_json: &str) -> Value {
    serde_json::from_str(&schema_text(&Connect::parse(connect_json).unwrap())).unwrap()
}

#[test]
fn integers_and_floats_carry_their_connect_type() {
    // testFromConnectByte / testFromConnectInteger / testFromConnectLong:
    // NumberSchema requiresInteger with connect.type int8/int32/int64;
    // testFromConnectFloat / testFromConnectDouble: NumberSchema (a number)
    // with connect.type float32/float64.
    for (connect, json_type, connect_type) in [
        ("int8", "integer", "int8"),
        ("int16", "integer", "int16"),
        ("int32", "integer", "int32"),
        ("int64", "integer", "int64"),
        ("float", "number", "float32"),
        ("double", "number", "float64"),
    ] {
        assert_eq!(
            json_schema(&format!(r#"{{"type":"{connect}","optional":false}}"#)),
            json!({"type": json_type, "connect.type": connect_type}),
            "{connect}"
        );
    }
}

#[test]
fn strings_booleans_and_bytes_are_plain_and_bytes_say_so() {
    // testFromConnectString: StringSchema; testFromConnectBoolean:
    // BooleanSchema; testFromConnectBytes: StringSchema with connect.type
    // bytes.
    assert_eq!(
        json_schema(r#"{"type":"string","optional":false}"#),
        json!({"type": "string"})
    );
    assert_eq!(
        json_schema(r#"{"type":"boolean","optional":false}"#),
        json!({"type": "boolean"})
    );
    assert_eq!(
        json_schema(r#"{"type":"bytes","optional":false}"#),
        json!({"type": "string", "connect.type": "bytes"})
    );
}

#[test]
fn an_optional_schema_is_one_of_null_and_the_schema() {
    // testFromConnectNull: Schema.OPTIONAL_BOOLEAN_SCHEMA becomes
    // CombinedSchema.oneOf(NullSchema, BooleanSchema).
    assert_eq!(
        json_schema(r#"{"type":"boolean","optional":true}"#),
        json!({"oneOf": [{"type": "null"}, {"type": "boolean"}]})
    );
}

#[test]
fn a_decimal_is_base64_text_with_its_name_version_and_scale() {
    // testFromConnectBase64Decimal: Decimal.schema(2) becomes a StringSchema
    // titled org.apache.kafka.connect.data.Decimal, with connect.type bytes,
    // connect.version 1 and connect.parameters {scale: "2"}.
    assert_eq!(
        json_schema(
            r#"{"type":"bytes","optional":false,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"2"}}"#
        ),
        json!({
            "type": "string",
            "title": "org.apache.kafka.connect.data.Decimal",
            "connect.type": "bytes",
            "connect.version": 1,
            "connect.parameters": {"scale": "2"}
        })
    );
}

#[test]
fn a_timestamp_keeps_its_default() {
    // testFromConnectTimestampWithDefault: an integer titled
    // org.apache.kafka.connect.data.Timestamp, default 0, connect.type
    // int64, connect.version 1.
    assert_eq!(
        json_schema(
            r#"{"type":"int64","optional":false,"name":"org.apache.kafka.connect.data.Timestamp","version":1,"default":0}"#
        ),
        json!({
            "type": "integer",
            "title": "org.apache.kafka.connect.data.Timestamp",
            "default": 0,
            "connect.type": "int64",
            "connect.version": 1
        })
    );
}

#[test]
fn maps_of_string_keys_are_objects_and_others_arrays_of_key_value_entries() {
    // testFromConnectMapWithStringKey: ObjectSchema of additional properties
    // (integer, int32) with connect.type map. NAMED_JSON_MAP_SCHEMA: a named
    // map is titled. testFromConnectMapWithNonStringKey: ArraySchema of
    // objects {key (connect.index 0), value (connect.index 1)}, connect.type
    // map.
    assert_eq!(
        json_schema(
            r#"{"type":"map","keys":{"type":"string","optional":false},"values":{"type":"int32","optional":false},"optional":false,"name":"foo.bar"}"#
        ),
        json!({
            "type": "object",
            "title": "foo.bar",
            "additionalProperties": {"type": "integer", "connect.type": "int32"},
            "connect.type": "map"
        })
    );
    assert_eq!(
        json_schema(
            r#"{"type":"map","keys":{"type":"int32","optional":false},"values":{"type":"int32","optional":false},"optional":false}"#
        ),
        json!({
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "key": {"type": "integer", "connect.type": "int32", "connect.index": 0},
                    "value": {"type": "integer", "connect.type": "int32", "connect.index": 1}
                }
            },
            "connect.type": "map"
        })
    );
}

#[test]
fn a_map_of_non_string_keys_is_written_as_key_value_objects() {
    // testFromConnectMapWithNonStringKey: the value {54: 32} is the array
    // [{"key": 54, "value": 32}] (JsonConverter's payload has [[54, 32]]).
    let schema = Connect::parse(
        r#"{"type":"map","keys":{"type":"int32","optional":false},"values":{"type":"int32","optional":false},"optional":false}"#,
    )
    .unwrap();
    assert_eq!(
        value(&schema, &json!([[54, 32]])).unwrap(),
        Some(json!([{"key": 54, "value": 32}]))
    );
}

#[test]
fn a_struct_is_an_object_whose_fields_carry_their_index() {
    // rawSchemaFromConnectSchema, case STRUCT: each field's schema is made
    // with field.index() as connect.index; an optional field's index goes
    // on its oneOf (the `index != null` branch after the optional wrap).
    // testFromConnectMapWithOptionalKey shows that shape for an optional
    // key: oneOf(null, string) with connect.index 0.
    assert_eq!(
        json_schema(
            r#"{"type":"struct","fields":[{"type":"string","optional":false,"field":"id"},{"type":"string","optional":true,"field":"note"}],"optional":false,"name":"outbox.Value"}"#
        ),
        json!({
            "type": "object",
            "title": "outbox.Value",
            "properties": {
                "id": {"type": "string", "connect.index": 0},
                "note": {"oneOf": [{"type": "null"}, {"type": "string"}], "connect.index": 1}
            }
        })
    );
}

#[test]
fn a_payload_without_such_maps_is_written_as_it_came_once_checked() {
    let schema = Connect::parse(
        r#"{"type":"struct","fields":[{"type":"string","optional":false,"field":"id"},{"type":"int64","optional":true,"field":"n"}],"optional":false}"#,
    )
    .unwrap();
    assert_eq!(
        value(&schema, &json!({"id": "a", "n": null})).unwrap(),
        None
    );
    let wrong = value(&schema, &json!({"id": 7})).unwrap_err();
    assert!(
        wrong.contains("the field \"id\" is not a string"),
        "{wrong}"
    );
    let missing = value(&schema, &json!({"n": 1})).unwrap_err();
    assert!(missing.contains("\"id\" is null"), "{missing}");
}

#[test]
fn a_misfit_deep_in_the_payload_is_named_by_its_whole_path() {
    let schema = Connect::parse(
        r#"{"type":"struct","fields":[{"type":"struct","fields":[{"type":"array","items":{"type":"int32","optional":false},"optional":false,"field":"codes"}],"optional":false,"field":"customer"}],"optional":false}"#,
    )
    .unwrap();
    let wrong = value(&schema, &json!({"customer": {"codes": [1, "x"]}})).unwrap_err();
    assert!(
        wrong.starts_with("the field \"customer.codes[1]\" is not an integer"),
        "{wrong}"
    );
    let top = value(&schema, &json!([])).unwrap_err();
    assert!(top.starts_with("the value is not an object"), "{top}");
}
