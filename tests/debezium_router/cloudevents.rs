//! `--value-format cloudevents` with `--metadata-headers`: Debezium's
//! CloudEventsConverter after the outbox router. Expected values from
//! debezium/debezium at aad55199 (3.6.1.Final):
//! - debezium-connect-plugins/src/test/java/io/debezium/converters/
//!   AbstractCloudEventsConverterTest
//!   .shouldConvertToCloudEventsInJsonWithMetadataAndIdAndTypeInHeadersAfterOutboxEventRouter
//!   (DBZ-3642, DBZ-7016): the row below, HeaderFrom$Value copying
//!   source,op,transaction, the router with table.expand.json.payload=true
//!   and event_type:header:type; and the assertions of
//!   CloudEventsConverterTest.shouldConvertToCloudEventsInJsonWithMetadataAndIdAndTypeInHeaders:
//!   id, source "/debezium/<connector>/<server>", specversion "1.0", no
//!   dataschema, type "UserCreated", no traceparent, datacontenttype
//!   "application/json", time, data; iodebeziumop and iodebeziumtsms; the
//!   transaction attributes present; data.schema.name
//!   "io.debezium.connector.<connector>.Data"; data.payload someField1
//!   "some value 1" and someField2 7005.
//! - CloudEventsMaker.ceTime: "yyyy-MM-dd'T'HH:mm:ss.SSSXXX" in UTC.
//! - HeaderFrom (apache/kafka connect/transforms) appends the copied fields
//!   as headers, before the router's `id` and placed ones.

use super::relay_rows;

const USER_CREATED: &str =
    "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES
   ('59a42efd-b015-44a9-9dde-cb36d9002425', 'User', '10711fa5', 'UserCreated',
    '{\"someField1\": \"some value 1\", \"someField2\": 7005}');";

fn cloudevents_flags(extra: &'static [&'static str]) -> Vec<&'static str> {
    let mut flags = vec![
        "--value-format",
        "cloudevents",
        "--metadata-headers",
        "--header-format",
        "json-with-schema",
        "--expand-json-payload",
        "--schema-topic-prefix",
        "dbserver1",
        "--fields-additional-placement",
        "type:header:type",
    ];
    flags.extend_from_slice(extra);
    flags
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cloud_event_carries_the_rows_id_type_source_and_payload_as_debeziums_test_expects() {
    let got = relay_rows(
        &cloudevents_flags(&[]),
        USER_CREATED,
        &["outbox.event.User"],
        1,
    )
    .await;
    let m = &got[0];
    assert_eq!(m.raw_key.as_deref(), Some(&b"10711fa5"[..]));
    let names: Vec<&str> = m.raw_headers.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["source", "op", "transaction", "id", "type"]);
    let header = |name: &str| -> serde_json::Value {
        serde_json::from_str(m.header(name).unwrap()).unwrap()
    };
    assert_eq!(header("op")["payload"], "c");
    assert_eq!(header("source")["payload"]["connector"], "postgresql");
    assert_eq!(header("source")["payload"]["name"], "dbserver1");
    assert!(header("transaction")["payload"].is_null());
    assert_eq!(
        header("id")["payload"],
        "59a42efd-b015-44a9-9dde-cb36d9002425"
    );
    assert_eq!(header("type")["payload"], "UserCreated");

    let text = String::from_utf8(m.raw_value.clone().unwrap()).unwrap();
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["id"], "59a42efd-b015-44a9-9dde-cb36d9002425");
    assert_eq!(value["source"], "/debezium/postgresql/dbserver1");
    assert_eq!(value["specversion"], "1.0");
    assert!(value.get("dataschema").is_none());
    assert_eq!(value["type"], "UserCreated");
    assert!(value.get("traceparent").is_none());
    assert_eq!(value["datacontenttype"], "application/json");
    let time = value["time"].as_str().unwrap();
    assert!(
        time.len() == 24 && time.ends_with('Z') && time.as_bytes()[19] == b'.',
        "{time}"
    );
    assert_eq!(value["iodebeziumop"], "c");
    assert!(value["iodebeziumtsms"]
        .as_str()
        .unwrap()
        .parse::<i64>()
        .is_ok());
    for tx in [
        "iodebeziumtxid",
        "iodebeziumtxtotalorder",
        "iodebeziumtxdatacollectionorder",
    ] {
        assert!(value.get(tx).is_some(), "{tx} missing from {text}");
    }
    let data = &value["data"];
    assert_eq!(
        data["schema"]["name"],
        "io.debezium.connector.postgresql.Data"
    );
    assert_eq!(data["payload"]["someField1"], "some value 1");
    assert_eq!(data["payload"]["someField2"], 7005);
    // convertToCloudEventsFormat's order: the required attributes first, data last.
    assert!(text.starts_with(r#"{"id":"59a42efd-b015-44a9-9dde-cb36d9002425","source":"#));
    assert!(text.contains(r#""specversion":"1.0","type":"UserCreated","time":""#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_extension_attributes_a_cloud_event_has_only_the_required_ones_and_bare_data() {
    // AbstractCloudEventsConverterTest.shouldConvertToCloudEventsInJsonWithoutExtensionAttributes
    // (DBZ-6982): extension.attributes.enable=false leaves no iodebezium*
    // attribute; json.schemas.enable=false writes data without its schema.
    let flags = cloudevents_flags(&[
        "--cloudevents-extension-attributes",
        "false",
        "--cloudevents-data-schema",
        "false",
    ]);
    let got = relay_rows(&flags, USER_CREATED, &["outbox.event.User"], 1).await;
    let text = String::from_utf8(got[0].raw_value.clone().unwrap()).unwrap();
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    // serde_json's map sorts the keys; the text keeps Debezium's order.
    let keys: Vec<&str> = value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "data",
            "datacontenttype",
            "id",
            "source",
            "specversion",
            "time",
            "type"
        ]
    );
    assert!(
        text.starts_with(r#"{"id":"#)
            && text.contains(r#""datacontenttype":"application/json","data":{"#)
    );
    assert_eq!(
        value["data"],
        serde_json::json!({"someField1": "some value 1", "someField2": 7005})
    );
}
