//! The core guarantees on Apache Kafka (4.4, one KRaft node, from
//! scripts/kafka.sh), the same scenarios that end_to_end.rs, faults.rs,
//! resilience.rs and broker_faults.rs run on tansu: a real broker's
//! idempotent producer sequences, log recovery after kill -9 and
//! acknowledgements, where tansu is a re-implementation.
//!
//! Each test starts its own broker JVM; `scripts/kafka.sh fetch` (run by
//! scripts/install-deps.sh) must have cached the jars.

mod support;

use std::net::TcpStream;
use std::process::Command;

use support::kafka::{create_topic_at, kafka_script, KafkaReader};
use support::{free_port, guarantees, BrokerKind, TempDir};

const APACHE: BrokerKind = BrokerKind::Apache;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_routed_keyed_and_headed_by_their_columns_on_apache_kafka() {
    guarantees::events_are_routed_keyed_and_headed_by_their_columns(APACHE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_arrive_in_commit_order_on_apache_kafka() {
    guarantees::kafka_order_follows_commit_order_not_start_order(APACHE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_slot_stays_put_while_apache_kafka_is_paused_and_moves_after() {
    guarantees::slot_is_not_advanced_while_broker_is_paused(APACHE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_killed_mid_stream_loses_nothing_on_apache_kafka() {
    guarantees::relay_killed_mid_stream_loses_no_committed_event_after_restart(APACHE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_kill9_restarts_lose_nothing_and_keep_per_key_order_on_apache_kafka() {
    guarantees::twenty_kill9_restarts_under_load_lose_nothing_and_keep_per_key_order(APACHE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apache_kafka_killed_and_restarted_three_times_loses_nothing() {
    guarantees::broker_killed_and_restarted_on_durable_storage_loses_nothing().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apache_kafka_restarted_mid_batch_leaves_no_duplicate_gap_or_reordering() {
    guarantees::a_broker_restarted_mid_batch_leaves_no_duplicate_gap_or_reordering(APACHE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apache_kafka_unreachable_for_a_minute_delays_but_loses_nothing() {
    guarantees::broker_unreachable_for_a_minute_under_load_delays_but_loses_nothing(APACHE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarted_fast_and_immediately_loses_nothing_on_apache_kafka() {
    guarantees::postgres_restarts_fast_and_immediate_lose_nothing(APACHE).await;
}

/// A broker that `scripts/kafka.sh start` left running in `dir`, stopped
/// again on drop.
struct ScriptBroker<'a>(&'a TempDir);

impl ScriptBroker<'_> {
    fn run(&self, args: &[&str]) -> String {
        let out = Command::new(kafka_script()).args(args).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "kafka.sh {args:?}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }
}

impl Drop for ScriptBroker<'_> {
    fn drop(&mut self) {
        let _ = Command::new(kafka_script())
            .arg("stop")
            .arg(&self.0 .0)
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kafka_script_starts_and_stops_a_broker_that_keeps_its_topics() {
    let dir = TempDir::new("kafka-script");
    let dir_arg = dir.0.to_str().unwrap();
    let (port, controller) = (free_port().to_string(), free_port().to_string());
    let broker = ScriptBroker(&dir);
    let start = ["start", dir_arg, &port, &controller];
    let said = broker.run(&start);
    eprintln!("{said}");
    assert!(said.contains("started in"), "{said}");
    let brokers = format!("127.0.0.1:{port}");
    create_topic_at(&brokers, "kept", 2, &[]).await;

    broker.run(&["stop", dir_arg]);
    assert!(
        TcpStream::connect(&brokers).is_err(),
        "the broker still listens"
    );
    assert!(!dir.0.join("broker.pid").exists());

    eprintln!("{}", broker.run(&start));
    assert!(KafkaReader::connect(&brokers).has_topic("kept"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_walrelay_creates_on_a_broker_without_acls_bring_no_permission_warning() {
    use support::outbox::events;
    use support::{Broker, Postgres, Relay};
    let wait = std::time::Duration::from_secs(60);
    let pg = Postgres::start();
    let broker = Broker::start_kind(APACHE);
    let client = pg.client_with_outbox().await;
    let relay = Relay::start(&pg, &broker);
    relay.wait_ready(wait);
    let types = ["Fresh1", "Fresh2", "Fresh3"];
    for event_type in types {
        events(event_type, 1).insert(&client).await;
    }
    let reader = broker.consumer();
    let topics: Vec<String> = types.iter().map(|t| format!("outbox.event.{t}")).collect();
    reader.subscribe(&topics.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(reader.read(3, wait).len(), 3, "{}", relay.log());
    let log = relay.log();
    assert!(log.contains("created topic"), "{log}");
    assert!(
        !log.contains("DESCRIBE_CONFIGS"),
        "a broker without ACLs was blamed for a missing grant:\n{log}"
    );
}
