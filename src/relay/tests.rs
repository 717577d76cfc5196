//! The apply loop against captured pgoutput messages (tests/fixtures) and an
//! in-memory sink: no Postgres, no Kafka. Each test feeds real messages,
//! plays the sink's part (acknowledge, refuse, in any order), and checks
//! what Postgres would be told: the confirmed LSN of every status update.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::{ApplyLoop, Ticket, Upstream};
use crate::config::{run_args, Settings};
use crate::error::Result;
use crate::metrics::Metrics;
use crate::postgres::lsn::Lsn;
use crate::postgres::pgoutput::fixture::captured_pg15;
use crate::postgres::pgoutput::Relation;
use crate::postgres::placement::RelationRole;
use crate::postgres::replication::ReplicationMessage;
use crate::sink::memory::{MemoryHandle, MemorySink};
use crate::sink::{OwnedRecord, Refusal, Rejection};

/// Where the slot stands before the first captured message.
const START: Lsn = Lsn(0x152_C000);

/// The captured messages, by transaction (see the fixture's notes).
const INSERT: std::ops::Range<usize> = 0..4;
const UPDATE: std::ops::Range<usize> = 4..7;
const INSERT_AFTER_ALTER: std::ops::Range<usize> = 14..18;

/// A failure the scripted upstream plays when its turn comes, as etl's
/// test faults do: the apply loop meets it where a real server would put it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// The next read finds the connection closed (a transient error).
    Dropped,
    /// Reads hang from now on, as on a server that stopped answering
    /// without closing the connection.
    Stalled,
    /// The next status update cannot be sent.
    ReportFails,
}

/// Replays messages the test sends and records every status update.
struct Scripted {
    messages: mpsc::UnboundedReceiver<ReplicationMessage>,
    confirmed: Arc<Mutex<Vec<Lsn>>>,
    /// When each status update that asked for a reply went out.
    asked: Arc<Mutex<Vec<tokio::time::Instant>>>,
    faults: Arc<Mutex<std::collections::VecDeque<Fault>>>,
}

impl Scripted {
    /// Takes the next fault if it is one of `which`.
    fn fault(&self, which: &[Fault]) -> Option<Fault> {
        let mut faults = self.faults.lock().unwrap();
        let next = faults.front().copied().filter(|f| which.contains(f))?;
        if next != Fault::Stalled {
            faults.pop_front();
        }
        Some(next)
    }
}

impl Upstream for Scripted {
    async fn next(&mut self) -> Result<ReplicationMessage> {
        match self.fault(&[Fault::Dropped, Fault::Stalled]) {
            Some(Fault::Dropped) => {
                return Err(crate::error::Error::transient(
                    "the replication connection was closed",
                ))
            }
            Some(_) => return std::future::pending().await,
            None => {}
        }
        match self.messages.recv().await {
            Some(message) => Ok(message),
            // The test is done feeding: stay quiet, like an idle server.
            None => std::future::pending().await,
        }
    }

    async fn report(&mut self, _received: Lsn, confirmed: Lsn, reply: bool) -> Result<()> {
        if self.fault(&[Fault::ReportFails]).is_some() {
            return Err(crate::error::Error::transient(
                "cannot send the standby status update",
            ));
        }
        if reply {
            self.asked.lock().unwrap().push(tokio::time::Instant::now());
        }
        self.confirmed.lock().unwrap().push(confirmed);
        Ok(())
    }

    async fn place(&mut self, relation: &Relation) -> Result<RelationRole> {
        Ok(match relation.name.as_str() {
            "outbox" => RelationRole::Outbox {
                not_null: Default::default(),
                defaults: Default::default(),
            },
            _ => RelationRole::Other,
        })
    }

    async fn close(self) {}
}

/// One apply loop running in the background, and the test's side of it.
struct Relay {
    feed: mpsc::UnboundedSender<ReplicationMessage>,
    confirmed: Arc<Mutex<Vec<Lsn>>>,
    asked: Arc<Mutex<Vec<tokio::time::Instant>>>,
    faults: Arc<Mutex<std::collections::VecDeque<Fault>>>,
    sink: MemoryHandle<Ticket>,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<Result<()>>,
}

impl Relay {
    /// Runs with the flags of `walrelay run` plus `flags`.
    fn start(flags: &[&str]) -> Relay {
        Self::launch(flags, MemorySink::new(), None)
    }

    /// Runs on `sink`; exactly once when `run` is given.
    fn launch(
        flags: &[&str],
        (sink, handle): (MemorySink<Ticket>, MemoryHandle<Ticket>),
        run: Option<crate::delivery::publish::transaction::Run>,
    ) -> Relay {
        // Status updates often enough that a test sees each step.
        let mut argv = vec!["--status-interval", "20ms"];
        argv.extend_from_slice(flags);
        let args = run_args(&argv);
        // The loop borrows its settings for as long as it runs.
        let settings: &'static Settings = Box::leak(Box::new(Settings::from_args(&args).unwrap()));
        let (feed, messages) = mpsc::unbounded_channel();
        let confirmed = Arc::new(Mutex::new(Vec::new()));
        let (asked, faults) = (Arc::default(), Arc::default());
        let upstream = Scripted {
            messages,
            confirmed: confirmed.clone(),
            asked: Arc::clone(&asked),
            faults: Arc::clone(&faults),
        };
        let (shutdown, mut stop) = watch::channel(false);
        let mut apply = ApplyLoop::new(
            settings,
            upstream,
            sink,
            START,
            Duration::from_secs(60),
            Metrics::new(),
        );
        if let Some(run) = run {
            apply = apply.exactly_once(settings.exactly_once.clone().unwrap(), run);
        }
        let task = tokio::spawn(async move { apply.run(&mut stop).await });
        Relay {
            feed,
            confirmed,
            asked,
            faults,
            sink: handle,
            shutdown,
            task,
        }
    }

    /// Feeds captured messages as the server would send them.
    fn feed(&self, range: std::ops::Range<usize>) {
        for (lsn, data) in &captured_pg15()[range] {
            self.feed_raw(*lsn, data.clone());
        }
    }

    /// Queues a fault for the upstream to play at its turn.
    fn inject(&self, fault: Fault) {
        self.faults.lock().unwrap().push_back(fault);
    }

    fn feed_raw(&self, wal_start: Lsn, data: Bytes) {
        let message = ReplicationMessage::XLogData {
            wal_start,
            wal_end: wal_start,
            data,
        };
        self.feed.send(message).unwrap();
    }

    fn records(&self) -> Vec<OwnedRecord> {
        self.sink.records()
    }

    /// Waits until `count` records have reached the sink.
    async fn wait_for_records(&self, count: usize) -> Vec<OwnedRecord> {
        eventually("records to reach the sink", || {
            let records = self.records();
            (records.len() >= count).then_some(records)
        })
        .await
    }

    /// Waits until a status update confirms `lsn`.
    async fn wait_until_confirmed(&self, lsn: Lsn) {
        eventually(&format!("a status update confirming {lsn}"), || {
            self.confirmed.lock().unwrap().contains(&lsn).then_some(())
        })
        .await
    }

    /// Acknowledges record `index` and waits for the confirmation it allows.
    async fn ack_until_confirmed(&self, index: usize, lsn: Lsn) {
        self.sink.ack(index);
        self.wait_until_confirmed(lsn).await;
    }

    /// The furthest position any status update has confirmed.
    fn confirmed(&self) -> Lsn {
        self.confirmed
            .lock()
            .unwrap()
            .iter()
            .copied()
            .max()
            .unwrap_or(START)
    }

    /// Lets a few status updates go out, then says what they confirmed.
    async fn confirmed_after_a_while(&self) -> Lsn {
        tokio::time::sleep(Duration::from_millis(150)).await;
        self.confirmed()
    }

    /// Waits for the loop to stop on its own, with its error.
    async fn failure(self) -> String {
        self.error().await.report()
    }

    async fn error(self) -> crate::error::Error {
        let ended = tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("the apply loop did not stop")
            .unwrap();
        ended.expect_err("the apply loop stopped without an error")
    }

    async fn stop(self) {
        self.shutdown.send(true).unwrap();
        self.task.await.unwrap().unwrap();
    }
}

async fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    for _ in 0..1000 {
        if let Some(value) = check() {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("gave up waiting for {what}");
}

/// The end LSN of a captured transaction: its Commit message's position.
fn commit_end(range: std::ops::Range<usize>) -> Lsn {
    captured_pg15()[range.end - 1].0
}

fn poison(message: &str) -> Refusal {
    Refusal {
        rejection: Rejection::Poison,
        message: message.into(),
    }
}

/// A `pg_logical_emit_message` as pgoutput sends it.
fn emitted(transactional: bool, lsn: Lsn, prefix: &str, content: &str) -> Bytes {
    let mut b = BytesMut::new();
    b.put_u8(b'M');
    b.put_u8(u8::from(transactional));
    b.put_u64(lsn.0);
    b.put_slice(prefix.as_bytes());
    b.put_u8(0);
    b.put_u32(content.len() as u32);
    b.put_slice(content.as_bytes());
    b.freeze()
}

fn header(record: &OwnedRecord, name: &str) -> Option<String> {
    record
        .header(name)
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

#[tokio::test]
async fn a_commit_is_confirmed_only_after_the_sink_acknowledges_its_event() {
    let relay = Relay::start(&[]);
    relay.feed(INSERT);
    let records = relay.wait_for_records(1).await;
    let event = &records[0];
    assert_eq!(event.topic, "outbox.event.OrderPlaced");
    assert_eq!(event.key.as_deref(), Some(&b"o-1"[..]));
    assert_eq!(
        header(event, "id").as_deref(),
        Some("11111111-1111-1111-1111-111111111111")
    );
    assert_eq!(header(event, "event_type").as_deref(), Some("OrderPlaced"));
    assert_eq!(relay.confirmed_after_a_while().await, START);

    relay.ack_until_confirmed(0, commit_end(INSERT)).await;
    relay.stop().await;
}

#[tokio::test]
async fn an_event_in_flight_does_not_keep_its_replication_message_alive() {
    // Each message is a slice of a read buffer of 64 KiB or more: a ticket
    // holding a slice of it would keep the whole buffer for as long as
    // Kafka takes, which --max-inflight-bytes does not count.
    let relay = Relay::start(&[]);
    let messages = captured_pg15()[INSERT].to_vec();
    for (lsn, data) in &messages {
        relay.feed_raw(*lsn, data.clone());
    }
    relay.wait_for_records(1).await;
    let tickets = relay.sink.waiting_tickets();
    assert_eq!(tickets.len(), 1);
    let id = tickets[0].event_id.as_ref().expect("the event has an id");
    assert_eq!(&id[..], b"11111111-1111-1111-1111-111111111111");
    for (_, data) in &messages {
        let message = data.as_ptr() as usize..data.as_ptr() as usize + data.len();
        assert!(
            !message.contains(&(id.as_ptr() as usize)),
            "the ticket's event id is a slice of the replication message"
        );
    }
    relay.ack_until_confirmed(0, commit_end(INSERT)).await;
    relay.stop().await;
}

#[tokio::test]
async fn a_full_window_stops_reading_until_an_acknowledgement() {
    let relay = Relay::start(&["--max-inflight-events", "1"]);
    relay.feed(INSERT);
    relay.feed(INSERT_AFTER_ALTER);
    relay.wait_for_records(1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(relay.records().len(), 1, "read past a full window");

    relay.sink.ack(0);
    relay.wait_for_records(2).await;
    relay
        .ack_until_confirmed(1, commit_end(INSERT_AFTER_ALTER))
        .await;
    relay.stop().await;
}

#[tokio::test]
async fn acknowledgements_are_taken_while_the_server_never_stops_sending() {
    // Deliveries do not wake a loop that reads; a server that keeps it busy
    // must not keep them from being taken.
    let relay = Relay::start(&[]);
    relay.feed(INSERT);
    relay.wait_for_records(1).await;
    let feed = relay.feed.clone();
    let chatter = tokio::spawn(async move {
        loop {
            let keepalive = ReplicationMessage::Keepalive {
                wal_end: START,
                reply_requested: false,
            };
            if feed.send(keepalive).is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });

    relay.ack_until_confirmed(0, commit_end(INSERT)).await;
    chatter.abort();
    relay.stop().await;
}

#[tokio::test]
async fn acknowledgements_out_of_order_confirm_only_the_unbroken_prefix() {
    let relay = Relay::start(&[]);
    relay.feed(INSERT);
    relay.feed(INSERT_AFTER_ALTER);
    relay.wait_for_records(2).await;

    relay.sink.ack(1);
    assert_eq!(
        relay.confirmed_after_a_while().await,
        START,
        "the later transaction was confirmed before the earlier one"
    );
    relay
        .ack_until_confirmed(0, commit_end(INSERT_AFTER_ALTER))
        .await;
    relay.stop().await;
}

#[tokio::test]
async fn a_poison_event_halts_walrelay_before_the_slot_moves_past_it() {
    let relay = Relay::start(&["--on-poison", "halt"]);
    relay.feed(INSERT);
    relay.wait_for_records(1).await;
    relay
        .sink
        .refuse(0, poison("Broker: Message size too large"));
    let confirmed = relay.confirmed.clone();
    let error = relay.failure().await;
    assert!(
        error.contains("11111111-1111-1111-1111-111111111111")
            && error.contains("Message size too large")
            && error.contains("--on-poison dead-letter"),
        "{error}"
    );
    assert!(confirmed.lock().unwrap().iter().all(|lsn| *lsn == START));
}

#[tokio::test]
async fn a_poison_event_is_dead_lettered_and_confirmed_once_its_copy_is_acknowledged() {
    let relay = Relay::start(&["--on-poison", "dead-letter"]);
    relay.feed(INSERT);
    relay.wait_for_records(1).await;
    relay
        .sink
        .refuse(0, poison("Broker: Message size too large"));

    let records = relay.wait_for_records(2).await;
    let copy = &records[1];
    assert_eq!(copy.topic, "walrelay.dead-letter");
    assert_eq!(copy.key, records[0].key);
    assert_eq!(copy.value, records[0].value);
    assert_eq!(header(copy, "id"), header(&records[0], "id"));
    let reason = header(copy, "walrelay.reason").unwrap();
    assert!(reason.contains("Message size too large"), "{reason}");
    assert_eq!(
        header(copy, "walrelay.original-topic").as_deref(),
        Some("outbox.event.OrderPlaced")
    );
    assert_eq!(relay.confirmed_after_a_while().await, START);

    relay.ack_until_confirmed(1, commit_end(INSERT)).await;
    relay.stop().await;
}

#[tokio::test]
async fn an_event_for_a_topic_walrelay_may_not_use_is_dead_lettered_without_being_sent() {
    let relay = Relay::start(&["--on-poison", "dead-letter"]);
    relay
        .sink
        .close_topic("outbox.event.OrderPlaced", "topic is not allowed");
    relay.feed(INSERT);
    let records = relay.wait_for_records(1).await;
    assert_eq!(records[0].topic, "walrelay.dead-letter");
    assert_eq!(
        header(&records[0], "walrelay.reason").as_deref(),
        Some("topic is not allowed")
    );
    // Named, so `walrelay redrive` can send it there once it may be used.
    assert_eq!(
        header(&records[0], "walrelay.original-topic").as_deref(),
        Some("outbox.event.OrderPlaced")
    );
    relay.ack_until_confirmed(0, commit_end(INSERT)).await;
    relay.stop().await;
}

#[tokio::test]
async fn an_update_of_an_outbox_row_is_ignored_unless_on_update_is_fatal() {
    let relay = Relay::start(&["--on-update", "warn"]);
    relay.feed(INSERT);
    relay.feed(UPDATE);
    relay.wait_for_records(1).await;
    relay.ack_until_confirmed(0, commit_end(UPDATE)).await;
    assert_eq!(relay.records().len(), 1, "an UPDATE became an event");
    relay.stop().await;

    let relay = Relay::start(&["--on-update", "fatal"]);
    relay.feed(INSERT);
    relay.feed(UPDATE);
    relay.wait_for_records(1).await;
    relay.sink.ack(0);
    let error = relay.failure().await;
    assert!(error.contains("--on-update"), "{error}");
}

#[tokio::test]
async fn a_non_transactional_message_is_never_published_as_an_event() {
    let content =
        r#"{"id": "m-9", "aggregate_id": "o-9", "event_type": "OrderPlaced", "payload": {}}"#;
    let lsn = Lsn(0x152_E000);

    let relay = Relay::start(&["--source", "messages"]);
    relay.feed_raw(lsn, emitted(false, lsn, "walrelay", content));
    let error = relay.failure().await;
    assert!(
        error.contains("m-9") && error.contains("non-transactional"),
        "{error}"
    );

    let relay = Relay::start(&["--source", "messages", "--on-poison", "dead-letter"]);
    relay.feed_raw(lsn, emitted(false, lsn, "walrelay", content));
    let records = relay.wait_for_records(1).await;
    assert_eq!(records[0].topic, "walrelay.dead-letter");
    relay.ack_until_confirmed(0, lsn).await;
    relay.stop().await;
}

#[tokio::test]
async fn a_transactional_message_is_an_event_of_its_transaction() {
    let content = r#"{"id": "m-1", "aggregate_id": "o-1", "event_type": "OrderPaid", "payload": {"total": 5}}"#;
    let captured = captured_pg15();
    let (begin, commit) = (&captured[18], &captured[20]);
    let relay = Relay::start(&["--source", "messages"]);
    relay.feed_raw(begin.0, begin.1.clone());
    relay.feed_raw(begin.0, emitted(true, begin.0, "walrelay", content));
    // Another prefix is another application's message, not an event.
    relay.feed_raw(begin.0, emitted(true, begin.0, "audit", content));
    relay.feed_raw(commit.0, commit.1.clone());
    let records = relay.wait_for_records(1).await;
    assert_eq!(records[0].topic, "outbox.event.OrderPaid");
    assert_eq!(records[0].value.as_deref(), Some(&br#"{"total": 5}"#[..]));
    relay.ack_until_confirmed(0, commit.0).await;
    assert_eq!(relay.records().len(), 1);
    relay.stop().await;
}

#[tokio::test]
async fn a_full_sink_queue_is_waited_out_without_losing_the_record() {
    let relay = Relay::start(&[]);
    relay.sink.set_capacity(1);
    relay.feed(INSERT);
    relay.feed(INSERT_AFTER_ALTER);
    relay.wait_for_records(1).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(relay.records().len(), 1);
    relay.sink.ack(0);
    relay.wait_for_records(2).await;
    relay
        .ack_until_confirmed(1, commit_end(INSERT_AFTER_ALTER))
        .await;
    relay.stop().await;
}

#[tokio::test]
async fn a_message_walrelay_cannot_decode_stops_it_for_good_before_the_slot_moves() {
    let relay = Relay::start(&[]);
    let begin = &captured_pg15()[INSERT.start];
    relay.feed_raw(begin.0, begin.1.clone());
    // A message type pgoutput does not have (as a newer protocol might send).
    relay.feed_raw(begin.0, Bytes::from_static(b"Zsomething new"));
    assert_eq!(relay.confirmed_after_a_while().await, START);
    let error = relay.error().await;
    assert!(
        !error.is_transient(),
        "a reconnect would read it again: {error:?}"
    );
    let text = error.report();
    assert!(
        text.contains("cannot decode the pgoutput message at LSN")
            && text.contains(&format!("the slot stays at {START}")),
        "{text}"
    );
}

#[tokio::test]
async fn a_relation_whose_name_is_not_utf8_stops_walrelay_for_good_before_the_slot_moves() {
    let relay = Relay::start(&[]);
    let begin = &captured_pg15()[INSERT.start];
    relay.feed_raw(begin.0, begin.1.clone());
    // A Relation message: oid, namespace, a name in another encoding
    // (a server with a non-UTF-8 database encoding), replica identity, no columns.
    let mut raw = b"R".to_vec();
    raw.extend_from_slice(&16_384u32.to_be_bytes());
    raw.extend_from_slice(b"public\0");
    raw.extend_from_slice(b"outb\xf6x\0");
    raw.push(b'd');
    raw.extend_from_slice(&0i16.to_be_bytes());
    relay.feed_raw(begin.0, Bytes::from(raw));
    assert_eq!(relay.confirmed_after_a_while().await, START);
    let error = relay.error().await;
    assert!(!error.is_transient(), "{error:?}");
    let text = error.report();
    assert!(text.contains("is not UTF-8"), "{text}");
    assert!(
        text.contains(&format!("the slot stays at {START}")),
        "{text}"
    );
}

#[tokio::test]
async fn a_batch_refused_for_size_is_sent_again_record_by_record_and_only_the_offender_is_poison() {
    let relay = Relay::start(&["--on-poison", "dead-letter"]);
    relay.feed(INSERT);
    relay.feed(INSERT_AFTER_ALTER);
    let first = relay.wait_for_records(2).await;
    // The broker refuses their batch: every record of it gets the error.
    let too_large = || Refusal {
        rejection: Rejection::Oversized,
        message: "Broker: Message size too large".into(),
    };
    relay.sink.refuse(0, too_large());
    relay.sink.refuse(1, too_large());

    // The first goes again alone; the second waits for its outcome.
    let again = relay.wait_for_records(3).await;
    assert_eq!(
        (&again[2].topic, &again[2].value),
        (&first[0].topic, &first[0].value)
    );
    assert_eq!(again[2].partition, first[0].partition);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        relay.records().len(),
        3,
        "a second record was sent beside it"
    );
    assert_eq!(relay.confirmed(), START);
    relay.sink.ack(2);
    relay.wait_until_confirmed(commit_end(INSERT)).await;

    // Alone, the second is refused again: it is the offender.
    let again = relay.wait_for_records(4).await;
    assert_eq!(again[3].value, first[1].value);
    relay.sink.refuse(3, too_large());
    let copies = relay.wait_for_records(5).await;
    assert_eq!(copies[4].topic, "walrelay.dead-letter");
    assert_eq!(copies[4].value, first[1].value);
    assert!(header(&copies[4], "walrelay.reason")
        .unwrap()
        .contains("size too large"));
    relay
        .ack_until_confirmed(4, commit_end(INSERT_AFTER_ALTER))
        .await;
    assert_eq!(
        relay.records().len(),
        5,
        "the good record was not dead-lettered"
    );
    relay.stop().await;
}

/// What a sink says of a topic whose limit is below the producer's batches.
fn below_the_batches() -> crate::sink::TopicInfo {
    crate::sink::TopicInfo {
        max_record_bytes: Some(2000),
        assumed: false,
        send_alone: true,
    }
}

#[tokio::test]
async fn each_record_to_a_topic_whose_limit_is_below_the_batches_travels_alone() {
    let relay = Relay::start(&[]);
    relay
        .sink
        .set_topic_info("outbox.event.OrderPlaced", below_the_batches());
    relay.feed(INSERT);
    relay.feed(INSERT_AFTER_ALTER);
    let first = relay.wait_for_records(1).await;
    assert_eq!(first[0].topic, "outbox.event.OrderPlaced");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        relay.records().len(),
        1,
        "a second record was sent beside it"
    );
    relay.sink.ack(0);
    relay.wait_for_records(2).await;
    relay
        .ack_until_confirmed(1, commit_end(INSERT_AFTER_ALTER))
        .await;
    relay.stop().await;
}

#[tokio::test]
async fn a_copy_to_a_dead_letter_topic_whose_limit_is_below_the_batches_travels_alone() {
    let relay = Relay::start(&["--on-poison", "dead-letter"]);
    relay.sink.set_dead_letter_info(below_the_batches());
    relay.feed(INSERT);
    relay.feed(INSERT_AFTER_ALTER);
    relay.wait_for_records(2).await;
    relay.sink.refuse(0, poison("Broker: Invalid record"));
    // The copy waits for the record still in flight, not for its original.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        relay.records().len(),
        2,
        "the copy was sent beside a record"
    );
    relay.sink.ack(1);
    let records = relay.wait_for_records(3).await;
    assert_eq!(records[2].topic, "walrelay.dead-letter");
    relay
        .ack_until_confirmed(2, commit_end(INSERT_AFTER_ALTER))
        .await;
    relay.stop().await;
}

#[tokio::test]
async fn in_halt_mode_a_batch_refused_for_size_stops_walrelay_naming_the_offender_not_its_neighbour(
) {
    let relay = Relay::start(&["--on-poison", "halt"]);
    relay.feed(INSERT);
    relay.feed(INSERT_AFTER_ALTER);
    let first = relay.wait_for_records(2).await;
    let too_large = || Refusal {
        rejection: Rejection::Oversized,
        message: "Broker: Message size too large".into(),
    };
    relay.sink.refuse(0, too_large());
    relay.sink.refuse(1, too_large());
    // The innocent one, alone, is delivered and confirmed.
    relay.wait_for_records(3).await;
    relay.sink.ack(2);
    relay.wait_until_confirmed(commit_end(INSERT)).await;
    // The offender, alone, is refused again: walrelay halts naming it.
    relay.wait_for_records(4).await;
    relay.sink.refuse(3, too_large());
    assert_eq!(relay.confirmed_after_a_while().await, commit_end(INSERT));
    let text = relay.error().await.report();
    let offender = header(&first[1], "id").unwrap();
    let neighbour = header(&first[0], "id").unwrap();
    assert!(text.contains(&offender), "{text}");
    assert!(!text.contains(&neighbour), "{text}");
}

mod exactly_once;
mod faults;
mod timing;
