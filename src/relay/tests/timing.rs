//! The apply loop's timers on paused tokio time (`start_paused`): tokio
//! moves the clock straight to the next timer whenever every task waits,
//! so an hour-long timeout takes no time at all and a busy machine cannot
//! make a test late. `Relay::launch` gives the loop a read timeout of 60 s.

use super::*;
use crate::postgres::replication::ReplicationMessage;
use tokio::time::Instant;

const READ_TIMEOUT: Duration = Duration::from_secs(60);

impl Relay {
    /// The loop's own end, however long it takes on paused time
    /// (`Relay::error` would give up after 10 s of it).
    pub(super) async fn ended(self) -> crate::error::Error {
        self.task
            .await
            .unwrap()
            .expect_err("the apply loop stopped without an error")
    }

    fn asked(&self) -> Vec<Instant> {
        self.asked.lock().unwrap().clone()
    }
}

/// The error of a session ended by the server's silence: worth a new
/// session, and naming the flag that sets how long walrelay waits.
pub(super) fn assert_gave_up_on_silence(error: &crate::error::Error) {
    assert!(error.is_transient(), "{error:?}");
    assert!(
        error.report().contains("--replication-timeout"),
        "{error:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_quiet_server_is_asked_for_a_reply_at_half_the_replication_timeout() {
    let started = Instant::now();
    let relay = Relay::start(&[]);
    tokio::time::sleep(READ_TIMEOUT / 2 - Duration::from_millis(100)).await;
    assert_eq!(relay.asked(), [], "asked before half the timeout");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let asked = relay.asked();
    assert_eq!(asked.len(), 1, "asked once: {asked:?}");
    assert!(asked[0] - started >= READ_TIMEOUT / 2);
    relay.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_server_silent_for_the_whole_replication_timeout_ends_the_session_naming_the_flag() {
    let started = Instant::now();
    let relay = Relay::start(&[]);
    let error = relay.ended().await;
    let waited = started.elapsed();
    assert!(
        (READ_TIMEOUT..READ_TIMEOUT + Duration::from_secs(1)).contains(&waited),
        "gave up after {waited:?}"
    );
    assert_gave_up_on_silence(&error);
}

#[tokio::test(start_paused = true)]
async fn a_keepalive_from_the_server_puts_the_timeout_off() {
    let started = Instant::now();
    let relay = Relay::start(&[]);
    tokio::time::sleep(Duration::from_secs(40)).await;
    relay
        .feed
        .send(ReplicationMessage::Keepalive {
            wal_end: START,
            reply_requested: false,
        })
        .unwrap();
    let error = relay.ended().await;
    let waited = started.elapsed();
    // Counted from the keepalive at 40 s, not from the start.
    assert!(
        waited >= Duration::from_secs(40) + READ_TIMEOUT,
        "gave up after {waited:?}"
    );
    assert_gave_up_on_silence(&error);
}

#[tokio::test(start_paused = true)]
async fn a_kafka_transaction_closes_when_its_time_is_up_and_not_before() {
    let memory = Arc::default();
    let run = crate::delivery::publish::transaction::Run {
        skip_below: None,
        server: crate::postgres::state::ServerId {
            system_id: "7412".into(),
            timeline: 1,
        },
        memory,
        metrics: crate::delivery::publish::transaction::TransactionMetrics::register(
            &Metrics::new(),
        ),
    };
    let relay = Relay::launch(
        &[
            "--delivery",
            "exactly-once",
            "--transaction-max-duration",
            "5s",
        ],
        MemorySink::transactional(),
        Some(run),
    );
    relay.feed(INSERT);
    relay.wait_for_records(1).await;
    let opened = Instant::now();
    relay.sink.ack(0);
    tokio::time::sleep(Duration::from_millis(4900)).await;
    assert_eq!(relay.sink.commits(), [], "committed before its time");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(relay.sink.commits(), [commit_end(INSERT)]);
    assert!(opened.elapsed() <= Duration::from_millis(5100));
    relay.sink.settle_commit(0, Ok(()));
    relay.wait_until_confirmed(commit_end(INSERT)).await;
    relay.stop().await;
}
