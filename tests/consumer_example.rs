//! The runnable consumer example dedupes by event id: a redelivered event
//! is applied once.

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use support::Stack;

const WAIT: Duration = Duration::from_secs(60);

fn example_binary(name: &str) -> PathBuf {
    // target/debug/deps/consumer_example-… → target/debug/examples/NAME
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(name);
    if !path.exists() {
        // `cargo test` builds examples; a filtered run (--test …) may not have.
        let status = Command::new(env!("CARGO"))
            .args(["build", "--example", name])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap();
        assert!(status.success());
    }
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivered_event_is_applied_once() {
    let stack = Stack::start(&[]).await;
    stack.client
        .batch_execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES
               ('00000000-0000-0000-0000-000000000101', 'account', 'acc-1', 'Deposited', '{\"version\": 1, \"amount\": 100}'),
               ('00000000-0000-0000-0000-000000000102', 'account', 'acc-1', 'Deposited', '{\"version\": 1, \"amount\": 20}'),
               ('00000000-0000-0000-0000-000000000103', 'account', 'acc-2', 'Deposited', '{\"version\": 1, \"amount\": 7}');",
        )
        .await
        .unwrap();
    let reader = stack.broker.consumer();
    reader.subscribe(&["outbox.event.Deposited"]);
    assert_eq!(reader.read(3, WAIT).len(), 3);

    // Redeliver the first event, as walrelay may after a crash.
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", stack.broker.brokers())
        .create()
        .unwrap();
    let headers = OwnedHeaders::new().insert(Header {
        key: "id",
        value: Some("00000000-0000-0000-0000-000000000101"),
    });
    producer
        .send(
            BaseRecord::to("outbox.event.Deposited")
                .key("acc-1")
                .payload(r#"{"version": 1, "amount": 100}"#)
                .headers(headers),
        )
        .unwrap();
    producer.flush(Duration::from_secs(10)).unwrap();

    let out = Command::new(example_binary("dedupe_consumer"))
        .args([
            &stack.broker.brokers(),
            "outbox.event.Deposited",
            &stack.pg.url(),
            "4",
            "60",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("read 4, applied 3, skipped 1 duplicates"),
        "{stdout}"
    );

    let total = |id: &'static str| {
        let client = &stack.client;
        async move {
            client
                .query_one("SELECT total FROM totals WHERE aggregate_id = $1", &[&id])
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    };
    assert_eq!(
        total("acc-1").await,
        120,
        "the redelivered deposit counted once"
    );
    assert_eq!(total("acc-2").await, 7);
}
