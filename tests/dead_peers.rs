//! Peers that stop answering without closing the connection: a walsender
//! stopped with SIGSTOP (the kernel keeps acknowledging TCP for it, so only
//! an application-level timeout can see it), a postmaster that accepts and
//! never answers, and a stop request that arrives meanwhile. Also the bound
//! on transactions held while the broker is away.

mod support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use support::outbox::{committed_ids, events, read_until_all_arrive};
use support::{eventually, signal, stop, Broker, Postgres, Relay, Stack};

const WAIT: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_walsender_is_noticed_and_streaming_resumes_after_it_continues() {
    let pg = Postgres::start_with(&["wal_sender_timeout = '4s'"]);
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let relay = Relay::start(&pg, &broker);
    relay.wait_ready(WAIT);
    events("Stopped", 1).insert(&client).await;
    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.Stopped"]);
    let seen = read_until_all_arrive(
        &reader,
        &committed_ids(&client, "Stopped").await,
        HashSet::new(),
        &relay,
        WAIT,
    );

    let walsender: i32 = client
        .query_one(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'walrelay'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    stop(walsender as u32);
    events("Stopped", 10).insert(&client).await;
    let stopped = Instant::now();
    eventually(
        Duration::from_secs(30),
        "walrelay to notice the silence",
        || async {
            relay
                .log()
                .contains("Postgres sent nothing on the replication connection")
                .then_some(())
        },
    )
    .await;
    let noticed_after = stopped.elapsed();
    signal(walsender as u32, libc::SIGCONT);
    read_until_all_arrive(
        &reader,
        &committed_ids(&client, "Stopped").await,
        seen,
        &relay,
        WAIT,
    );
    eprintln!("a stopped walsender was noticed after {noticed_after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_backend_that_places_a_relation_ends_the_session_instead_of_holding_it() {
    // The catalog query's timeout is the replication read timeout.
    let pg = Postgres::start_with(&["wal_sender_timeout = '4s'"]);
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    let relay = Relay::start(&pg, &broker);
    relay.wait_ready(WAIT);
    // walrelay's SQL connections (the one that places relations, and the
    // watchdog's), frozen before the outbox's first row needs placing.
    let frozen: Vec<i32> = client
        .query(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' \
             AND pid <> pg_backend_pid() AND datname = current_database()",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(!frozen.is_empty());
    for pid in &frozen {
        stop(*pid as u32);
    }
    events("Frozen", 3).insert(&client).await;
    eventually(
        Duration::from_secs(30),
        "the placement to time out",
        || async {
            relay
                .log()
                .contains("did not answer the catalog query that places table public.outbox")
                .then_some(())
        },
    )
    .await;
    // A new session, on a new connection, places it and streams on.
    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.Frozen"]);
    let expected = committed_ids(&client, "Frozen").await;
    read_until_all_arrive(&reader, &expected, HashSet::new(), &relay, WAIT);
    for pid in &frozen {
        signal(*pid as u32, libc::SIGCONT);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postmaster_that_never_answers_is_retried_after_the_setup_timeout_and_sigterm_still_stops_walrelay(
) {
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    drop(client);
    let postmaster = pg.postmaster_pid();
    stop(postmaster);
    let relay = Relay::start_with(&pg, &broker, &["--setup-timeout", "2s"]);
    eventually(Duration::from_secs(30), "the setup timeout", || async {
        relay
            .log()
            .contains("did not start within --setup-timeout")
            .then_some(())
    })
    .await;
    signal(postmaster, libc::SIGCONT);
    relay.wait_ready(WAIT);

    // A stop request while a session hangs in its start.
    stop(postmaster);
    let mut relay = Relay::start_with(
        &pg,
        &broker,
        &[
            "--setup-timeout",
            "60s",
            "--shutdown-timeout",
            "2s",
            "--startup-timeout",
            "60s",
        ],
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let asked = Instant::now();
    signal(relay.pid(), libc::SIGTERM);
    let status = relay.wait(Duration::from_secs(10));
    signal(postmaster, libc::SIGCONT);
    let status = status.unwrap_or_else(|| panic!("SIGTERM was lost; log:\n{}", relay.log()));
    assert!(status.success(), "log:\n{}", relay.log());
    eprintln!("stopped {:?} after SIGTERM", asked.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_pauses_at_max_pending_transactions_while_the_broker_is_away() {
    let stack = Stack::start(&["--max-pending-transactions", "20"]).await;
    let (client, broker, relay) = (&stack.client, &stack.broker, &stack.relay);
    events("Held", 1).insert(client).await;
    let reader = broker.consumer();
    reader.subscribe(&["outbox.event.Held"]);
    let seen = read_until_all_arrive(
        &reader,
        &committed_ids(client, "Held").await,
        HashSet::new(),
        relay,
        WAIT,
    );

    broker.pause();
    for _ in 0..100 {
        events("Held", 1).insert(client).await;
    }
    let pending = eventually(Duration::from_secs(30), "pending transactions", || async {
        relay
            .metric("walrelay_pending_transactions")
            .filter(|&p| p >= 20.0)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later = relay.metric("walrelay_pending_transactions").unwrap();
    assert!(
        pending <= 20.0 && later <= 20.0,
        "{pending} then {later} pending transactions, above the cap of 20"
    );

    broker.resume();
    read_until_all_arrive(
        &reader,
        &committed_ids(client, "Held").await,
        seen,
        relay,
        WAIT,
    );
}
