//! `walrelay redrive` on a real broker: dead-letter records go back to their
//! topics whole, in order per key, a second run sends nothing, a record
//! that fails again stays in the dead-letter topic with the new reason,
//! `--filter-event-type` loses nothing and `--dry-run` sends nothing; a
//! topic that is not there, or a broker that is down, fails at once.
//!
//! On Apache Kafka: redrive reads each partition up to its high watermark
//! as of its start (ListOffsets), and tansu 0.6 answers that request with
//! the last batch's base offset plus one, short of a batch of several
//! records (docs/testing.md).

mod support;

use std::time::Duration;

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use support::kafka::Received;
use support::{Broker, BrokerKind, Postgres, Relay};

const WAIT: Duration = Duration::from_secs(60);
const DEAD_LETTER: &str = "walrelay.dead-letter";

fn broker() -> Broker {
    Broker::start_kind(BrokerKind::Apache)
}

/// A record as `run --on-poison dead-letter` writes it.
struct Poisoned<'a> {
    id: &'a str,
    key: &'a str,
    event_type: &'a str,
    topic: Option<&'a str>,
    value: &'a str,
}

fn poisoned<'a>(id: &'a str, key: &'a str, event_type: &'a str) -> Poisoned<'a> {
    Poisoned {
        id,
        key,
        event_type,
        topic: None,
        value: "{}",
    }
}

impl<'a> Poisoned<'a> {
    fn to(mut self, topic: &'a str) -> Self {
        self.topic = Some(topic);
        self
    }

    fn value(mut self, value: &'a str) -> Self {
        self.value = value;
        self
    }
}

/// Writes records into the dead-letter topic, in order, on its one partition.
fn dead_letter(broker: &Broker, records: &[Poisoned<'_>]) {
    if !broker.consumer().has_topic(DEAD_LETTER) {
        broker.create_topic(DEAD_LETTER, 1);
    }
    let producer: BaseProducer = broker.client_config().create().unwrap();
    for r in records {
        let mut headers = OwnedHeaders::new()
            .insert(Header {
                key: "id",
                value: Some(r.id),
            })
            .insert(Header {
                key: "event_type",
                value: Some(r.event_type),
            })
            .insert(Header {
                key: "walrelay.reason",
                value: Some("Kafka rejected it: first time"),
            })
            .insert(Header {
                key: "walrelay.event-id",
                value: Some(r.id),
            })
            .insert(Header {
                key: "walrelay.commit-lsn",
                value: Some("0/16B3748"),
            });
        if let Some(topic) = r.topic {
            headers = headers.insert(Header {
                key: "walrelay.original-topic",
                value: Some(topic),
            });
        }
        let record = BaseRecord::to(DEAD_LETTER)
            .key(r.key)
            .payload(r.value)
            .partition(0)
            .headers(headers);
        producer.send(record).map_err(|(e, _)| e).unwrap();
    }
    producer.flush(WAIT).unwrap();
}

/// Runs `walrelay redrive` against the broker: (success, stdout, stderr).
fn redrive(broker: &Broker, extra: &[&str]) -> (bool, String, String) {
    let brokers = broker.brokers();
    let args = [
        "redrive",
        "--kafka-brokers",
        &brokers,
        "--group",
        "redrive-tests",
    ];
    support::walrelay(&[&args[..], extra].concat())
}

/// Every record of `topics` that arrives within a few seconds.
fn read_all(broker: &Broker, topics: &[&str]) -> Vec<Received> {
    let reader = broker.consumer();
    reader.subscribe(topics);
    reader.read_for(Duration::from_secs(3))
}

fn ids(records: &[Received], topic: &str) -> Vec<String> {
    records
        .iter()
        .filter(|r| r.topic == topic)
        .map(|r| r.header("id").unwrap_or("").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lettered_event_goes_back_to_its_topic_whole_once_the_cause_is_fixed_and_a_second_run_sends_nothing(
) {
    let pg = Postgres::start();
    let broker = broker();
    let client = pg.client_with_outbox().await;
    broker.create_topic(DEAD_LETTER, 1);
    // The cause: a topic walrelay may not create.
    let relay = Relay::start_with(
        &pg,
        &broker,
        &["--on-poison", "dead-letter", "--topic-create", "false"],
    );
    relay.wait_ready(WAIT);
    client
        .batch_execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES \
             ('00000000-0000-0000-0000-0000000000d1', 'order', 'order-7', 'Missing', '{\"n\": 1}')",
        )
        .await
        .unwrap();
    let reader = broker.consumer();
    reader.subscribe(&[DEAD_LETTER]);
    let parked = reader.read(1, WAIT);
    assert_eq!(parked.len(), 1, "{}", relay.log());

    // The fix: the topic exists now.
    broker.create_topic("outbox.event.Missing", 1);
    let (ok, stdout, stderr) = redrive(&broker, &[]);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("1 redriven"), "{stdout}");
    let got = read_all(&broker, &["outbox.event.Missing"]);
    assert_eq!(got.len(), 1, "{got:?}");
    let event = &got[0];
    assert_eq!(event.key.as_deref(), Some("order-7"));
    assert_eq!(event.value.as_deref(), Some(r#"{"n": 1}"#));
    assert_eq!(
        event.header("id"),
        Some("00000000-0000-0000-0000-0000000000d1")
    );
    assert_eq!(event.header("event_type"), Some("Missing"));
    assert!(
        event
            .raw_headers
            .iter()
            .all(|(n, _)| !n.starts_with("walrelay.")),
        "walrelay's own headers are taken off: {:?}",
        event.raw_headers
    );

    let (ok, stdout, stderr) = redrive(&broker, &[]);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("0 record"), "{stdout}");
    assert_eq!(
        read_all(&broker, &["outbox.event.Missing"]).len(),
        1,
        "a second run sends nothing again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_are_redriven_in_order_per_key() {
    let broker = broker();
    broker.create_topic("outbox.event.Step", 3);
    let ids: Vec<String> = (0..40).map(|i| format!("e-{i:02}")).collect();
    let records: Vec<Poisoned<'_>> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let key = ["a", "b", "c", "d"][i % 4];
            poisoned(id, key, "Step").to("outbox.event.Step")
        })
        .collect();
    dead_letter(&broker, &records);

    let (ok, stdout, stderr) = redrive(&broker, &[]);
    assert!(ok, "{stdout}\n{stderr}");
    let got = read_all(&broker, &["outbox.event.Step"]);
    assert_eq!(got.len(), 40, "{got:?}");
    for key in ["a", "b", "c", "d"] {
        let mut of_key: Vec<&Received> = got
            .iter()
            .filter(|r| r.key.as_deref() == Some(key))
            .collect();
        of_key.sort_by_key(|r| r.offset);
        let sent: Vec<&str> = of_key.iter().map(|r| r.header("id").unwrap()).collect();
        let mut expected = sent.clone();
        expected.sort();
        assert_eq!(sent, expected, "key {key} out of order");
        assert!(of_key.windows(2).all(|w| w[0].partition == w[1].partition));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_fails_again_stays_in_the_dead_letter_topic_with_the_new_reason() {
    let broker = broker();
    broker.create_topic("outbox.event.Fine", 1);
    broker
        .create_topic_with("outbox.event.Small", 1, &[("max.message.bytes", "20000")])
        .await;
    let big = format!(r#"{{"blob": "{}"}}"#, "x".repeat(50_000));
    dead_letter(
        &broker,
        &[
            poisoned("e-big", "k", "Small")
                .to("outbox.event.Small")
                .value(&big),
            poisoned("e-fine", "k2", "Fine").to("outbox.event.Fine"),
            poisoned("e-nowhere", "k3", "Lost"),
        ],
    );

    let (ok, stdout, stderr) = redrive(&broker, &[]);
    assert!(!ok, "a run with failures exits non-zero: {stdout}");
    assert!(stderr.contains("2 records failed again"), "{stderr}");
    assert!(stdout.contains("1 redriven"), "{stdout}");
    let got = read_all(
        &broker,
        &["outbox.event.Fine", "outbox.event.Small", DEAD_LETTER],
    );
    assert_eq!(ids(&got, "outbox.event.Fine"), ["e-fine"]);
    assert!(ids(&got, "outbox.event.Small").is_empty());
    let dead: Vec<&Received> = got.iter().filter(|r| r.topic == DEAD_LETTER).collect();
    assert_eq!(
        dead.len(),
        5,
        "three first copies and two put back: {dead:?}"
    );
    let again = dead
        .iter()
        .find(|r| r.offset >= 3 && r.header("id") == Some("e-big"))
        .expect("the big one is back at the end");
    let reason = again.header("walrelay.reason").unwrap();
    assert!(reason.starts_with("redrive: "), "{reason}");
    assert_eq!(again.value.as_deref(), Some(big.as_str()), "whole");
    assert_eq!(
        again.header("walrelay.original-topic"),
        Some("outbox.event.Small")
    );
    let nowhere = dead
        .iter()
        .find(|r| r.offset >= 3 && r.header("id") == Some("e-nowhere"))
        .expect("the one without a topic is back too");
    assert!(nowhere
        .header("walrelay.reason")
        .unwrap()
        .contains("walrelay replay --where"));

    // The group moved past the old copies: the next run reads the two put back only.
    let (_, stdout, _) = redrive(&broker, &["--dry-run"]);
    assert!(
        stdout.contains("2 records of walrelay.dead-letter"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_run_redrives_only_its_event_types_and_leaves_the_others_for_a_later_run() {
    let broker = broker();
    broker.create_topic("outbox.event.A", 1);
    broker.create_topic("outbox.event.B", 1);
    dead_letter(
        &broker,
        &[
            poisoned("a-1", "k", "A").to("outbox.event.A"),
            poisoned("b-1", "k", "B").to("outbox.event.B"),
            poisoned("a-2", "k", "A").to("outbox.event.A"),
        ],
    );

    let (ok, stdout, stderr) = redrive(&broker, &["--filter-event-type", "A"]);
    assert!(ok, "{stdout}\n{stderr}");
    let got = read_all(&broker, &["outbox.event.A", "outbox.event.B"]);
    assert_eq!(ids(&got, "outbox.event.A"), ["a-1", "a-2"]);
    assert!(ids(&got, "outbox.event.B").is_empty());

    let (ok, stdout, stderr) = redrive(&broker, &[]);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("1 redriven"), "only b-1 is left: {stdout}");
    let got = read_all(&broker, &["outbox.event.A", "outbox.event.B"]);
    assert_eq!(ids(&got, "outbox.event.B"), ["b-1"]);
    assert_eq!(ids(&got, "outbox.event.A"), ["a-1", "a-2"], "nothing twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_prints_each_record_s_fate_and_sends_and_commits_nothing() {
    let broker = broker();
    dead_letter(
        &broker,
        &[
            poisoned("e-1", "k", "A").to("outbox.event.A"),
            poisoned("e-2", "k", "B").to("outbox.event.B"),
        ],
    );
    let (ok, stdout, stderr) = redrive(
        &broker,
        &["--dry-run", "--json", "--filter-event-type", "A"],
    );
    assert!(ok, "{stdout}\n{stderr}");
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["plan"]["records"], 2, "{stdout}");
    let records: Vec<&serde_json::Value> = lines.iter().filter_map(|l| l.get("record")).collect();
    assert_eq!(records.len(), 2, "{stdout}");
    assert_eq!(records[0]["action"], "send");
    assert_eq!(records[0]["topic"], "outbox.event.A");
    assert_eq!(records[0]["event_id"], "e-1");
    assert_eq!(records[1]["action"], "skip");
    let summary = &lines.last().unwrap()["summary"];
    assert_eq!(summary["dry_run"], true);
    assert_eq!(summary["redriven"], 1);
    assert!(
        !broker.consumer().has_topic("outbox.event.A"),
        "nothing sent"
    );

    // Nothing was committed: a real run finds both.
    let (ok, stdout, stderr) = redrive(&broker, &[]);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("2 redriven"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrive_from_a_dead_letter_topic_that_does_not_exist_fails_naming_it() {
    let broker = broker();
    let (ok, stdout, stderr) = redrive(&broker, &[]);
    assert!(!ok, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("does not exist: nothing to redrive"),
        "{stdout}"
    );
    assert!(
        stderr.contains(&format!(
            "the dead-letter topic {DEAD_LETTER} does not exist at {}",
            broker.brokers()
        )) && stderr.contains("--dead-letter-topic"),
        "{stderr}"
    );
}

#[test]
fn redrive_against_a_broker_that_is_down_exits_once_it_has_said_so() {
    let started = std::time::Instant::now();
    let closed = format!("127.0.0.1:{}", support::free_port());
    let (ok, stdout, stderr) = support::walrelay(&["redrive", "--kafka-brokers", &closed]);
    assert!(!ok, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("cannot read the dead-letter topic"),
        "{stderr}"
    );
    // Far below the 30 s request timeout it used to wait out.
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}:\n{stderr}",
        started.elapsed()
    );
}
