//! Whether a Kafka broker answers, known rather than inferred.
//!
//! librdkafka's own signals cannot say it: with nothing to send it sends no
//! request, a broker that closes an idle connection (connections.max.idle.ms)
//! looks the same as one that is gone, and a list of addresses nothing
//! listens on raises no error an application sees. So walrelay asks: every
//! `INTERVAL` a metadata request for no topic at all (the brokers and the
//! controller only, a few hundred bytes whatever the cluster's size, and
//! never a topic auto-created), through the admin client, which carries no
//! records, so holding it a moment after a session ends delays nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::admin::AdminClient;
use rdkafka::bindings as rdsys;
use rdkafka::client::DefaultClientContext;
use rdkafka::types::RDKafkaRespErr;
use tracing::{info, warn};

use crate::metrics::Metrics;

const INTERVAL: Duration = Duration::from_secs(2);
/// A broker that takes longer than this to answer metadata is not serving.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Probes until dropped (the thread ends within `INTERVAL + TIMEOUT`).
pub struct BrokerProbe {
    stop: Arc<AtomicBool>,
}

impl Drop for BrokerProbe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Starts probing `brokers` (for the log) through `admin`, reporting to
/// `metrics`. A change of answer is logged once, not every probe, nor
/// every session: `metrics` remembers what was said across sessions.
pub fn watch(
    admin: Arc<AdminClient<DefaultClientContext>>,
    brokers: String,
    metrics: Metrics,
) -> BrokerProbe {
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let spawned = std::thread::Builder::new()
        .name("walrelay-kafka-probe".into())
        .spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                let answers = broker_answers(&admin);
                if stopped.load(Ordering::Relaxed) {
                    break;
                }
                let news = metrics.set_kafka_reachable(answers);
                match (news, answers) {
                    (false, _) => {}
                    (true, true) => info!(kafka = %brokers, "Kafka answers again"),
                    (true, false) => warn!(
                        kafka = %brokers,
                        "no Kafka broker answers a metadata request; events wait, and /readyz \
                         fails, until one does; check --kafka-brokers, the network and the \
                         -X security properties"
                    ),
                }
                std::thread::sleep(INTERVAL);
            }
        });
    if let Err(e) = spawned {
        // Without the probe /readyz stays false: loud, and never a false ready.
        warn!(error = %e, "cannot start the Kafka probe; /readyz reports Kafka unreachable");
    }
    BrokerProbe { stop }
}

/// Whether a librdkafka client error reports an established broker
/// connection lost (`... (after 1234ms in state UP)`): a reconnect. A
/// connection that never came up (`in state CONNECT`, a broker list
/// nothing listens on) fails this way at every retry, many times a second,
/// and is no reconnect.
pub fn lost_an_established_connection(reason: &str) -> bool {
    reason.contains("in state UP")
}

/// One metadata request for no topic (all_topics = 0 and no topic handle:
/// librdkafka then asks for the topics it already knows, which for the
/// admin client are none).
fn broker_answers(admin: &AdminClient<DefaultClientContext>) -> bool {
    let client = admin.inner();
    let mut metadata: *const rdsys::rd_kafka_metadata_t = std::ptr::null();
    // SAFETY: the client outlives the call; librdkafka allocates `metadata`
    // only on success, and it is freed once, here.
    let err = unsafe {
        rdsys::rd_kafka_metadata(
            client.native_ptr(),
            0,
            std::ptr::null_mut(),
            &mut metadata,
            TIMEOUT.as_millis() as i32,
        )
    };
    if !metadata.is_null() {
        unsafe { rdsys::rd_kafka_metadata_destroy(metadata) };
    }
    err == RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_connection_that_was_up_counts_as_lost() {
        assert!(lost_an_established_connection(
            "127.0.0.1:9092/1: Disconnected (after 5012ms in state UP)"
        ));
        assert!(lost_an_established_connection(
            "127.0.0.1:9092/1: Disconnected (after 5012ms in state UP, 3 identical error(s) suppressed)"
        ));
        assert!(!lost_an_established_connection(
            "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused \
             (after 0ms in state CONNECT)"
        ));
        assert!(!lost_an_established_connection("1/1 brokers are down"));
    }
}
