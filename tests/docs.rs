//! The docs hold when followed literally: the blocks of README.md,
//! docs/quickstart.md and the runbooks of docs/operations.md marked
//! `<!-- doctest: NAME -->` run in order, in one bash session, against a
//! real Postgres and broker (tests/support/doctest.rs). Between them the
//! test does only what the docs leave to the world: events a service
//! writes, a slot that gets lost.

mod support;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use support::doctest::{blocks, Shell};
use support::pg::{drop_slot, slots_and_publications};
use support::{eventually, Broker, Postgres};

const WAIT: Duration = Duration::from_secs(90);

const DOCS: [&str; 3] = ["docs/quickstart.md", "README.md", "docs/operations.md"];

/// Inserts `count` events of `event_type`, created `age` ago.
async fn write_events(client: &tokio_postgres::Client, event_type: &str, count: i32, age: &str) {
    client
        .execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, created_at) \
             SELECT gen_random_uuid(), 'order', 'o-' || i, $1, '{}', now() - $3::text::interval \
             FROM generate_series(1, $2::int) i",
            &[&event_type, &count, &age],
        )
        .await
        .unwrap();
}

/// How often each event id of `topics` arrived, once nothing more comes.
fn arrivals(broker: &Broker, topics: &[&str], at_least: usize) -> HashMap<String, usize> {
    let reader = broker.consumer();
    reader.subscribe(topics);
    let mut seen = reader.read(at_least, WAIT);
    seen.extend(reader.read_for(Duration::from_secs(3)));
    let mut counts = HashMap::new();
    for record in seen {
        let id = record.header("id").expect("an id header").to_string();
        *counts.entry(format!("{} {id}", record.topic)).or_insert(0) += 1;
    }
    counts
}

/// Every event of `topic` arrived `times` times.
fn assert_each(counts: &HashMap<String, usize>, topic: &str, events: usize, times: usize) {
    let of_topic: Vec<usize> = counts
        .iter()
        .filter(|(k, _)| k.starts_with(&format!("{topic} ")))
        .map(|(_, n)| *n)
        .collect();
    assert_eq!(of_topic.len(), events, "{topic}: events {counts:?}");
    assert!(
        of_topic.iter().all(|n| *n == times),
        "{topic}: each should arrive {times} time(s): {counts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quickstart_readme_and_runbooks_work_as_written() {
    let pg = Postgres::start();
    let broker = Broker::start();
    pg.client()
        .await
        .batch_execute("CREATE DATABASE app")
        .await
        .unwrap();
    let app = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={} user=postgres dbname=app", pg.port),
        tokio_postgres::NoTls,
    )
    .await
    .map(|(client, connection)| {
        tokio::spawn(connection);
        client
    })
    .unwrap();
    let mut shell = Shell::start(&pg, &broker);

    // From nothing to an event in Kafka, read back with kcat.
    let out = shell.run_blocks("docs/quickstart.md", "quickstart");
    let read = out.last().unwrap();
    assert!(
        read.contains("key=o-1") && read.contains(r#""order_id": "o-1""#),
        "kcat read: {read}"
    );

    // The README's command line, on the same database.
    shell.run_blocks("README.md", "readme");

    // The first look and the pre-flight of the runbook.
    let out = shell.run_blocks("docs/operations.md", "first-look");
    assert!(out[0].contains("yes (pid"), "walrelay status: {}", out[0]);
    assert!(out[1].contains("ok"), "walrelay check: {}", out[1]);

    // The slot is lost while walrelay is down: an old event and a recent
    // one delivered before, more written meanwhile.
    write_events(&app, "Old", 3, "1 hour").await;
    write_events(&app, "Recent", 3, "0").await;
    let before = arrivals(&broker, &["outbox.event.Old", "outbox.event.Recent"], 6);
    assert_eq!(before.len(), 6, "{before:?}");
    assert_eq!(shell.stop_background(), Some(0));
    write_events(&app, "Gap", 3, "0").await;
    drop_slot(&app, "walrelay").await;
    // walrelay refuses to start, and stays up to say so.
    shell.start_walrelay("");
    eventually(WAIT, "walrelay_slot_missing 1", || async {
        let (_, body) = shell.http_get("/metrics")?;
        body.lines()
            .any(|l| l == "walrelay_slot_missing 1")
            .then_some(())
    })
    .await;
    assert_ne!(
        shell.stop_background(),
        Some(0),
        "a refused start exits non-zero"
    );

    // The runbook, step by step.
    let out = shell.run_blocks("docs/operations.md", "lost-slot");
    assert!(
        out[0].contains("publish again the outbox rows created since"),
        "{}",
        out[0]
    );
    assert!(
        shell
            .background_log()
            .contains("cannot be delivered by walrelay"),
        "{}",
        shell.background_log()
    );
    write_events(&app, "After", 3, "0").await;
    let counts = arrivals(
        &broker,
        &[
            "outbox.event.Old",
            "outbox.event.Recent",
            "outbox.event.Gap",
            "outbox.event.After",
        ],
        6 + 3 + 3 + 3,
    );
    // Nothing lost; duplicates only where the runbook says: the rows it
    // publishes again (created within its margin) that Kafka had already.
    assert_each(&counts, "outbox.event.Old", 3, 1);
    assert_each(&counts, "outbox.event.Recent", 3, 2);
    assert_each(&counts, "outbox.event.Gap", 3, 1);
    assert_each(&counts, "outbox.event.After", 3, 1);

    // Retiring the outbox: walrelay stopped, the slot and publication dropped.
    assert_eq!(shell.stop_background(), Some(0));
    shell.run_blocks("docs/operations.md", "retire");
    assert_eq!(
        slots_and_publications(&app).await,
        (0, 0),
        "a slot or publication is left"
    );
}

/// Every marked block belongs to a group the test above runs, so none is
/// marked and forgotten.
#[test]
fn every_marked_block_is_run_by_the_docs_test() {
    let run: HashMap<&str, &str> = [
        ("quickstart", "docs/quickstart.md"),
        ("readme", "README.md"),
        ("first-look", "docs/operations.md"),
        ("lost-slot", "docs/operations.md"),
        ("retire", "docs/operations.md"),
    ]
    .into();
    for doc in DOCS {
        for block in blocks(doc) {
            assert_eq!(
                run.get(block.name.as_str()),
                Some(&doc),
                "{}: doctest {} is not run by the_quickstart_readme_and_runbooks_work_as_written",
                block.place,
                block.name
            );
        }
    }
}

/// The runbook shows the snippet it runs.
#[test]
fn the_publish_again_block_of_the_runbook_is_the_snippet() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let snippet = std::fs::read_to_string(root.join("docs/snippets/publish-again.sql")).unwrap();
    let statements: String = snippet
        .lines()
        .filter(|l| !l.starts_with("--"))
        .map(|l| format!("{l}\n"))
        .collect();
    let ops = std::fs::read_to_string(root.join("docs/operations.md")).unwrap();
    assert!(
        ops.contains(&format!("```sql\n{statements}```")),
        "docs/operations.md, \"Publishing events again\", differs from the snippet:\n{statements}"
    );
}
