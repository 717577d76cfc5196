//! The NestJS/Drizzle writer example, compiled by scripts/test-writers.sh,
//! writes an order and its event in one transaction; walrelay publishes the
//! event. Ignored by a plain `cargo test` because it needs the example's npm
//! packages: scripts/test-writers.sh installs them and runs it.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::Stack;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs examples/writers/node_modules and dist: run scripts/test-writers.sh"]
async fn drizzle_example_order_arrives_in_kafka_with_its_event() {
    let writers = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/writers");
    assert!(
        writers.join("dist/nestjs-drizzle.js").exists(),
        "examples/writers/dist is missing: run scripts/test-writers.sh"
    );
    let stack = Stack::start(&[]).await;
    stack
        .client
        .batch_execute(
            "CREATE TABLE orders (id uuid PRIMARY KEY, customer_id text NOT NULL, \
             total_cents integer NOT NULL)",
        )
        .await
        .unwrap();

    // The service as an application would call it.
    let out = Command::new("node")
        .current_dir(&writers)
        .env("DATABASE_URL", stack.pg.url())
        .args([
            "-e",
            "require('reflect-metadata');
             const { OrdersService } = require('./dist/nestjs-drizzle.js');
             new OrdersService().placeOrder('customer-7', 1999).then(
               (id) => { console.log(id); process.exit(0); },
               (e) => { console.error(e); process.exit(1); });",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let order_id = String::from_utf8(out.stdout).unwrap().trim().to_string();

    let stored: i64 = stack
        .client
        .query_one(
            "SELECT count(*) FROM orders WHERE id = $1::text::uuid",
            &[&order_id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, 1, "the business row is committed with the event");

    let reader = stack.broker.consumer();
    reader.subscribe(&["outbox.event.OrderPlaced"]);
    let got = reader.read(1, Duration::from_secs(60));
    assert_eq!(got.len(), 1, "log:\n{}", stack.relay.log());
    let event = &got[0];
    assert_eq!(event.key.as_deref(), Some(order_id.as_str()));
    assert_eq!(event.header("event_type"), Some("OrderPlaced"));
    assert!(event.header("id").is_some_and(|id| id.len() == 36));
    let payload: Value = serde_json::from_str(event.value.as_deref().unwrap()).unwrap();
    assert_eq!(
        payload,
        serde_json::json!({
            "version": 1,
            "orderId": order_id,
            "customerId": "customer-7",
            "totalCents": 1999
        })
    );
}
