//! `--extended-headers`: Debezium 3's `__debezium.context.*` headers
//! (extended.headers.enabled, true by default since 3.2.1). Expected values
//! from debezium/debezium v3.6.1.Final debezium-connector-common/.../connector/common/:
//! DebeziumHeaderProducer.contextHeaders (connectorLogicalName, taskId,
//! connectorName, runId, in that order, STRING schemas, so
//! SimpleHeaderConverter writes the text), CdcSourceTaskContext (the
//! logical name is topic.prefix; the task id "0" for the PostgreSQL
//! connector's one task; the connector name PostgresConnectorConfig
//! .getConnectorName, Module.name() = "postgresql"; the run id
//! UUIDUtils.generateNewUUID, a UUIDv7 made when the task starts), and
//! EventDispatcher.getExtendedHeaders, whose headers EventRouterDelegate.apply
//! keeps before `id` and the placed ones.

use super::relay_rows;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_headers_name_the_connector_and_one_run_before_the_routers_headers() {
    let got = relay_rows(
        &[
            "--extended-headers",
            "--schema-topic-prefix",
            "dbserver1",
            "--fields-additional-placement",
            "type:header:eventType",
        ],
        "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES
           ('00000000-0000-0000-0000-000000000f01', 'order', 'o-1', 'OrderCreated', '{}'),
           ('00000000-0000-0000-0000-000000000f02', 'order', 'o-2', 'OrderPaid', '{}');",
        &["outbox.event.order"],
        2,
    )
    .await;
    let mut run_ids = Vec::new();
    for m in &got {
        let names: Vec<&str> = m.raw_headers.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "__debezium.context.connectorLogicalName",
                "__debezium.context.taskId",
                "__debezium.context.connectorName",
                "__debezium.context.runId",
                "id",
                "eventType"
            ]
        );
        assert_eq!(
            m.header("__debezium.context.connectorLogicalName"),
            Some("dbserver1")
        );
        assert_eq!(m.header("__debezium.context.taskId"), Some("0"));
        assert_eq!(
            m.header("__debezium.context.connectorName"),
            Some("postgresql")
        );
        let run_id = m.header("__debezium.context.runId").unwrap();
        // A UUIDv7 as java.util.UUID.toString writes it: version 7, variant 10.
        let groups: Vec<&str> = run_id.split('-').collect();
        assert_eq!(
            groups.iter().map(|g| g.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(groups[2].starts_with('7'), "{run_id}");
        assert!(groups[3].starts_with(['8', '9', 'a', 'b']), "{run_id}");
        assert_eq!(run_id, run_id.to_lowercase());
        run_ids.push(run_id.to_string());
    }
    run_ids.dedup();
    assert_eq!(run_ids.len(), 1, "one run, one run id: {run_ids:?}");
}
