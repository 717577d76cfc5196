//! The broker unreachable for a minute under load: nothing is lost and
//! walrelay never gives up on its own. The broker killed and restarted is
//! tests/apache_kafka.rs's: a broker that survives kill -9 is Apache Kafka
//! (the tests' tansu keeps its data in memory).

mod support;

use support::{guarantees, BrokerKind};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_unreachable_for_a_minute_under_load_delays_but_loses_nothing() {
    guarantees::broker_unreachable_for_a_minute_under_load_delays_but_loses_nothing(
        BrokerKind::from_env(),
    )
    .await;
}
