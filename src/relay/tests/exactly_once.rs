//! Exactly once against the in-memory sink in its transactional mode: where
//! Kafka transactions open and close, what is confirmed when, what a
//! restart reads past, and how each failure ends.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::delivery::publish::transaction::{Memory, Run, TransactionMetrics};
use crate::error::Error;
use crate::postgres::state::ServerId;

/// Runs exactly once with `flags`, reading past what commits below `skip_below`.
fn exactly_once(flags: &[&str], skip_below: Option<Lsn>, memory: Arc<Memory>) -> Relay {
    let mut argv = vec!["--delivery", "exactly-once"];
    argv.extend_from_slice(flags);
    let run = Run {
        skip_below,
        server: ServerId {
            system_id: "7412".into(),
            timeline: 1,
        },
        memory,
        metrics: TransactionMetrics::register(&Metrics::new()),
    };
    Relay::launch(&argv, MemorySink::transactional(), Some(run))
}

/// Kafka transactions that close only when a test says (an hour, a million events).
fn by_hand(flags: &[&str]) -> Relay {
    let mut argv = vec![
        "--transaction-max-duration",
        "1h",
        "--transaction-max-events",
        "1000000",
    ];
    argv.extend_from_slice(flags);
    exactly_once(&argv, None, Arc::default())
}

impl Relay {
    /// Waits until the sink was asked for `count` commits; their positions.
    async fn wait_for_commits(&self, count: usize) -> Vec<Lsn> {
        eventually("commits asked of the sink", || {
            let commits = self.sink.commits();
            (commits.len() >= count).then_some(commits)
        })
        .await
    }

    /// One transaction of `inserts` copies of the captured INSERT's row.
    fn feed_transaction_of(&self, inserts: usize) {
        let captured = captured_pg15();
        let [begin, relation, insert, commit] = &captured[INSERT] else {
            unreachable!()
        };
        self.feed_raw(begin.0, begin.1.clone());
        self.feed_raw(relation.0, relation.1.clone());
        for _ in 0..inserts {
            self.feed_raw(insert.0, insert.1.clone());
        }
        self.feed_raw(commit.0, commit.1.clone());
    }
}

#[tokio::test]
async fn a_postgres_transaction_is_confirmed_only_once_its_kafka_transaction_commits() {
    let relay = exactly_once(&["--transaction-max-events", "1"], None, Arc::default());
    relay.feed(INSERT);
    relay.wait_for_records(1).await;
    assert_eq!(relay.wait_for_commits(1).await, [commit_end(INSERT)]);
    relay.sink.ack(0);
    assert_eq!(
        relay.confirmed_after_a_while().await,
        START,
        "acknowledged inside a Kafka transaction that is not committed"
    );
    relay.sink.settle_commit(0, Ok(()));
    relay.wait_until_confirmed(commit_end(INSERT)).await;
    relay.stop().await;
}

#[tokio::test]
async fn a_postgres_transaction_larger_than_the_limit_is_never_split_and_smaller_ones_share_one() {
    let relay = exactly_once(
        &[
            "--transaction-max-events",
            "2",
            "--transaction-max-duration",
            "1h",
        ],
        None,
        Arc::default(),
    );
    // Three events in one Postgres transaction: past the limit of two, in one.
    relay.feed_transaction_of(3);
    relay.wait_for_records(3).await;
    assert_eq!(relay.wait_for_commits(1).await, [commit_end(INSERT)]);
    for i in 0..3 {
        relay.sink.ack(i);
    }
    relay.sink.settle_commit(0, Ok(()));
    relay.wait_until_confirmed(commit_end(INSERT)).await;
    // Two Postgres transactions of one event each: one Kafka transaction.
    relay.feed(INSERT_AFTER_ALTER);
    relay.wait_for_records(4).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(relay.sink.commits().len(), 1, "closed after one of two");
    relay.feed(INSERT);
    let commits = relay.wait_for_commits(2).await;
    assert_eq!(commits[1], commit_end(INSERT), "the second of the pair");
    relay.sink.settle_commit(1, Ok(()));
    relay.feed(INSERT_AFTER_ALTER);
    relay.wait_for_records(6).await;
    assert_eq!(relay.sink.transaction_of_records(), [0, 0, 0, 1, 1, 2]);
    relay.stop_settling().await;
}

#[tokio::test]
async fn a_kafka_transaction_whose_time_is_up_closes_between_postgres_transactions() {
    let relay = exactly_once(
        &["--transaction-max-duration", "50ms"],
        None,
        Arc::default(),
    );
    relay.feed(INSERT);
    relay.wait_for_records(1).await;
    relay.sink.ack(0);
    // No further Postgres commit comes: the timer closes it.
    assert_eq!(relay.wait_for_commits(1).await, [commit_end(INSERT)]);
    relay.sink.settle_commit(0, Ok(()));
    relay.wait_until_confirmed(commit_end(INSERT)).await;
    relay.stop().await;
}

#[tokio::test]
async fn nothing_is_sent_while_a_kafka_transaction_commits() {
    let relay = exactly_once(&["--transaction-max-events", "1"], None, Arc::default());
    relay.feed(INSERT);
    relay.wait_for_commits(1).await;
    relay.feed(INSERT_AFTER_ALTER);
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The memory sink panics at a record sent during a commit; none came.
    assert_eq!(relay.records().len(), 1);
    relay.sink.settle_commit(0, Ok(()));
    relay.wait_for_records(2).await;
    assert_eq!(relay.sink.transaction_of_records(), [0, 1]);
    relay.stop_settling().await;
}

#[tokio::test]
async fn a_commit_is_remembered_for_later_sessions_only_once_kafka_reports_it_done() {
    let memory: Arc<Memory> = Arc::default();
    let relay = exactly_once(&["--transaction-max-events", "1"], None, memory.clone());
    relay.feed(INSERT);
    relay.wait_for_commits(1).await;
    relay.sink.ack(0);
    assert_eq!(memory.last_committed(), None, "asked, not yet done");
    relay.sink.settle_commit(0, Ok(()));
    relay.wait_until_confirmed(commit_end(INSERT)).await;
    let (server, position) = memory.last_committed().expect("remembered");
    assert_eq!((server.timeline, position), (1, commit_end(INSERT)));
    relay.stop().await;
}

#[tokio::test]
async fn a_failed_commit_ends_the_session_and_confirms_nothing_of_it() {
    let memory: Arc<Memory> = Arc::default();
    let relay = exactly_once(&["--transaction-max-events", "1"], None, memory.clone());
    relay.feed(INSERT);
    relay.wait_for_commits(1).await;
    relay.sink.ack(0);
    relay.sink.settle_commit(
        0,
        Err(Error::transient("the Kafka transaction was aborted")),
    );
    let confirmed = relay.confirmed.clone();
    let error = relay.error().await;
    assert!(error.is_transient(), "{error:?}");
    assert!(confirmed.lock().unwrap().iter().all(|lsn| *lsn == START));
    assert_eq!(memory.last_committed(), None);
}

#[tokio::test]
async fn postgres_transactions_below_the_recorded_position_are_read_past_and_confirmed() {
    let relay = exactly_once(
        &["--transaction-max-events", "1"],
        Some(commit_end(INSERT)),
        Arc::default(),
    );
    relay.feed(INSERT);
    relay.wait_until_confirmed(commit_end(INSERT)).await;
    relay.feed(INSERT_AFTER_ALTER);
    let records = relay.wait_for_records(1).await;
    assert_eq!(
        header(&records[0], "id").as_deref(),
        Some("33333333-3333-3333-3333-333333333333"),
        "only the transaction after the position is sent"
    );
    relay.stop_settling().await;
}

#[tokio::test]
async fn a_stop_commits_whole_postgres_transactions_and_aborts_a_split_one() {
    let relay = by_hand(&[]);
    relay.feed(INSERT);
    relay.wait_for_records(1).await;
    relay.sink.ack(0);
    relay.shutdown.send(true).unwrap();
    assert_eq!(relay.wait_for_commits(1).await, [commit_end(INSERT)]);
    relay.sink.settle_commit(0, Ok(()));
    relay.wait_until_confirmed(commit_end(INSERT)).await;
    relay.task.await.unwrap().unwrap();

    let relay = by_hand(&[]);
    let captured = captured_pg15();
    for (lsn, data) in &captured[INSERT.start..INSERT.end - 1] {
        relay.feed_raw(*lsn, data.clone());
    }
    relay.wait_for_records(1).await;
    relay.sink.ack(0);
    relay.shutdown.send(true).unwrap();
    relay.task.await.unwrap().unwrap();
    assert_eq!(relay.sink.aborted(), [0]);
    assert!(relay.sink.commits().is_empty());
    assert!(relay
        .confirmed
        .lock()
        .unwrap()
        .iter()
        .all(|lsn| *lsn == START));
}

/// Dead-letter mode, a Kafka transaction per Postgres transaction.
const DEAD_LETTER: [&str; 4] = [
    "--on-poison",
    "dead-letter",
    "--transaction-max-events",
    "1",
];

/// A session whose one record Kafka refuses with `refusal`: it ends,
/// transient, saying its transaction is aborted. What it remembered.
async fn refused_in_a_session(refusal: Refusal) -> Arc<Memory> {
    let memory: Arc<Memory> = Arc::default();
    let relay = exactly_once(&DEAD_LETTER, None, memory.clone());
    relay.feed(INSERT);
    relay.wait_for_records(1).await;
    relay.sink.refuse(0, refusal);
    let error = relay.error().await;
    assert!(error.is_transient(), "{error:?}");
    assert!(error.report().contains("aborted"), "{}", error.report());
    memory
}

#[tokio::test]
async fn an_event_kafka_refuses_inside_a_transaction_is_dead_lettered_by_the_next_session() {
    let memory = refused_in_a_session(poison("Broker: Message size too large")).await;
    // The next session reads it again and dead-letters it without sending it.
    let relay = exactly_once(&DEAD_LETTER, None, memory);
    relay.feed(INSERT);
    let records = relay.wait_for_records(1).await;
    assert_eq!(records[0].topic, "walrelay.dead-letter");
    assert!(header(&records[0], "walrelay.reason")
        .unwrap()
        .contains("Message size too large"));
    relay.wait_for_commits(1).await;
    relay.sink.ack(0);
    relay.sink.settle_commit(0, Ok(()));
    relay.wait_until_confirmed(commit_end(INSERT)).await;
    relay.stop().await;
}

#[tokio::test]
async fn a_batch_refused_for_size_inside_a_transaction_is_sent_alone_by_the_next_session() {
    let too_large = Refusal {
        rejection: Rejection::Oversized,
        message: "Broker: Message size too large".into(),
    };
    let memory = refused_in_a_session(too_large).await;
    let relay = exactly_once(&DEAD_LETTER, None, memory);
    relay.feed(INSERT);
    relay.feed(INSERT_AFTER_ALTER);
    let records = relay.wait_for_records(1).await;
    assert_eq!(records[0].topic, "outbox.event.OrderPlaced");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(relay.records().len(), 1, "it travels alone");
    relay.sink.ack(0);
    relay.wait_for_commits(1).await;
    relay.sink.settle_commit(0, Ok(()));
    relay.wait_until_confirmed(commit_end(INSERT)).await;
    relay.stop_settling().await;
}

impl Relay {
    /// Stops, acknowledging every record and committing every Kafka
    /// transaction asked for meanwhile, and expects a clean end.
    async fn stop_settling(self) {
        self.shutdown.send(true).unwrap();
        while !self.task.is_finished() {
            self.sink.ack_waiting();
            self.sink.settle_open_commits();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.task.await.unwrap().unwrap();
    }
}
