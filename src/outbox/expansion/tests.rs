//! Expected schemas and values from debezium/debezium v3.6.1.Final
//! debezium-connect-plugins/src/test/java/io/debezium/transforms/outbox/
//! JsonSchemaDataTest.java and EventRouterTest.java (the `canExpand…`
//! cases), written as apache/kafka's JsonConverter.asJsonSchema writes a
//! schema ("type", "items" or "fields", "optional", "name"; a field's schema
//! then "field").

use super::*;

fn ignore(text: &str) -> Expansion {
    expand(text, "payload", Behaviour::default())
}

/// The value's JSON, or a panic naming the outcome.
fn value(text: &str) -> String {
    match ignore(text) {
        Expansion::Expanded { json, .. } => json,
        other => panic!("{text}: {other:?}"),
    }
}

fn schema(text: &str, key: &str, behaviour: Behaviour) -> String {
    match expand(text, key, behaviour) {
        Expansion::Expanded { schema, .. } => schema.json(None),
        other => panic!("{text}: {other:?}"),
    }
}

const STRING: &str = r#"{"type":"string","optional":true"#;
const INT32: &str = r#"{"type":"int32","optional":true"#;
const INT64: &str = r#"{"type":"int64","optional":true"#;
const DOUBLE: &str = r#"{"type":"double","optional":true"#;

fn field(schema: &str, name: &str) -> String {
    format!("{schema},\"field\":\"{name}\"}}")
}

#[test]
fn the_documented_payload_expands_to_compact_json() {
    // outbox-event-router.adoc, "Expanding escaped JSON String as JSON".
    let text = r#"{"id": 1, "lineItems": [{"id": 1, "item": "Debezium in Action", "status": "ENTERED", "quantity": 2, "totalPrice": 39.98}, {"id": 2, "item": "Debezium for Dummies", "status": "ENTERED", "quantity": 1, "totalPrice": 29.99}], "orderDate": "2019-01-31T12:13:01", "customerId": 123}"#;
    assert_eq!(
        value(text),
        r#"{"id":1,"lineItems":[{"id":1,"item":"Debezium in Action","status":"ENTERED","quantity":2,"totalPrice":39.98},{"id":2,"item":"Debezium for Dummies","status":"ENTERED","quantity":1,"totalPrice":29.99}],"orderDate":"2019-01-31T12:13:01","customerId":123}"#
    );
}

#[test]
fn the_restaurant_document_has_nested_named_optional_structs() {
    // JsonSchemaDataTest.shouldCreateCorrectSchemaFromInsertJson, on
    // src/test/resources/json/restaurants5.json (grades cut to two).
    let text = r#"{"address": {"building": "1007", "floor": {"level": 17, "description": "level 17"}, "coord": [-73.856077, 40.848447], "street": "Morris Park Ave", "zipcode": "10462"}, "borough": "Bronx", "cuisine": "Bakery", "grades": [{"date": {"$date": 1393804800000}, "grade": "A", "score": 2}, {"date": {"$date": 1378857600000}, "grade": "A", "score": 6}], "name": "Morris Park Bake Shop", "restaurant_id": "30075445"}"#;
    let floor = format!(
        r#"{{"type":"struct","fields":[{},{}],"optional":true,"name":"pub.address.floor","field":"floor"}}"#,
        field(INT32, "level"),
        field(STRING, "description")
    );
    let address = format!(
        r#"{{"type":"struct","fields":[{},{floor},{{"type":"array","items":{DOUBLE}}},"optional":true,"field":"coord"}},{},{}],"optional":true,"name":"pub.address","field":"address"}}"#,
        field(STRING, "building"),
        field(STRING, "street"),
        field(STRING, "zipcode")
    );
    // Every grade has the same schema: one distinct member, kept optional.
    let grades = format!(
        r#"{{"type":"array","items":{{"type":"struct","fields":[{{"type":"struct","fields":[{}],"optional":true,"name":"pub.grades.date","field":"date"}},{},{}],"optional":true,"name":"pub.grades"}},"optional":true,"field":"grades"}}"#,
        field(INT64, "$date"),
        field(STRING, "grade"),
        field(INT32, "score")
    );
    assert_eq!(
        schema(text, "pub", Behaviour::default()),
        format!(
            r#"{{"type":"struct","fields":[{address},{},{},{grades},{},{}],"optional":true,"name":"pub"}}"#,
            field(STRING, "borough"),
            field(STRING, "cuisine"),
            field(STRING, "name"),
            field(STRING, "restaurant_id")
        )
    );
}

#[test]
fn members_of_differing_shapes_merge_into_a_required_struct() {
    // JsonSchemaDataTest.shouldCreateCorrectSchemaFromArrayJson: code and
    // description; a null description gives way to the string one. Two
    // distinct member schemas: merged by copySchemaBasics, not optional.
    let text = r#"{"xs": [{"code": "100", "description": null}, {"code": "200", "description": "another"}, {"code": "300"}]}"#;
    let members = format!(
        r#"{{"type":"struct","fields":[{},{}],"optional":false,"name":"payload.xs"}}"#,
        field(STRING, "code"),
        field(STRING, "description")
    );
    assert_eq!(
        schema(text, "payload", Behaviour::default()),
        format!(
            r#"{{"type":"struct","fields":[{{"type":"array","items":{members},"optional":true,"field":"xs"}}],"optional":true,"name":"payload"}}"#
        )
    );
    assert_eq!(
        value(text),
        r#"{"xs":[{"code":"100","description":null},{"code":"200","description":"another"},{"code":"300","description":null}]}"#
    );
    // Under optional_bytes the null is BYTES, and only null descriptions stay bytes.
    let bytes = Behaviour {
        keep_null_fields: true,
        ..Behaviour::default()
    };
    let all_null = r#"{"xs": [{"code": "1", "description": null}, {"code": "2", "description": null}, {"code": "3"}]}"#;
    assert!(schema(all_null, "payload", bytes)
        .contains(r#"{"type":"bytes","optional":true,"field":"description"}"#));
    assert!(schema(text, "payload", bytes).contains(&field(STRING, "description")));
}

#[test]
fn a_null_field_is_optional_bytes_under_optional_bytes() {
    // JsonSchemaDataTest.shouldConvertNullNodeToOptionalBytes.
    let bytes = Behaviour {
        keep_null_fields: true,
        ..Behaviour::default()
    };
    assert_eq!(
        schema(r#"{"heartbeat": 1, "email": null}"#, "payload", bytes),
        format!(
            r#"{{"type":"struct","fields":[{},{{"type":"bytes","optional":true,"field":"email"}}],"optional":true,"name":"payload"}}"#,
            field(INT32, "heartbeat")
        )
    );
}

#[test]
fn the_router_tests_expanded_values() {
    // EventRouterTest.canExpandJsonPayloadIfConfigured.
    let text = r#"{"fullName": "John Doe", "enabled": true, "rating": 4.9, "age": 42, "pets": ["dog", "cat"], "petObjects": [{"type": "dog"}, {"type": "cat"}]}"#;
    assert_eq!(
        value(text),
        r#"{"fullName":"John Doe","enabled":true,"rating":4.9,"age":42,"pets":["dog","cat"],"petObjects":[{"type":"dog"},{"type":"cat"}]}"#
    );
    assert!(schema(text, "payload", Behaviour::default()).contains(
        r#"{"type":"array","items":{"type":"struct","fields":[{"type":"string","optional":true,"field":"type"}],"optional":true,"name":"payload.petObjects"},"optional":true,"field":"petObjects"}"#
    ));
    // canExpandJsonWithNestedArraysWhereFirstArrayIsEmpty: the empty colors
    // array of the first member has no schema; the merged one has the
    // second's, and the first member's colors is an empty list.
    assert_eq!(
        value(
            r#"{"fullName": "John Doe", "petObjects": [{"type": "dog", "colors": []}, {"type": "cat", "colors": [{"name": "white"}]}]}"#
        ),
        r#"{"fullName":"John Doe","petObjects":[{"type":"dog","colors":[]},{"type":"cat","colors":[{"name":"white"}]}]}"#
    );
    // shouldExpandJSONPayloadWithEmptyArrayAndRemoveThatArray.
    assert_eq!(
        value(r#"{"fullName": "John Doe", "petObjects": [{"type": "dog", "colors": []}]}"#),
        r#"{"fullName":"John Doe","petObjects":[{"type":"dog"}]}"#
    );
    // canExpandJsonArrayWithFirstElementNull: int32 members, the null kept.
    assert_eq!(
        value(r#"{"fullName": "John Doe", "numbers": [null, 2, 3]}"#),
        r#"{"fullName":"John Doe","numbers":[null,2,3]}"#
    );
    // canExpandJsonArrayWithComplexElements.
    assert_eq!(
        value(
            r#"{"id":"1028cbab","attributes":[{"id":"10911586","adr":null,"eans":[{"code":"2007000013656","createdAt":"2022-06-08T11:33:16.465Z"},{"code":"2000630108556","createdAt":"2022-06-23T07:57:54.717Z"}],"isCanBeReturnToSupplier":false}]}"#
        ),
        r#"{"id":"1028cbab","attributes":[{"id":"10911586","eans":[{"code":"2007000013656","createdAt":"2022-06-08T11:33:16.465Z"},{"code":"2000630108556","createdAt":"2022-06-23T07:57:54.717Z"}],"isCanBeReturnToSupplier":false}]}"#
    );
}

#[test]
fn null_fields_and_empty_arrays_follow_the_behaviour_options() {
    // toConnectSchema: NULL gives no schema under ignore (OPTIONAL_BYTES
    // under optional_bytes); an empty array none under ignore, an
    // optional string array under optional_string.
    let text = r#"{"a": null, "b": [], "c": 1}"#;
    assert_eq!(value(text), r#"{"c":1}"#);
    let keep = Behaviour {
        keep_null_fields: true,
        keep_empty_arrays: true,
    };
    match expand(text, "payload", keep) {
        Expansion::Expanded { json, schema } => {
            assert_eq!(json, r#"{"a":null,"b":[],"c":1}"#);
            assert!(schema.json(None).contains(&format!(
                r#"{{"type":"array","items":{STRING}}},"optional":true,"field":"b"}}"#
            )));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn documents_without_a_schema_keep_their_text() {
    // getFirstArrayElement: "Field is not a homogenous array".
    assert_eq!(ignore(r#"{"a": [1, "x"]}"#), Expansion::Kept);
    // JsonSchemaDataTest.failSchemaCheckForArrayWithDifferentNumberTypes.
    assert_eq!(ignore(r#"{"test": [1, 2.0, 3.0]}"#), Expansion::Kept);
    // An int and a long are different number schemas too.
    assert_eq!(ignore(r#"{"a": [1, 3000000000]}"#), Expansion::Kept);
    // "Array … has unrecognized member schema": only nulls, or empty arrays.
    assert_eq!(ignore(r#"{"a": [null, null]}"#), Expansion::Kept);
    assert_eq!(ignore(r#"{"a": [[], [1]]}"#), Expansion::Kept);
    // SchemaBuilder.field: "fieldName cannot be null."
    assert_eq!(ignore(r#"{"": 1}"#), Expansion::Kept);
    // Not JSON, or not starting with '{' or '[' (parseJsonPayload).
    assert_eq!(ignore("not json"), Expansion::Kept);
    assert_eq!(ignore(r#" {"a": 1}"#), Expansion::Kept);
    assert_eq!(ignore(r#"{"a": 01}"#), Expansion::Kept);
}

#[test]
fn values_that_do_not_fit_their_schema_are_unfit() {
    let unfit = |text: &str| match ignore(text) {
        Expansion::Unfit { schema, why } => (schema.map(|s| s.type_name()), why),
        other => panic!("{text}: {other:?}"),
    };
    // new Struct(arraySchema): "Not a struct schema".
    assert_eq!(unfit("[1, 2]").0, Some("array"));
    // A top-level empty array: no schema at all.
    assert_eq!(unfit("[]").0, None);
    // A BigIntegerNode's schema is FLOAT64, its value a BigDecimal.
    let (_, why) = unfit(r#"{"big": 12345678901234567890}"#);
    assert!(why.contains("beyond a long"), "{why}");
    // Merged members whose fields disagree: one of them does not fit.
    let (_, why) = unfit(r#"{"xs": [{"a": 1}, {"a": "s"}]}"#);
    assert!(why.contains("a string"), "{why}");
    // A null member of a merged (required) struct.
    let (_, why) = unfit(r#"{"xs": [{"a": 1}, null, {"b": 2}]}"#);
    assert!(
        why.contains("a null") && why.contains("required struct"),
        "{why}"
    );
    // The members of an array of arrays take the first one's schema.
    assert!(matches!(
        ignore(r#"{"xs": [[1], ["a"]]}"#),
        Expansion::Unfit { .. }
    ));
    // One distinct member schema stays optional: its null member fits.
    assert_eq!(
        value(r#"{"xs": [{"a": 1}, null]}"#),
        r#"{"xs":[{"a":1},null]}"#
    );
}

#[test]
fn numbers_are_written_as_java_writes_them() {
    assert_eq!(
        value(r#"{"i": 10, "l": 9007199254740993, "d": 1.0, "e": 1e10, "inf": 1e400}"#),
        r#"{"i":10,"l":9007199254740993,"d":1.0,"e":1.0E10,"inf":"Infinity"}"#
    );
}

#[test]
fn arrays_of_objects_share_one_merged_schema_in_the_order_first_seen() {
    // mergeSchema: fields of every member; a missing one is null.
    assert_eq!(
        value(r#"{"xs": [{"a": 1}, {"b": "y"}]}"#),
        r#"{"xs":[{"a":1,"b":null},{"a":null,"b":"y"}]}"#
    );
}

#[test]
fn nested_arrays_of_objects_have_unnamed_members() {
    // toConnectSchemaWithCycles: a non-object sample's schema is
    // toConnectSchema(null, sample), so its objects have no name and
    // their own fields' names start afresh.
    let text = r#"{"m": [[{"a": {"b": 1}}]]}"#;
    let inner = format!(
        r#"{{"type":"struct","fields":[{{"type":"struct","fields":[{}],"optional":true,"name":"a","field":"a"}}],"optional":true}}"#,
        field(INT32, "b")
    );
    assert!(
        schema(text, "payload", Behaviour::default()).contains(&format!(
            r#"{{"type":"array","items":{{"type":"array","items":{inner},"optional":true}},"optional":true,"field":"m"}}"#
        )),
        "{}",
        schema(text, "payload", Behaviour::default())
    );
}
