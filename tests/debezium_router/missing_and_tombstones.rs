//! `table.field.additional.missing=ignore` and the tombstone test, from
//! debezium-connect-plugins/.../transforms/outbox/EventRouterDelegate.java
//! (`apply`): a placed field the table lacks is skipped when the behaviour is
//! IGNORE; `payload == null || payload.toString().trim().isEmpty()` makes a
//! tombstone with route.tombstone.on.empty.payload, and Java's trim() drops
//! every character up to U+0020.

use std::time::Duration;

use crate::support::Stack;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_placed_columns_are_skipped_and_blank_payloads_are_tombstones() {
    let stack = Stack::start_on(
        "CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype text, \
             aggregateid text, payload text, tenant text)",
        &[
            "--field-event-key",
            "aggregateid",
            "--field-event-type",
            "",
            "--route-by-field",
            "aggregatetype",
            "--tombstone-on-empty-payload",
            "--fields-additional-placement",
            "region:header,tenant:header",
            "--fields-additional-missing",
            "ignore",
        ],
    )
    .await;
    stack
        .client
        .batch_execute(
            "INSERT INTO outbox VALUES \
               ('00000000-0000-0000-0000-000000000091', 'doc', 'd-1', E' \\t\\r\\n', 't-1'), \
               ('00000000-0000-0000-0000-000000000092', 'doc', 'd-2', ' kept ', 't-2');",
        )
        .await
        .unwrap();
    let reader = stack.broker.consumer();
    reader.subscribe(&["outbox.event.doc"]);
    let mut got = reader.read(2, Duration::from_secs(60));
    assert_eq!(got.len(), 2, "log:\n{}", stack.relay.log());
    got.sort_by(|a, b| a.header("id").cmp(&b.header("id")));
    assert_eq!(got[0].value, None, "whitespace only is empty after trim()");
    assert_eq!(got[1].value.as_deref(), Some(" kept "));
    for m in &got {
        assert!(!m.headers.contains_key("region"), "{:?}", m.headers);
        assert!(m.header("tenant").is_some());
    }
}
