//! walrelay on an Apache Kafka broker that wants a SASL/SCRAM-SHA-512 login
//! and holds every principal to its ACLs (StandardAuthorizer, nothing
//! allowed without an ACL): a good login relays, a wrong password stops
//! walrelay with the properties to fix and without printing the secret, and
//! each missing permission halts it with the ACL to grant, the event still
//! in the slot.
//!
//! One broker serves every test (a JVM per test would cost seconds): each
//! test has a principal and topics of its own. tansu has no SASL or ACLs.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::kafka::{AclOperation::*, AclResource};
use support::outbox::events;
use support::pg::slot_still_holds;
use support::{check_entry, check_json, eventually, Broker, Postgres, Relay};

const WAIT: Duration = Duration::from_secs(60);

/// Every principal of this binary and its password, created with the broker.
const USERS: &[(&str, &str)] = &[
    ("relay", RELAY_PASSWORD),
    ("nowrite", "nowrite-secret-31"),
    ("blind", "blind-secret-47"),
    ("nocreate", "nocreate-secret-59"),
    ("readonly", "readonly-secret-61"),
    ("checker", "checker-secret-73"),
    ("noconfigs", "noconfigs-secret-83"),
];
const RELAY_PASSWORD: &str = "relay-secret-Ok7q";
/// Distinct enough that any trace of it in a log is a leak.
const WRONG_PASSWORD: &str = "wrong-secret-Zz9x";

fn broker() -> &'static Broker {
    Broker::shared_apache_secure(USERS)
}

fn password(user: &str) -> &'static str {
    USERS.iter().find(|(u, _)| *u == user).unwrap().1
}

/// A walrelay logging in as `user` with `password`, its topics named
/// `{prefix}${routedByValue}`, with `extra` flags.
fn relay(pg: &Postgres, user: &str, password: &str, prefix: &str, extra: &[&str]) -> Relay {
    let broker = broker();
    let mut flags = broker.login_flags(user, password);
    flags.extend([
        "--topic-replacement".into(),
        format!("{prefix}${{routedByValue}}"),
    ]);
    flags.extend(extra.iter().map(|s| s.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    Relay::start_with(pg, broker, &flags)
}

/// One event of type Placed with id `id`.
async fn placed(client: &tokio_postgres::Client, id: &str) {
    events("Placed", 1)
        .id(id)
        .aggregate("order-1")
        .payload(r#"{"n": 1}"#)
        .insert(client)
        .await;
}

/// Waits until walrelay has made its slot, so an event written after is
/// in it; walrelay may not become ready (its login to Kafka may fail).
async fn slot_made(client: &tokio_postgres::Client) {
    eventually(WAIT, "walrelay to make its slot", || async {
        let row = client
            .query_opt(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = 'walrelay'",
                &[],
            )
            .await
            .unwrap();
        row.map(|_| ())
    })
    .await;
}

/// Waits for walrelay to stop with a failure; its log.
fn halted(relay: &mut Relay) -> String {
    relay.wait_for_failure(WAIT)
}

fn assert_mentions(log: &str, words: &[&str]) {
    for word in words {
        assert!(log.contains(word), "the log should say {word:?}:\n{log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_scram_login_relays_events_into_topics_walrelay_creates() {
    let broker = broker();
    // The least walrelay needs when it creates its topics.
    broker.grant(
        "User:relay",
        AclResource::TopicPrefix("sasl.ok."),
        &[Describe, Write, Create],
    );
    let pg = Postgres::start();
    let client = pg.client_with_outbox().await;
    let relay = relay(&pg, "relay", RELAY_PASSWORD, "sasl.ok.", &[]);
    relay.wait_ready(WAIT);

    let id = "00000000-0000-0000-0000-00000000a001";
    placed(&client, id).await;
    let reader = broker.consumer();
    reader.subscribe(&["sasl.ok.Placed"]);
    let got = reader.read(1, WAIT);
    assert_eq!(got.len(), 1, "{}", relay.log());
    assert_eq!(got[0].key.as_deref(), Some("order-1"));
    assert_eq!(got[0].header("id"), Some(id));
    assert_eq!(got[0].header("event_type"), Some("Placed"));
    assert_eq!(got[0].value.as_deref(), Some(r#"{"n": 1}"#));
    assert!(!relay.log().contains(RELAY_PASSWORD), "{}", relay.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_stops_walrelay_with_the_properties_to_check_and_never_logs_it() {
    let pg = Postgres::start();
    let client = pg.client_with_outbox().await;
    let mut relay = relay(&pg, "relay", WRONG_PASSWORD, "sasl.wrong.", &[]);
    slot_made(&client).await;
    let id = "00000000-0000-0000-0000-00000000a002";
    placed(&client, id).await;

    let log = halted(&mut relay);
    assert_mentions(
        &log,
        &[
            "authentication",
            "-X sasl.username",
            "-X sasl.password",
            "security.protocol",
            "sasl.mechanism",
        ],
    );
    assert!(!log.contains(WRONG_PASSWORD), "the password leaked:\n{log}");
    assert!(slot_still_holds(&client, "walrelay", id).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sasl_mechanism_the_listener_does_not_enable_stops_walrelay_with_the_same_advice() {
    let pg = Postgres::start();
    let client = pg.client_with_outbox().await;
    // The good password, but SCRAM-SHA-256: the listener enables only 512.
    let mut relay = relay(
        &pg,
        "relay",
        RELAY_PASSWORD,
        "sasl.mechanism.",
        &["-X", "sasl.mechanism=SCRAM-SHA-256"],
    );
    slot_made(&client).await;

    let log = halted(&mut relay);
    assert_mentions(&log, &["refused walrelay's login", "-X sasl.mechanism"]);
    assert!(!log.contains(RELAY_PASSWORD), "the password leaked:\n{log}");
}

/// `walrelay check --json` logging in as `user`: (success, report, stderr).
fn check(pg: &Postgres, user: &str, password: &str, prefix: &str) -> (bool, Value, String) {
    let broker = broker();
    let mut args: Vec<String> = vec![
        "--pg-url".into(),
        pg.url(),
        "--kafka-brokers".into(),
        broker.brokers(),
        "--topic-replacement".into(),
        format!("{prefix}${{routedByValue}}"),
    ];
    args.extend(broker.login_flags(user, password));
    check_json(&args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walrelay_check_with_a_wrong_password_fails_its_kafka_check_with_the_properties_to_check() {
    let pg = Postgres::start();
    let _client = pg.client_with_outbox().await;
    let (ok, doc, output) = check(&pg, "relay", WRONG_PASSWORD, "sasl.check.");
    assert!(!ok, "{doc:#}");
    let brokers = check_entry(&doc, "kafka.brokers");
    assert_eq!(brokers["status"], "fail", "{brokers:#}");
    let text = format!("{} {}", brokers["detail"], brokers["fix"]);
    assert_mentions(
        &text,
        &[
            "authentication",
            "-X sasl.username",
            "-X sasl.password",
            "security.protocol",
            "sasl.mechanism",
        ],
    );
    assert!(
        !output.contains(WRONG_PASSWORD),
        "the password leaked:\n{output}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walrelay_check_passes_its_kafka_checks_with_the_acls_docs_security_md_lists() {
    let broker = broker();
    broker.create_topic("sasl.checked.Placed", 1);
    broker.grant(
        "User:checker",
        AclResource::TopicPrefix("sasl.checked."),
        &[Describe, Write, Create, DescribeConfigs],
    );
    let pg = Postgres::start();
    let _client = pg.client_with_outbox().await;
    let (_, doc, _) = check(&pg, "checker", password("checker"), "sasl.checked.");
    for name in [
        "kafka.brokers",
        "kafka.describe_topics",
        "kafka.create_topics",
        "kafka.idempotent_write",
        "kafka.topics",
    ] {
        let entry = check_entry(&doc, name);
        assert_eq!(entry["status"], "pass", "{name}: {entry:#}");
    }
    assert!(check_entry(&doc, "kafka.topics")["detail"]
        .as_str()
        .unwrap()
        .contains("sasl.checked.Placed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_that_may_describe_but_not_write_a_topic_halts_walrelay_and_nothing_is_dead_lettered(
) {
    let broker = broker();
    let (topic, dead_letter) = ("acl.nowrite.Placed", "acl.nowrite.dead-letter");
    broker.create_topic(topic, 1);
    broker.create_topic(dead_letter, 1);
    broker.grant("User:nowrite", AclResource::Topic(topic), &[Describe]);
    // It may write the dead-letter topic: halting is walrelay's choice.
    broker.grant(
        "User:nowrite",
        AclResource::Topic(dead_letter),
        &[Describe, Write],
    );
    let pg = Postgres::start();
    let client = pg.client_with_outbox().await;
    let mut relay = relay(
        &pg,
        "nowrite",
        password("nowrite"),
        "acl.nowrite.",
        &[
            "--on-poison",
            "dead-letter",
            "--dead-letter-topic",
            dead_letter,
        ],
    );
    relay.wait_ready(WAIT);
    let id = "00000000-0000-0000-0000-00000000a003";
    placed(&client, id).await;

    let log = halted(&mut relay);
    assert_mentions(&log, &[id, topic, "TopicAuthorizationFailed", "WRITE"]);
    assert!(!log.contains("dead-letter topic"), "{log}");
    assert!(slot_still_holds(&client, "walrelay", id).await);
    let reader = broker.consumer();
    reader.subscribe(&[dead_letter, topic]);
    assert!(reader.read_for(Duration::from_secs(2)).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_that_may_not_describe_an_existing_topic_gets_an_authorization_error_not_a_missing_topic(
) {
    let broker = broker();
    let (topic, dead_letter) = ("acl.blind.Placed", "acl.blind.dead-letter");
    broker.create_topic(topic, 1);
    broker.create_topic(dead_letter, 1);
    broker.grant(
        "User:blind",
        AclResource::Topic(dead_letter),
        &[Describe, Write],
    );
    let pg = Postgres::start();
    let client = pg.client_with_outbox().await;
    // Dead-letter mode: an event for a topic taken for missing would be
    // dead-lettered, and the slot would move on.
    let mut relay = relay(
        &pg,
        "blind",
        password("blind"),
        "acl.blind.",
        &[
            "--topic-create",
            "false",
            "--on-poison",
            "dead-letter",
            "--dead-letter-topic",
            dead_letter,
        ],
    );
    relay.wait_ready(WAIT);
    let id = "00000000-0000-0000-0000-00000000a004";
    placed(&client, id).await;

    let log = halted(&mut relay);
    assert_mentions(&log, &[topic, "TopicAuthorizationFailed", "DESCRIBE"]);
    assert!(!log.contains("does not exist"), "{log}");
    assert!(slot_still_holds(&client, "walrelay", id).await);
    let reader = broker.consumer();
    reader.subscribe(&[dead_letter]);
    assert!(reader.read_for(Duration::from_secs(2)).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_without_create_halts_walrelay_with_the_acl_to_grant_when_a_topic_is_missing() {
    let broker = broker();
    broker.grant(
        "User:nocreate",
        AclResource::TopicPrefix("acl.nocreate."),
        &[Describe, Write],
    );
    let pg = Postgres::start();
    let client = pg.client_with_outbox().await;
    let mut relay = relay(&pg, "nocreate", password("nocreate"), "acl.nocreate.", &[]);
    relay.wait_ready(WAIT);
    let id = "00000000-0000-0000-0000-00000000a005";
    placed(&client, id).await;

    let log = halted(&mut relay);
    assert_mentions(&log, &["acl.nocreate.Placed", "CREATE"]);
    assert!(slot_still_holds(&client, "walrelay", id).await);
    assert!(!broker.consumer().has_topic("acl.nocreate.Placed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_that_may_write_no_topic_at_all_halts_walrelay_with_the_acl_to_grant() {
    let broker = broker();
    let topic = "acl.readonly.Placed";
    broker.create_topic(topic, 1);
    broker.grant("User:readonly", AclResource::Topic(topic), &[Describe]);
    let pg = Postgres::start();
    let client = pg.client_with_outbox().await;
    let mut relay = relay(&pg, "readonly", password("readonly"), "acl.readonly.", &[]);
    slot_made(&client).await;
    let id = "00000000-0000-0000-0000-00000000a006";
    placed(&client, id).await;

    let log = halted(&mut relay);
    assert_mentions(
        &log,
        &[id, topic, "InitProducerId", "WRITE", "--operation Write"],
    );
    assert!(slot_still_holds(&client, "walrelay", id).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_that_may_not_read_topic_configs_still_dead_letters_only_the_oversized_event() {
    let broker = broker();
    let (topic, dead_letter) = ("acl.noconfigs.Placed", "acl.noconfigs.dead-letter");
    broker
        .create_topic_with(topic, 1, &[("max.message.bytes", "4000")])
        .await;
    broker.create_topic(dead_letter, 1);
    // Everything but DescribeConfigs: the topic's limit cannot be read.
    broker.grant(
        "User:noconfigs",
        AclResource::TopicPrefix("acl.noconfigs."),
        &[Describe, Write],
    );
    let pg = Postgres::start();
    let client = pg.client_with_outbox().await;
    let mut relay = relay(
        &pg,
        "noconfigs",
        password("noconfigs"),
        "acl.noconfigs.",
        &[
            "--topic-create",
            "false",
            "--on-poison",
            "dead-letter",
            "--dead-letter-topic",
            dead_letter,
        ],
    );
    relay.wait_ready(WAIT);
    // One transaction, so the records share a batch: ten small events
    // around one over the topic's limit (and under the assumed default).
    let big = format!(r#"{{"blob": "{}"}}"#, "x".repeat(6000));
    let mut sql = String::from("BEGIN;");
    for n in 0..11 {
        let payload = if n == 5 {
            big.clone()
        } else {
            format!(r#"{{"n": {n}}}"#)
        };
        sql.push_str(&format!(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES ('00000000-0000-0000-0000-0000000b{n:04}', 'order', 'order-{n}', 'Placed', '{payload}');"
        ));
    }
    sql.push_str("COMMIT;");
    client.batch_execute(&sql).await.unwrap();

    let reader = broker.consumer();
    reader.subscribe(&[topic]);
    let delivered = reader.read(10, WAIT);
    let ids: Vec<&str> = delivered.iter().filter_map(|m| m.header("id")).collect();
    assert_eq!(ids.len(), 10, "{ids:?}\n{}", relay.log());
    assert!(
        !ids.contains(&"00000000-0000-0000-0000-0000000b0005"),
        "{ids:?}"
    );
    let dead = broker.consumer();
    dead.subscribe(&[dead_letter]);
    let copies = dead.read(1, WAIT);
    assert_eq!(copies.len(), 1, "{}", relay.log());
    assert_eq!(
        copies[0].header("id"),
        Some("00000000-0000-0000-0000-0000000b0005")
    );
    assert!(dead.read_for(Duration::from_secs(2)).is_empty());
    let log = relay.log();
    assert!(log.contains("DESCRIBE_CONFIGS"), "{log}");
    relay.terminate(WAIT);
}
