//! `walrelay audit`: every outbox row of a window has its event in its
//! topic, or the audit exits 1 naming the missing ones and the replay that
//! publishes them.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use support::outbox::{committed_ids, events, read_until_all_arrive};
use support::relay::{assert_ends_quietly_into_head, run_command, shell};
use support::Stack;

const WAIT: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_written_while_the_outbox_was_out_of_the_publication_are_reported_and_the_printed_replay_mends_them(
) {
    let mut stack = Stack::start(&["--watchdog-interval", "1s"]).await;
    let client = &stack.client;
    events("Before", 5).insert(client).await;
    let reader = stack.broker.consumer();
    reader.subscribe(&["outbox.event.Before"]);
    let before = committed_ids(client, "Before").await;
    read_until_all_arrive(&reader, &before, HashSet::new(), &stack.relay, WAIT);

    let clean = run_command("audit", &stack.pg, &stack.broker, &["--since", "1h"]);
    assert!(clean.success, "{clean:?}");
    assert!(clean.stdout.contains("audit passed"), "{}", clean.stdout);

    // The incident: the outbox leaves the publication for a while.
    client
        .batch_execute("ALTER PUBLICATION walrelay DROP TABLE outbox")
        .await
        .unwrap();
    events("WhileOut", 3).insert(client).await;
    events("Before", 2).aggregate("late").insert(client).await;
    client
        .batch_execute("ALTER PUBLICATION walrelay ADD TABLE outbox")
        .await
        .unwrap();
    stack
        .relay
        .wait_for_held_stop(WAIT, "walrelay_publication_broken");

    let audit = run_command("audit", &stack.pg, &stack.broker, &["--since", "1h"]);
    assert_eq!(audit.code, Some(1), "{audit:?}");
    let mut lost: HashSet<(String, String)> = committed_ids(client, "WhileOut")
        .await
        .into_iter()
        .map(|id| (id, "outbox.event.WhileOut".to_string()))
        .collect();
    let late = client
        .query(
            "SELECT id::text FROM outbox WHERE aggregate_id = 'late'",
            &[],
        )
        .await
        .unwrap();
    lost.extend(
        late.iter()
            .map(|r| (r.get(0), "outbox.event.Before".to_string())),
    );
    let reported: HashSet<(String, String)> = audit
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("missing: event "))
        .map(|l| {
            let (id, topic) = l.split_once(" in ").unwrap();
            (id.to_string(), topic.to_string())
        })
        .collect();
    assert_eq!(reported, lost, "{}", audit.stdout);
    let command = audit
        .stdout
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("walrelay replay --where"))
        .unwrap_or_else(|| panic!("no replay command in {}", audit.stdout));

    // The runbook: the printed command, as pasted into a shell.
    let replay = shell(command)
        .env("WALRELAY_PG_URL", stack.pg.url())
        .env("WALRELAY_KAFKA_BROKERS", stack.broker.brokers())
        .output()
        .unwrap();
    assert!(
        replay.status.success(),
        "{command}: {}",
        String::from_utf8_lossy(&replay.stderr)
    );
    assert!(
        String::from_utf8_lossy(&replay.stdout).contains("replayed 5 of 5 rows"),
        "{}",
        String::from_utf8_lossy(&replay.stdout)
    );

    let mended = run_command(
        "audit",
        &stack.pg,
        &stack.broker,
        &["--since", "1h", "--json"],
    );
    assert!(mended.success, "{mended:?}");
    let result: serde_json::Value =
        serde_json::from_str(mended.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(result["result"]["ok"], true, "{}", mended.stdout);
    assert_eq!(result["result"]["rows"], 10, "{}", mended.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audit_outside_the_window_checks_nothing_and_a_bad_time_is_refused() {
    let stack = Stack::start(&[]).await;
    events("Old", 2)
        .created_at("2020-01-01 00:00+00")
        .insert(&stack.client)
        .await;
    let flags = ["--since", "2h", "--until", "2030-01-01 00:00+00"];
    let audit = run_command("audit", &stack.pg, &stack.broker, &flags);
    assert!(audit.success, "{audit:?}");
    assert!(
        audit.stdout.contains("walrelay audit: 0 outbox rows"),
        "{}",
        audit.stdout
    );
    let refused = run_command(
        "audit",
        &stack.pg,
        &stack.broker,
        &["--since", "last tuesday"],
    );
    assert!(!refused.success);
    assert!(refused.stderr.contains("--since"), "{}", refused.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_event_parked_in_the_dead_letter_topic_is_named_as_poison_not_lost() {
    let poison = [
        "--on-poison",
        "dead-letter",
        "--topic-allow-regex",
        "outbox\\.event\\.Fine",
    ];
    let stack = Stack::start(&poison).await;
    events("Fine", 2).insert(&stack.client).await;
    events("Refused", 1)
        .id("00000000-0000-0000-0000-0000000000d1")
        .insert(&stack.client)
        .await;
    let reader = stack.broker.consumer();
    reader.subscribe(&["walrelay.dead-letter"]);
    assert_eq!(reader.read(1, WAIT).len(), 1, "{}", stack.relay.log());

    let mut flags = vec!["--since", "1h"];
    flags.extend_from_slice(&poison);
    let audit = run_command("audit", &stack.pg, &stack.broker, &flags);
    assert_eq!(audit.code, Some(1), "{audit:?}");
    assert!(
        audit.stdout.contains(
            "missing: event 00000000-0000-0000-0000-0000000000d1 in outbox.event.Refused \
             (poison: its copy is in walrelay.dead-letter)"
        ),
        "{}",
        audit.stdout
    );
    assert_eq!(
        audit.stdout.matches("missing: event").count(),
        1,
        "{}",
        audit.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_or_future_window_passes_saying_so_and_a_reversed_one_names_the_fix() {
    let stack = Stack::start(&[]).await;
    events("Now", 2).insert(&stack.client).await;
    // A dead-letter topic exists: the audit must not go looking there with
    // a time before 1970.
    stack.broker.create_topic("walrelay.dead-letter", 1);

    let windows: [&[&str]; 2] = [
        &[
            "--since",
            "2099-01-01 00:00+00",
            "--until",
            "2099-02-01 00:00+00",
        ],
        &[
            "--since",
            "2026-01-01 00:00+00",
            "--until",
            "2026-01-01 00:00+00",
        ],
    ];
    for flags in windows {
        let audit = run_command("audit", &stack.pg, &stack.broker, flags);
        assert_eq!(audit.code, Some(0), "{flags:?}: {audit:?}");
        assert!(
            audit.stdout.contains("nothing in this window"),
            "{flags:?}: {}",
            audit.stdout
        );
        assert!(
            !audit.stderr.contains("Kafka reachable"),
            "{flags:?}: {}",
            audit.stderr
        );
    }

    let reversed = run_command(
        "audit",
        &stack.pg,
        &stack.broker,
        &["--since", "1h", "--until", "2000-01-01 00:00+00"],
    );
    assert!(!reversed.success, "{reversed:?}");
    assert!(
        reversed.stderr.contains("reversed") && reversed.stderr.contains("--since the earlier"),
        "{}",
        reversed.stderr
    );

    // A flag is echoed as it was written.
    let until = run_command(
        "audit",
        &stack.pg,
        &stack.broker,
        &["--since", "2h", "--until", "1h"],
    );
    assert!(!until.success, "{until:?}");
    assert!(
        until.stderr.contains("--until 1h is not a time") && !until.stderr.contains("Some("),
        "{}",
        until.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audit_logs_no_error_when_it_passes_and_names_each_topic_a_wrong_cluster_lacks() {
    let stack = Stack::start(&[]).await;
    events("Placed", 3).insert(&stack.client).await;
    let reader = stack.broker.consumer();
    reader.subscribe(&["outbox.event.Placed"]);
    let placed = committed_ids(&stack.client, "Placed").await;
    read_until_all_arrive(&reader, &placed, HashSet::new(), &stack.relay, WAIT);

    // A partition's end is the normal end of the read, not an error.
    let clean = run_command("audit", &stack.pg, &stack.broker, &["--since", "1h"]);
    assert!(clean.success, "{clean:?}");
    assert!(!clean.stderr.contains("ERROR"), "{}", clean.stderr);

    // A live cluster, not the one walrelay publishes to.
    let elsewhere = support::Broker::start();
    let audit = run_command("audit", &stack.pg, &elsewhere, &["--since", "1h"]);
    assert_eq!(audit.code, Some(1), "{audit:?}");
    assert!(
        audit.stdout.contains(&format!(
            "missing topic: outbox.event.Placed does not exist at {}",
            elsewhere.brokers()
        )),
        "{}",
        audit.stdout
    );
    assert!(
        audit
            .stderr
            .contains("outbox.event.Placed does not exist at"),
        "{}",
        audit.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audit_into_a_closed_pipe_ends_quietly() {
    let stack = Stack::start(&[]).await;
    events("Piped", 3).insert(&stack.client).await;
    let reader = stack.broker.consumer();
    reader.subscribe(&["outbox.event.Piped"]);
    let piped = committed_ids(&stack.client, "Piped").await;
    read_until_all_arrive(&reader, &piped, HashSet::new(), &stack.relay, WAIT);

    // head is gone by the time the audit has read Kafka and prints its result.
    assert_ends_quietly_into_head("walrelay audit --since 1h", &stack);
}
