//! Faults injected in the scripted upstream (`Fault`), where a real server
//! or network would put them: in the middle of a transaction, after some
//! of its events reached the sink. Whatever the fault, the session ends
//! with an error and nothing of the interrupted transaction is confirmed,
//! so the next session reads it again from the slot.

use super::*;

/// The captured INSERT confirmed, and the next transaction's Begin,
/// Relation and Insert read, its event acknowledged, its Commit not yet.
async fn midway() -> Relay {
    let relay = Relay::start(&[]);
    relay.feed(INSERT);
    relay.wait_for_records(1).await;
    relay.ack_until_confirmed(0, commit_end(INSERT)).await;
    let open = INSERT_AFTER_ALTER.start..INSERT_AFTER_ALTER.end - 1;
    relay.feed(open);
    relay.wait_for_records(2).await;
    relay.sink.ack(1);
    relay
}

/// The furthest position a status update confirmed: the first commit's,
/// nothing of the interrupted transaction.
fn assert_still_at_the_first_commit(confirmed: &Mutex<Vec<Lsn>>) {
    let furthest = confirmed.lock().unwrap().iter().copied().max();
    assert_eq!(furthest, Some(commit_end(INSERT)));
}

#[tokio::test]
async fn a_connection_dropped_in_the_middle_of_a_transaction_confirms_nothing_of_it() {
    let relay = midway().await;
    relay.inject(Fault::Dropped);
    let confirmed = relay.confirmed.clone();
    let error = relay.error().await;
    assert!(error.is_transient(), "{error:?}");
    assert!(error.report().contains("closed"), "{error:?}");
    assert_still_at_the_first_commit(&confirmed);
}

#[tokio::test(start_paused = true)]
async fn a_server_that_stalls_in_the_middle_of_a_transaction_is_given_up_at_the_timeout() {
    let relay = midway().await;
    relay.inject(Fault::Stalled);
    let confirmed = relay.confirmed.clone();
    let error = relay.ended().await;
    super::timing::assert_gave_up_on_silence(&error);
    assert_still_at_the_first_commit(&confirmed);
}

#[tokio::test]
async fn a_malformed_message_in_a_transaction_stops_walrelay_before_it_with_the_slot_named() {
    let relay = midway().await;
    // An Insert with its tuple cut off.
    let lsn = commit_end(INSERT_AFTER_ALTER);
    relay.feed_raw(lsn, Bytes::from_static(b"I\x00\x00"));
    let confirmed = relay.confirmed.clone();
    let error = relay.error().await;
    assert!(!error.is_transient(), "{error:?}");
    let report = error.report();
    assert!(
        report.contains(&format!("the slot stays at {}", commit_end(INSERT))),
        "{report}"
    );
    assert_still_at_the_first_commit(&confirmed);
}

#[tokio::test]
async fn a_status_update_that_cannot_be_sent_ends_the_session_to_be_tried_again() {
    let relay = midway().await;
    relay.inject(Fault::ReportFails);
    let error = relay.error().await;
    assert!(error.is_transient(), "{error:?}");
    assert!(
        error
            .report()
            .contains("cannot send the standby status update"),
        "{error:?}"
    );
}
