//! The watchdog, metrics and `walrelay status`, with real processes.

mod support;

use std::time::Duration;

use support::promtool::{self, Scrapes};
use support::{eventually, free_port, webhook, Broker, Postgres, Relay, Stack};

const WAIT: Duration = Duration::from_secs(60);

async fn insert(client: &tokio_postgres::Client, event_type: &str, n: i32) {
    client
        .execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             SELECT gen_random_uuid(), 'order', 'a-' || i, $1, jsonb_build_object('pad', repeat('x', 500)) \
             FROM generate_series(1, $2::int) i",
            &[&event_type, &n],
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_metric_is_exposed_and_moves() {
    let stack = Stack::start(&["--watchdog-interval", "1s"]).await;
    let confirmed_before = stack.relay.metric("walrelay_confirmed_flush_lsn").unwrap();

    insert(&stack.client, "Measured", 20).await;
    eventually(WAIT, "20 events published", || async {
        (stack
            .relay
            .metric("walrelay_events_published_total")
            .unwrap_or(0.0)
            >= 20.0)
            .then_some(())
    })
    .await;
    eventually(WAIT, "the confirmed LSN to move", || async {
        (stack.relay.metric("walrelay_confirmed_flush_lsn").unwrap() > confirmed_before)
            .then_some(())
    })
    .await;
    // The watchdog reads the slot every second.
    let body = eventually(WAIT, "the watchdog's first reading", || async {
        let (_, body) = stack.relay.http_get("/metrics").unwrap();
        body.contains("walrelay_slot_wal_status{status=\"reserved\"} 1")
            .then_some(body)
    })
    .await;
    for name in [
        "walrelay_slot_lag_bytes",
        "walrelay_slot_retained_wal_bytes",
        "walrelay_slot_safe_wal_size_bytes",
        "walrelay_slot_wal_status{status=\"reserved\"} 1",
        "walrelay_slot_wal_status{status=\"lost\"} 0",
        "walrelay_slot_lag_alert_level 0",
        "walrelay_events_published_total{topic=\"outbox.event.Measured\"} 20",
        "walrelay_delivery_latency_seconds_count 20",
        "walrelay_confirmed_flush_lsn",
        "walrelay_inflight_events 0",
        "walrelay_publish_errors_total",
        "walrelay_reconnects_total{target=\"postgres\"} 0",
        "walrelay_last_confirm_age_seconds 0",
        "walrelay_slot_active 1",
        "walrelay_streaming 1",
    ] {
        assert!(body.contains(name), "/metrics lacks {name:?}:\n{body}");
    }
    assert_eq!(
        stack.relay.metric("walrelay_slot_safe_wal_size_bytes"),
        Some(-1.0),
        "unlimited retention is -1"
    );
    let retained = stack
        .relay
        .metric("walrelay_slot_retained_wal_bytes")
        .unwrap();
    assert!(retained > 0.0);
    assert_eq!(stack.relay.http_get("/healthz").unwrap().0, 200);
    // Healthy as scraped, every shipped alert stays quiet.
    let quiet = promtool::firing_for(stack.relay.metrics_port, Duration::from_secs(2)).await;
    assert!(quiet.is_empty(), "healthy, yet {quiet:?} fire");
}

/// A walrelay whose watchdog reads the slot every second, warns past
/// 64 KiB of lag, pages past 1 GiB, and calls a stall after `stall`.
fn lag_watched(pg: &Postgres, broker: &Broker, stall: &str, extra: &[&str]) -> Relay {
    let mut flags = vec![
        "--watchdog-interval",
        "1s",
        "--lag-warn-bytes",
        "64KiB",
        "--lag-critical-bytes",
        "1GiB",
        "--stall-timeout",
        stall,
    ];
    flags.extend_from_slice(extra);
    Relay::start_with(pg, broker, &flags)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_broker_raises_the_alert_fails_readiness_and_clears_after_resume() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let (hook_port, hooks) = webhook::receiver().await;
    let hook = format!("http://127.0.0.1:{hook_port}/alerts");
    let relay = lag_watched(&pg, &broker, "4s", &["--alert-webhook", &hook]);
    relay.wait_ready(WAIT);
    insert(&client, "Alerted", 1).await;
    eventually(WAIT, "the first event", || async {
        (relay
            .metric("walrelay_events_published_total")
            .unwrap_or(0.0)
            >= 1.0)
            .then_some(())
    })
    .await;

    broker.pause();
    for _ in 0..10 {
        insert(&client, "Alerted", 50).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    eventually(WAIT, "a critical alert level", || async {
        (relay.metric("walrelay_slot_lag_alert_level") == Some(2.0)).then_some(())
    })
    .await;
    assert_eq!(
        relay.http_get("/readyz").unwrap().0,
        503,
        "a stall fails readiness"
    );
    assert!(relay.http_get("/readyz").unwrap().1.contains("stalled"));
    let fired = promtool::firing_for(relay.metrics_port, Duration::from_secs(2)).await;
    assert!(fired.contains("WalrelaySlotLagCritical"), "{fired:?}");
    let log = relay.log();
    assert!(log.contains("slot alert raised"), "log:\n{log}");
    assert!(
        log.contains("broker_down"),
        "the likely cause is named; log:\n{log}"
    );
    {
        let bodies = hooks.bodies();
        let levels: Vec<&str> = bodies
            .iter()
            .map(|b| b["level"].as_str().unwrap())
            .collect();
        assert!(levels.contains(&"critical"), "webhook calls: {levels:?}");
        assert!(bodies.iter().all(|b| b["slot"]["slot"] == "walrelay"));
    }

    broker.resume();
    eventually(WAIT, "the alert to clear", || async {
        (relay.metric("walrelay_slot_lag_alert_level") == Some(0.0)).then_some(())
    })
    .await;
    relay.wait_ready(WAIT);
    assert!(relay.log().contains("slot alert cleared"));
    let quiet = promtool::firing_for(relay.metrics_port, Duration::from_secs(2)).await;
    assert!(quiet.is_empty(), "cleared, yet {quiet:?} fire");
    eventually(WAIT, "the webhook to hear the all-clear", || async {
        let bodies = hooks.bodies();
        (bodies.last().map(|b| b["level"] == "ok") == Some(true)).then_some(())
    })
    .await;
}

fn status(pg: &Postgres, extra: &[&str]) -> (bool, String, String) {
    let url = pg.url();
    support::walrelay(&[&["status", "--pg-url", &url][..], extra].concat())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reports_missing_healthy_and_inactive_slots() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let _client = pg.client_with_outbox().await;

    let (ok, _, stderr) = status(&pg, &[]);
    assert!(!ok, "a missing slot exits non-zero");
    assert!(stderr.contains("does not exist"), "{stderr}");

    let mut relay = Relay::start(&pg, &broker);
    relay.wait_ready(WAIT);
    let (ok, stdout, stderr) = status(&pg, &["--json"]);
    assert!(ok, "{stderr}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["slot"]["active"], true);
    assert!(doc["slot"]["active_pid"].is_number());
    assert_eq!(doc["slot"]["wal_status"], "reserved");
    assert_eq!(doc["publication"]["tables"][0], "public.outbox");
    let (ok, table, _) = status(&pg, &[]);
    assert!(ok);
    assert!(
        table.contains("active") && table.contains("yes (pid"),
        "{table}"
    );
    assert!(table.contains("unlimited"), "{table}");

    relay.kill9();
    // The walsender notices the dead client within moments.
    let table = eventually(WAIT, "the slot to be inactive", || async {
        let (ok, table, _) = status(&pg, &[]);
        assert!(ok, "an inactive slot is reported, not an error");
        table
            .contains("no: nothing streams from this slot")
            .then_some(table)
    })
    .await;
    assert!(table.contains("lag"), "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_list_nothing_answers_on_is_unready_and_raises_broker_down_with_nothing_pending() {
    let pg = Postgres::start();
    let client = pg.client_with_outbox().await;
    let nowhere = format!("127.0.0.1:{}", free_port());
    // The receiver's credentials travel as HTTP Basic authentication and
    // never reach the log, as written or decoded.
    let (hook_port, hooks) = webhook::receiver().await;
    let hook = format!("http://ops:hook%2Fsecret-93@127.0.0.1:{hook_port}/alerts");
    let relay = Relay::start_raw(
        &pg.url(),
        &nowhere,
        &[
            "--stall-timeout",
            "3s",
            "--watchdog-interval",
            "1s",
            "--alert-webhook",
            &hook,
        ],
    );
    eventually(WAIT, "the broker_down alert", || async {
        (relay.metric("walrelay_slot_lag_alert_level") == Some(2.0)).then_some(())
    })
    .await;
    let (status, body) = relay.http_get("/readyz").unwrap();
    assert_eq!(
        (status, body.trim()),
        (
            503,
            "Kafka does not answer: no broker of --kafka-brokers replied to a metadata request"
        )
    );
    assert_eq!(relay.metric("walrelay_kafka_reachable"), Some(0.0));
    // It holds the slot (its role is active, so no standby takes over),
    // yet no event can flow: it is not streaming.
    assert_eq!(relay.metric("walrelay_streaming"), Some(0.0));
    let (_, metrics) = relay.http_get("/metrics").unwrap();
    assert!(
        metrics.contains("walrelay_role{role=\"active\"} 1"),
        "{metrics}"
    );
    let log = relay.log();
    assert!(
        log.contains("broker_down") && log.contains("no Kafka broker has answered"),
        "{log}"
    );
    assert!(!log.contains("streaming started"), "{log}");
    // librdkafka retries the connection many times a second: the log says so once.
    let errors = log
        .lines()
        .filter(|l| l.contains("Kafka client error"))
        .count();
    assert!(errors <= 2, "{errors} client error lines:\n{log}");

    let hook = eventually(WAIT, "the webhook to hear broker_down", || async {
        hooks.with_cause("broker_down")
    })
    .await;
    assert_eq!(hook.body["level"], "critical", "{:?}", hook.body);
    assert!(
        hook.body["reasons"][0]
            .as_str()
            .unwrap()
            .contains("no Kafka broker has answered"),
        "{:?}",
        hook.body
    );
    // RFC 7617: base64 of "ops:hook/secret-93".
    assert_eq!(
        hook.authorization.as_deref(),
        Some("Basic b3BzOmhvb2svc2VjcmV0LTkz")
    );
    let (_, metrics) = relay.http_get("/metrics").unwrap();
    for text in [relay.log(), metrics] {
        assert!(
            !text.contains("secret-93"),
            "the webhook's password leaked:\n{text}"
        );
    }
    drop(client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_the_webhook_does_not_take_is_counted_and_logged() {
    let pg = Postgres::start();
    let client = pg.client_with_outbox().await;
    let nowhere = format!("127.0.0.1:{}", free_port());
    // Nothing listens there: every POST fails to connect.
    let hook = format!("http://127.0.0.1:{}/alerts", free_port());
    let relay = Relay::start_raw(
        &pg.url(),
        &nowhere,
        // broker_down comes after --stall-timeout (2 min by default).
        &[
            "--watchdog-interval",
            "1s",
            "--stall-timeout",
            "3s",
            "--alert-webhook",
            &hook,
        ],
    );
    let before = eventually(WAIT, "/metrics", || async {
        relay.http_get("/metrics")?;
        Some(promtool::scrape(relay.metrics_port))
    })
    .await;
    eventually(WAIT, "an undelivered alert to be counted", || async {
        (relay.metric("walrelay_alerts_undelivered_total")? >= 1.0).then_some(())
    })
    .await;
    let log = relay.log();
    assert!(
        log.contains("broker_down") && log.contains("alert webhook failed"),
        "{log}"
    );
    let fired = promtool::firing_since(relay.metrics_port, &before);
    assert!(fired.contains("WalrelayAlertsUndelivered"), "{fired:?}");
    drop(client);
}

/// An event walrelay has read but not yet handed to the producer (its
/// topic's metadata does not come) is pending like one in flight: the
/// confirm age runs and a stall fails readiness.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_waiting_for_its_topic_counts_as_pending_and_can_stall() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let relay = Relay::start_with(
        &pg,
        &broker,
        &["--stall-timeout", "3s", "--watchdog-interval", "1s"],
    );
    relay.wait_ready(WAIT);
    // Paused, the broker answers no metadata request: the event's topic
    // (new to walrelay) is looked up for up to 30 s before it is produced.
    broker.pause();
    insert(&client, "NeverProduced", 1).await;
    eventually(WAIT, "the waiting event counted in flight", || async {
        (relay.metric("walrelay_inflight_events") == Some(1.0)).then_some(())
    })
    .await;
    eventually(WAIT, "a stall on the waiting event", || async {
        let (status, body) = relay.http_get("/readyz")?;
        (status == 503 && body.contains("stalled")).then_some(())
    })
    .await;
    assert!(relay.metric("walrelay_last_confirm_age_seconds").unwrap() >= 3.0);
    assert_eq!(relay.metric("walrelay_slot_lag_alert_level"), Some(2.0));
    broker.resume();
    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.NeverProduced"]);
    assert_eq!(reader.read(1, WAIT).len(), 1, "log:\n{}", relay.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_walrelay_serves_is_documented_and_every_documented_one_is_served() {
    let stack = Stack::start(&["--watchdog-interval", "1s"]).await;
    // A labelled series shows once it has a label: one event gives a topic;
    // the slot's figures, once the watchdog read them.
    insert(&stack.client, "Listed", 1).await;
    eventually(WAIT, "the event published and the slot read", || async {
        let (_, body) = stack.relay.http_get("/metrics").unwrap();
        (body.contains("walrelay_events_published_total{")
            && body.contains("walrelay_slot_active "))
        .then_some(())
    })
    .await;
    let mut served = stack.relay.metric_names();
    let documented = support::documented_metrics();
    // Labelled by prefix, so it shows only with --source messages and a
    // message of another prefix (tests/messages_source.rs reads it).
    served.insert("walrelay_ignored_messages_total".into());
    // Registered only with --retention (tests/retention.rs compares them),
    // with --delivery exactly-once (tests/exactly_once.rs), and with a
    // schema registry (tests/schema_registry.rs).
    let documented: std::collections::BTreeSet<String> = documented
        .into_iter()
        .filter(|name| !name.starts_with("walrelay_retention_"))
        .filter(|name| !name.starts_with("walrelay_schema_registry_"))
        .filter(|name| !name.starts_with("walrelay_kafka_transaction"))
        .collect();
    assert_eq!(
        served.difference(&documented).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "served but not in docs/operations.md's Metrics section"
    );
    assert_eq!(
        documented.difference(&served).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "documented but not served"
    );
}

/// A broker list nothing answers on ends each session when the pending
/// event's topic metadata times out (30 s). The sessions restart, and
/// none of that may hide the stall: the confirm age runs on across them,
/// Postgres is not said to reconnect, failed connection attempts to a
/// broker never reached are no reconnects, and the outage is told once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_never_answered_cannot_hide_a_stall_behind_session_restarts() {
    let pg = Postgres::start();
    let client = pg.client_with_outbox().await;
    let nowhere = format!("127.0.0.1:{}", free_port());
    let relay = Relay::start_raw(&pg.url(), &nowhere, &["--watchdog-interval", "1s"]);
    // Holding the slot, so that the event is in what it streams.
    eventually(WAIT, "the slot held", || async {
        let (_, body) = relay.http_get("/metrics")?;
        body.contains("walrelay_role{role=\"active\"} 1")
            .then_some(())
    })
    .await;
    insert(&client, "Stuck", 1).await;
    eventually(WAIT, "the event pending", || async {
        (relay.metric("walrelay_inflight_events")? >= 1.0).then_some(())
    })
    .await;
    let restarts = || relay.log().matches("session ended; reconnecting").count();
    let before = eventually(WAIT, "the confirm age to run", || async {
        let age = relay.metric("walrelay_last_confirm_age_seconds")?;
        (age >= 5.0).then_some(age)
    })
    .await;
    assert_eq!(restarts(), 0, "{}", relay.log());
    let (_, first) = relay.http_get("/metrics").unwrap();
    let taken = std::time::Instant::now();

    eventually(WAIT, "a session restart", || async {
        (restarts() >= 1).then_some(())
    })
    .await;
    eventually(WAIT, "the event pending again", || async {
        (relay.metric("walrelay_inflight_events")? >= 1.0).then_some(())
    })
    .await;
    let (_, second) = relay.http_get("/metrics").unwrap();
    let apart = taken.elapsed();
    let after = promtool::value(&second, "walrelay_last_confirm_age_seconds").unwrap();
    assert!(
        after > before,
        "the confirm age went from {before} s back to {after} s across a session restart"
    );
    // Fed what walrelay served, carried on as it moved, the shipped rule
    // fires.
    let scrapes = Scrapes {
        first: &first,
        second: &second,
        apart,
    };
    assert!(
        promtool::fires("WalrelayStalled", &scrapes),
        "first:\n{first}\nsecond:\n{second}"
    );
    // Nothing flows, though the slot is held: not streaming, not disconnected.
    let fired = promtool::firing(&[promtool::Target {
        instance: "walrelay",
        scrapes: Some(scrapes),
    }]);
    assert!(
        fired.contains("WalrelayNotStreaming") && !fired.contains("WalrelayDisconnected"),
        "{fired:?}"
    );

    let reconnects = |target: &str| {
        let line = format!("walrelay_reconnects_total{{target=\"{target}\"}} ");
        second
            .lines()
            .find_map(|l| l.strip_prefix(&line)?.parse::<f64>().ok())
            .unwrap()
    };
    assert_eq!(reconnects("postgres"), 0.0, "Postgres is fine:\n{second}");
    let sessions_ended = restarts() as f64;
    assert!(
        (1.0..=sessions_ended).contains(&reconnects("kafka")),
        "{} Kafka reconnects for {sessions_ended} sessions ended by Kafka",
        reconnects("kafka")
    );
    assert_eq!(promtool::value(&second, "walrelay_streaming"), Some(0.0));
    // The new session's probe has had its answer (a 5 s timeout) well
    // before ten more seconds of stall.
    eventually(WAIT, "the new session's probe", || async {
        (relay.metric("walrelay_last_confirm_age_seconds")? >= after + 10.0).then_some(())
    })
    .await;
    let log = relay.log();
    assert_eq!(
        log.matches("no Kafka broker answers").count(),
        1,
        "one outage, told once:\n{log}"
    );
    drop(client);
}

/// The slot's figures are served only while the watchdog knows them: not
/// before its first reading, and not while Postgres is down, rather than
/// invented (-1, inactive) or frozen (a lag of 0, active) meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slot_figures_are_absent_before_the_first_reading_and_while_postgres_is_down() {
    let mut pg = Postgres::start();
    let broker = Broker::start();
    let _client = pg.client_with_outbox().await;
    let relay = Relay::start_with(&pg, &broker, &["--watchdog-interval", "15s"]);
    relay.wait_ready(WAIT);
    let figures = [
        "walrelay_slot_lag_bytes",
        "walrelay_slot_retained_wal_bytes",
        "walrelay_slot_safe_wal_size_bytes",
        "walrelay_slot_wal_status",
        "walrelay_slot_active",
    ];
    let served = || {
        let (_, body) = relay.http_get("/metrics").unwrap_or_default();
        figures
            .iter()
            .filter(|name| promtool::value(&body, name).is_some())
            .map(|name| name.to_string())
            .collect::<Vec<_>>()
    };
    // The first reading comes one interval after the start.
    assert_eq!(served(), Vec::<String>::new(), "before the first reading");
    eventually(WAIT, "the watchdog's first reading", || async {
        (served().len() == figures.len()).then_some(())
    })
    .await;
    assert_eq!(relay.metric("walrelay_slot_active"), Some(1.0));

    pg.stop("fast");
    eventually(WAIT, "the figures to leave /metrics", || async {
        served().is_empty().then_some(())
    })
    .await;
    assert_eq!(relay.metric("walrelay_streaming"), Some(0.0));
    let fired = promtool::firing_for(relay.metrics_port, Duration::from_secs(2)).await;
    assert!(
        fired.contains("WalrelayNotStreaming") && fired.contains("WalrelayDisconnected"),
        "Postgres down: {fired:?}"
    );

    pg.start_server();
    eventually(WAIT, "the figures back once Postgres is", || async {
        (relay.metric("walrelay_slot_active") == Some(1.0)).then_some(())
    })
    .await;
}

/// A lag past the warning threshold, with the broker only slow to come
/// back (no stall yet), raises the warning and not the page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lag_past_the_warning_threshold_fires_the_warning_alert_only() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let relay = lag_watched(&pg, &broker, "10m", &[]);
    relay.wait_ready(WAIT);
    broker.pause();
    for _ in 0..5 {
        insert(&client, "Warned", 50).await;
    }
    eventually(WAIT, "the warning level", || async {
        (relay.metric("walrelay_slot_lag_alert_level") == Some(1.0)).then_some(())
    })
    .await;
    let fired = promtool::firing_for(relay.metrics_port, Duration::from_secs(2)).await;
    assert!(
        fired.contains("WalrelaySlotLagWarning") && !fired.contains("WalrelaySlotLagCritical"),
        "{fired:?}"
    );
    broker.resume();
}
