//! Active/passive takeover, Postgres restarts, repeated kill -9 under load,
//! schema changes while streaming, and payloads that must pass unchanged.

mod support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use support::outbox::{committed_ids, current_lsn, events, read_until_all_arrive};
use support::pg::confirmed_flush_lsn;
use support::promtool::{self, Scrapes, Target};
use support::{eventually, guarantees, Broker, BrokerKind, Postgres, Relay, Stack};

const WAIT: Duration = Duration::from_secs(90);

fn assert_all_arrive(broker: &Broker, topic: &str, expected: &HashSet<String>, relay: &Relay) {
    let reader = broker.consumer();
    reader.subscribe(&[topic]);
    read_until_all_arrive(&reader, expected, HashSet::new(), relay, WAIT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_walrelay_waits_as_standby_and_takes_over_when_the_first_dies() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let mut active = Relay::start(&pg, &broker);
    active.wait_ready(WAIT);
    let standby = Relay::start(&pg, &broker);
    eventually(WAIT, "the standby to wait", || async {
        standby.log().contains("waiting as a standby").then_some(())
    })
    .await;
    assert!(
        standby.log().contains("active for PID"),
        "{}",
        standby.log()
    );
    assert_eq!(standby.http_get("/readyz").unwrap().0, 503);
    // An active replica and a standby, as Prometheus scrapes them: quiet.
    let apart = Duration::from_secs(2);
    let (a1, s1) = (
        promtool::scrape(active.metrics_port),
        promtool::scrape(standby.metrics_port),
    );
    tokio::time::sleep(apart).await;
    let (a2, s2) = (
        promtool::scrape(active.metrics_port),
        promtool::scrape(standby.metrics_port),
    );
    let quiet = promtool::firing(&[
        Target {
            instance: "active",
            scrapes: Some(Scrapes::between(&a1, &a2)),
        },
        Target {
            instance: "standby",
            scrapes: Some(Scrapes::between(&s1, &s2)),
        },
    ]);
    assert!(quiet.is_empty(), "a healthy pair, yet {quiet:?} fire");
    events("Takeover", 10).insert(&client).await;

    active.kill9();
    let killed = Instant::now();
    standby.wait_ready(WAIT);
    let takeover = killed.elapsed();
    eprintln!("standby took over {takeover:?} after kill -9 of the active relay");
    events("Takeover", 10).insert(&client).await;
    assert_all_arrive(
        &broker,
        "outbox.event.Takeover",
        &committed_ids(&client, "Takeover").await,
        &standby,
    );
    assert!(
        takeover < Duration::from_secs(30),
        "takeover took {takeover:?}"
    );
    // The dead replica is down; the events still flow, through the other.
    let s1 = promtool::scrape(standby.metrics_port);
    tokio::time::sleep(apart).await;
    let s2 = promtool::scrape(standby.metrics_port);
    let fired = promtool::firing(&[
        Target {
            instance: "active",
            scrapes: None,
        },
        Target {
            instance: "standby",
            scrapes: Some(Scrapes::between(&s1, &s2)),
        },
    ]);
    assert_eq!(
        fired,
        ["WalrelayDown".to_string()].into(),
        "one replica dead, one streaming"
    );
    // And with no walrelay left for Prometheus to scrape at all.
    assert!(promtool::firing(&[]).contains("WalrelayAbsent"));
}

/// The lines an operator sees at the default level (tests log walrelay's
/// own debug lines too).
fn operator_lines(relay: &Relay) -> Vec<String> {
    relay
        .log()
        .lines()
        .filter(|l| !l.contains(" DEBUG ") && !l.contains(" TRACE "))
        .map(str::to_string)
        .collect()
}

/// `walrelay_role{role="…"}`: 1 for the relay's role.
fn role(relay: &Relay, role: &str) -> Option<f64> {
    relay.metric(&format!("walrelay_role{{role=\"{role}\"}}"))
}

/// The new lines since `before` lines were seen, after `quiet` has passed.
async fn lines_after(relay: &Relay, before: usize, quiet: Duration) -> Vec<String> {
    tokio::time::sleep(quiet).await;
    operator_lines(relay).split_off(before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_logs_each_change_of_state_once_and_the_role_metric_names_the_active_replica() {
    let mut pg = Postgres::start();
    let broker = Broker::start();
    let _client = pg.client_with_outbox().await;
    let first = Relay::start(&pg, &broker);
    first.wait_ready(WAIT);
    // Ten polls a second: a line per poll could not hide.
    let poll = ["--standby-poll-interval", "100ms"];
    let second = Relay::start_with(&pg, &broker, &poll);
    eventually(WAIT, "the second walrelay to wait as a standby", || async {
        (role(&second, "standby") == Some(1.0)).then_some(())
    })
    .await;
    assert_eq!(role(&first, "active"), Some(1.0));
    assert_eq!(role(&first, "standby"), Some(0.0));
    assert_eq!(second.metric("walrelay_streaming"), Some(0.0));
    let (status, body) = second.http_get("/readyz").unwrap();
    assert_eq!(status, 503);
    assert!(body.contains("standby"), "{body}");

    let before = operator_lines(&second).len();
    let quiet = lines_after(&second, before, Duration::from_secs(3)).await;
    assert!(
        quiet.is_empty(),
        "a healthy standby logged during 30 polls:\n{}",
        quiet.join("\n")
    );

    // Postgres goes away: the standby says so once, and is no standby.
    pg.stop("fast");
    eventually(WAIT, "the standby to lose Postgres", || async {
        (role(&second, "none") == Some(1.0)).then_some(())
    })
    .await;
    let away = lines_after(&second, before, Duration::from_secs(2)).await;
    assert_eq!(
        away.len(),
        1,
        "one line for the change:\n{}",
        away.join("\n")
    );
    assert!(away[0].contains("cannot reach Postgres"), "{}", away[0]);

    // Back: one of the two streams and the other waits as a standby.
    pg.start_server();
    let (active, standby) = eventually(WAIT, "one active walrelay and one standby", || async {
        let roles = [
            (role(&first, "active")?, role(&first, "standby")?),
            (role(&second, "active")?, role(&second, "standby")?),
        ];
        match roles {
            [(1.0, _), (_, 1.0)] => Some((&first, &second)),
            [(_, 1.0), (1.0, _)] => Some((&second, &first)),
            _ => None,
        }
    })
    .await;
    active.wait_ready(WAIT);
    let before = operator_lines(standby).len();
    let quiet = lines_after(standby, before, Duration::from_secs(3)).await;
    assert!(
        quiet.is_empty(),
        "the standby logged:\n{}",
        quiet.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarts_fast_and_immediate_lose_nothing() {
    guarantees::postgres_restarts_fast_and_immediate_lose_nothing(BrokerKind::from_env()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_kill9_restarts_under_load_lose_nothing_and_keep_per_key_order() {
    guarantees::twenty_kill9_restarts_under_load_lose_nothing_and_keep_per_key_order(
        BrokerKind::from_env(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_changes_while_streaming_and_a_renamed_column_halts_with_its_name() {
    let mut stack = Stack::start(&[]).await;

    events("Evolving", 3).insert(&stack.client).await;
    stack
        .client
        .batch_execute("ALTER TABLE outbox ADD COLUMN trace_id text")
        .await
        .unwrap();
    stack
        .client
        .batch_execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, trace_id) \
             VALUES (gen_random_uuid(), 'order', 'agg-1', 'Evolving', '{}', 't-1')",
        )
        .await
        .unwrap();
    stack
        .client
        .batch_execute("ALTER TABLE outbox DROP COLUMN aggregate_type")
        .await
        .unwrap();
    stack
        .client
        .batch_execute(
            "INSERT INTO outbox (id, aggregate_id, event_type, payload) \
             VALUES (gen_random_uuid(), 'agg-2', 'Evolving', '{}')",
        )
        .await
        .unwrap();
    let expected = committed_ids(&stack.client, "Evolving").await;
    assert_eq!(expected.len(), 5);
    assert_all_arrive(
        &stack.broker,
        "outbox.event.Evolving",
        &expected,
        &stack.relay,
    );
    let lsn_before_rename = current_lsn(&stack.client).await;

    stack
        .client
        .batch_execute("ALTER TABLE outbox RENAME COLUMN aggregate_id TO entity_id")
        .await
        .unwrap();
    stack
        .client
        .batch_execute(
            "INSERT INTO outbox (id, entity_id, event_type, payload) \
             VALUES (gen_random_uuid(), 'agg-3', 'Evolving', '{}')",
        )
        .await
        .unwrap();
    let status = stack
        .relay
        .wait(WAIT)
        .expect("walrelay stops on a renamed mapped column");
    assert!(!status.success());
    let log = stack.relay.log();
    assert!(
        log.contains("no longer has a column \"aggregate_id\""),
        "{log}"
    );
    assert!(
        confirmed_flush_lsn(&stack.client, "walrelay").await <= lsn_before_rename + 4096,
        "the event after the rename is not confirmed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusual_payloads_pass_through_unchanged() {
    let stack = Stack::start(&[]).await;

    let big = serde_json::json!({ "blob": "y".repeat(999_000) }).to_string();
    // Large enough that librdkafka keeps walrelay's slice of it instead of
    // a copy, small enough that it copies it into its request.
    let nine_kb = serde_json::json!({ "blob": "z".repeat(9_000) }).to_string();
    let payloads = [
        (
            "unicode",
            r#"{"name": "Zoë 🚀 日本語", "emoji": "👍🏽", "rtl": "שלום"}"#.to_string(),
        ),
        ("one-megabyte", big),
        ("nine-kilobytes", nine_kb),
        ("json-null", "null".to_string()),
        ("empty-object", "{}".to_string()),
    ];
    for (key, payload) in &payloads {
        stack
            .client
            .execute(
                "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
                 VALUES (gen_random_uuid(), 'test', $1, 'Payload', $2::text::jsonb)",
                &[key, payload],
            )
            .await
            .unwrap();
    }
    let reader = stack.broker.consumer();
    reader.subscribe(&["outbox.event.Payload"]);
    let got = reader.read(payloads.len(), WAIT);
    assert_eq!(got.len(), payloads.len(), "log:\n{}", stack.relay.log());
    for (key, payload) in &payloads {
        let m = got.iter().find(|m| m.key.as_deref() == Some(key)).unwrap();
        // The value is jsonb's own text for the document, byte for byte.
        let row = stack
            .client
            .query_one(
                "SELECT payload::text, id::text FROM outbox WHERE aggregate_id = $1",
                &[key],
            )
            .await
            .unwrap();
        let (stored, id): (String, String) = (row.get(0), row.get(1));
        assert_eq!(m.value.as_deref(), Some(stored.as_str()), "payload {key}");
        assert_eq!(m.headers.get("id"), Some(&Some(id)), "header id of {key}");
        let sent: serde_json::Value = serde_json::from_str(payload).unwrap();
        let received: serde_json::Value = serde_json::from_str(&stored).unwrap();
        assert_eq!(sent, received);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_reports_whether_kafka_answers_as_the_active_replica_does() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let _client = pg.client_with_outbox().await;
    let first = Relay::start(&pg, &broker);
    first.wait_ready(WAIT);
    let second = Relay::start_with(&pg, &broker, &["--standby-poll-interval", "100ms"]);
    eventually(WAIT, "the second walrelay to wait as a standby", || async {
        (role(&second, "standby") == Some(1.0)).then_some(())
    })
    .await;
    eventually(WAIT, "the standby to see Kafka answer", || async {
        (second.metric("walrelay_kafka_reachable") == Some(1.0)).then_some(())
    })
    .await;
    // A broker that stops answering: a standby that could not take over
    // says so, as the active replica does.
    broker.pause();
    eventually(WAIT, "the standby to see Kafka gone", || async {
        (second.metric("walrelay_kafka_reachable") == Some(0.0)).then_some(())
    })
    .await;
    broker.resume();
    eventually(WAIT, "the standby to see Kafka again", || async {
        (second.metric("walrelay_kafka_reachable") == Some(1.0)).then_some(())
    })
    .await;
}
