//! The broker killed and restarted, and unreachable for a minute, under
//! load: nothing is lost and walrelay never gives up on its own.

mod support;

use support::{guarantees, BrokerKind};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_killed_and_restarted_on_durable_storage_loses_nothing() {
    guarantees::broker_killed_and_restarted_on_durable_storage_loses_nothing(BrokerKind::from_env()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_unreachable_for_a_minute_under_load_delays_but_loses_nothing() {
    guarantees::broker_unreachable_for_a_minute_under_load_delays_but_loses_nothing(
        BrokerKind::from_env(),
    )
    .await;
}
