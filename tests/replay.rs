//! `walrelay replay`: rows already in the outbox, published again to the
//! topics, keys, headers and values `run` gives them, beside a running
//! `walrelay run`, with the poison policy, the rate limit and a dry run;
//! a condition no row matches fails, and a closed pipe ends it quietly.

mod support;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use support::kafka::Received;
use support::outbox::{
    committed_ids, events, key_order_inversions, read_until_all_arrive, write_bursts, SEEDS_OUTBOX,
};
use support::relay::{assert_ends_quietly_into_head, run_command};
use support::{Broker, Postgres, Stack, OUTBOX_SQL};

const WAIT: Duration = Duration::from_secs(90);

/// The default outbox with columns of other types, each placed in a header
/// or the envelope, so that the comparison covers every conversion a
/// streamed value goes through.
const RICH_OUTBOX: &str = "ALTER TABLE outbox ADD COLUMN amount numeric(10,2), \
     ADD COLUMN attempts int, ADD COLUMN blob bytea, ADD COLUMN tracingspancontext text";

const MAPPING: &[&str] = &[
    "--fields-additional-placement",
    "aggregate_type:header,created_at:header:created,amount:header,attempts:envelope,blob:header",
    "--value-format",
    "json",
];

/// Writes three events of `event_type` for two aggregates, with every extra column set.
async fn write_rich(client: &tokio_postgres::Client, event_type: &str) {
    client
        .execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, amount, \
                                 attempts, blob, tracingspancontext) \
             SELECT gen_random_uuid(), 'order', 'agg-' || (i % 2), $1, \
                    jsonb_build_object('seq', i, 'note', 'ünïcødé ✓'), 12.5 * i, i, \
                    '\\x00ff10'::bytea, \
                    'traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' \
             FROM generate_series(1, 3) i",
            &[&event_type],
        )
        .await
        .unwrap();
}

/// The records of `topic` by event id, in the order read.
fn by_id(records: &[Received]) -> HashMap<String, Vec<&Received>> {
    let mut out: HashMap<String, Vec<&Received>> = HashMap::new();
    for r in records {
        out.entry(r.header("id").unwrap().to_string())
            .or_default()
            .push(r);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_event_is_byte_for_byte_the_streamed_one_beside_a_running_relay() {
    let sql = format!("{OUTBOX_SQL}; {RICH_OUTBOX}");
    let stack = Stack::start_on(&sql, MAPPING).await;
    write_rich(&stack.client, "Rich").await;
    let reader = stack.broker.consumer();
    reader.subscribe(&["outbox.event.Rich"]);
    let expected = committed_ids(&stack.client, "Rich").await;
    read_until_all_arrive(&reader, &expected, HashSet::new(), &stack.relay, WAIT);

    let mut flags = vec!["--where", "event_type = 'Rich'"];
    flags.extend_from_slice(MAPPING);
    let replay = run_command("replay", &stack.pg, &stack.broker, &flags);
    assert!(replay.success, "{replay:?}");
    assert!(
        replay.stdout.contains("walrelay replay will send 3 rows")
            && replay.stdout.contains("to outbox.event.Rich  3 rows")
            && replay.stdout.contains("replayed 3 of 3 rows"),
        "{}",
        replay.stdout
    );

    // Each event twice: streamed, then replayed; alike but for the timestamp.
    let fresh = stack.broker.consumer();
    fresh.subscribe(&["outbox.event.Rich"]);
    let got = fresh.read(6, WAIT);
    assert_eq!(got.len(), 6, "{got:?}");
    for (id, copies) in by_id(&got) {
        let [streamed, replayed] = copies[..] else {
            panic!("event {id} arrived {} times", copies.len());
        };
        assert_eq!(replayed.topic, streamed.topic, "{id}");
        assert_eq!(replayed.partition, streamed.partition, "{id}");
        assert_eq!(replayed.raw_key, streamed.raw_key, "{id}");
        assert_eq!(replayed.raw_headers, streamed.raw_headers, "{id}");
        assert_eq!(replayed.raw_value, streamed.raw_value, "{id}");
        assert!(replayed.offset > streamed.offset, "{id}");
        // What the comparison covers: every placement and the trace context.
        for header in [
            "traceparent",
            "id",
            "event_type",
            "aggregate_type",
            "created",
            "amount",
            "blob",
        ] {
            assert!(
                streamed.header(header).is_some(),
                "{header} missing: {streamed:?}"
            );
        }
        assert!(
            streamed.value.as_deref().unwrap().contains("\"attempts\":"),
            "{streamed:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_prints_each_record_and_sends_nothing() {
    let stack = Stack::start(&[]).await;
    let relay = &stack.relay;
    events("Dry", 4).insert(&stack.client).await;
    let reader = stack.broker.consumer();
    reader.subscribe(&["outbox.event.Dry"]);
    let expected = committed_ids(&stack.client, "Dry").await;
    read_until_all_arrive(&reader, &expected, HashSet::new(), relay, WAIT);

    let flags = ["--where", "event_type = 'Dry'", "--dry-run", "--json"];
    let dry = run_command("replay", &stack.pg, &stack.broker, &flags);
    assert!(dry.success, "{dry:?}");
    let lines: Vec<serde_json::Value> = dry
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["plan"]["rows"], 4, "{}", dry.stdout);
    let records: Vec<_> = lines.iter().filter_map(|l| l.get("record")).collect();
    let printed: HashSet<String> = records
        .iter()
        .map(|r| {
            assert_eq!(r["topic"], "outbox.event.Dry");
            r["headers"][0][1].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(printed, expected);
    assert_eq!(lines.last().unwrap()["result"]["dry_run"], true);
    assert!(
        reader.read_for(Duration::from_secs(3)).is_empty(),
        "a dry run sent records"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_no_topic_may_take_stops_the_replay_non_zero_or_goes_to_the_dead_letter_topic() {
    let stack = Stack::start(&[]).await;
    events("Allowed", 2).insert(&stack.client).await;
    events("Forbidden", 1)
        .id("00000000-0000-0000-0000-0000000000f1")
        .insert(&stack.client)
        .await;
    let allow = ["--topic-allow-regex", "outbox\\.event\\.Allowed"];
    // Written Allowed first: the default order sends the poison row last.
    let mut flags = vec!["--where", "true"];
    flags.extend_from_slice(&allow);

    let halted = run_command("replay", &stack.pg, &stack.broker, &flags);
    assert!(!halted.success, "{halted:?}");
    assert!(
        halted
            .stderr
            .contains("00000000-0000-0000-0000-0000000000f1")
            && halted.stderr.contains("walrelay replay stopped"),
        "{}",
        halted.stderr
    );

    flags.extend_from_slice(&["--on-poison", "dead-letter"]);
    let parked = run_command("replay", &stack.pg, &stack.broker, &flags);
    assert!(parked.success, "{parked:?}");
    let reader = stack.broker.consumer();
    reader.subscribe(&["walrelay.dead-letter"]);
    let copies = reader.read(1, WAIT);
    assert_eq!(
        copies[0].header("walrelay.event-id"),
        Some("00000000-0000-0000-0000-0000000000f1")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_rate_spaces_the_rows_out() {
    let stack = Stack::start(&[]).await;
    events("Paced", 12).insert(&stack.client).await;
    let started = Instant::now();
    let flags = ["--where", "event_type = 'Paced'", "--max-rate", "5"];
    let paced = run_command("replay", &stack.pg, &stack.broker, &flags);
    assert!(paced.success, "{paced:?}");
    // A lower bound only: a busy machine makes it longer, never shorter.
    assert!(
        started.elapsed() >= Duration::from_millis(2200),
        "12 rows at 5 rows/s took {:?}",
        started.elapsed()
    );
    assert!(paced.stderr.contains("replay progress"), "{}", paced.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_events_of_one_transaction_are_replayed_in_the_order_written_or_the_order_is_refused_with_the_fix(
) {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client().await;
    client.batch_execute(SEEDS_OUTBOX).await.unwrap();
    write_bursts(&client, "Burst", 0, 20).await;
    let add_seq = "ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY";

    // The order the docs gave, and the default (the random primary key):
    // neither keeps a transaction's events for a key in order.
    let documented = ["--where", "true", "--order-by", "created_at, id"];
    for flags in [&documented[..], &["--where", "true"][..]] {
        let refused = run_command("replay", &pg, &broker, flags);
        assert!(!refused.success, "{refused:?}");
        assert!(
            refused
                .stderr
                .contains("would not keep each key's events in the order")
                && refused.stderr.contains(add_seq)
                && refused.stderr.contains("in the order they lie on disk"),
            "{}",
            refused.stderr
        );
    }
    let why = run_command("replay", &pg, &broker, &documented).stderr;
    assert!(why.contains("the transaction's start time"), "{why}");

    // The fix it names: a column that grows with each insert.
    client
        .batch_execute(&format!("ALTER TABLE outbox {add_seq}"))
        .await
        .unwrap();
    write_bursts(&client, "Burst", 20, 20).await;
    let refused = run_command("replay", &pg, &broker, &documented);
    assert!(
        !refused.success && refused.stderr.contains(r#"--order-by '"seq"'"#),
        "{}",
        refused.stderr
    );
    let replay = run_command("replay", &pg, &broker, &["--where", "true"]);
    assert!(replay.success, "{replay:?}");
    assert!(
        replay.stdout.contains("ordered by \"seq\"")
            && replay.stdout.contains("replayed 600 of 600 rows"),
        "{}",
        replay.stdout
    );
    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.Burst"]);
    let got = reader.read(600, WAIT);
    assert_eq!(got.len(), 600);
    let inversions = key_order_inversions(&got);
    assert!(inversions.is_empty(), "out of order: {inversions:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_of_no_rows_fails_saying_so_and_a_dry_run_into_a_closed_pipe_ends_quietly() {
    let stack = Stack::start(&[]).await;
    // Enough rows that the dry run is still printing once head is gone.
    stack
        .client
        .batch_execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             SELECT gen_random_uuid(), 'order', 'order-' || i, 'Piped', '{}' \
             FROM generate_series(1, 3000) i",
        )
        .await
        .unwrap();

    let reversed = "created_at >= now() AND created_at < now() - interval '1 hour'";
    for extra in [&[][..], &["--dry-run"][..]] {
        let mut flags = vec!["--where", reversed];
        flags.extend_from_slice(extra);
        let none = run_command("replay", &stack.pg, &stack.broker, &flags);
        assert!(!none.success, "{extra:?}: {none:?}");
        assert!(
            none.stderr.contains("no rows match --where") && none.stderr.contains("start before"),
            "{extra:?}: {}",
            none.stderr
        );
    }

    assert_ends_quietly_into_head(
        "walrelay replay --where \"event_type = 'Piped'\" --dry-run",
        &stack,
    );
}

#[test]
fn replay_refuses_exactly_once_before_it_connects_anywhere() {
    let (ok, _, stderr) = support::walrelay(&[
        "replay",
        "--pg-url",
        "postgres://nobody@127.0.0.1:1/none",
        "--kafka-brokers",
        "127.0.0.1:1",
        "--where",
        "true",
        "--delivery",
        "exactly-once",
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("does not take --delivery exactly-once")
            && stderr.contains("drop the flag"),
        "{stderr}"
    );
}
