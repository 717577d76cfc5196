//! Draining a backlog (`-- throughput`): BENCH_EVENTS (200,000) events in
//! transactions of BENCH_TXN_SIZE (100), each with a jsonb payload of about
//! 70 bytes, or of BENCH_PAYLOAD_BYTES more (8192 for issue 21's 8 KB
//! shape). `pg_recvlogical` drains an identical pgoutput slot to /dev/null
//! (Postgres's own client, the reference; its CPU from `wait4`; not the
//! walsender's top pace: its walsender spends more CPU per event than
//! walrelay's, docs/benchmarks.md), then walrelay drains
//! its slot into the broker until the slot is confirmed past the last
//! commit (its CPU, every thread, from /proc). Both start cold, so both
//! figures include a connection and a start. Beside them, the CPU of each
//! one's walsender and of the broker over walrelay's drain: the machine
//! they share is what a drain slower than `pg_recvlogical`'s may lack.
//! walrelay's CPU is also printed by thread. Then a bare producer sends the
//! same records to a fresh broker (relay/bare.rs): the pace the broker
//! keeps without Postgres or a relay, and what producing alone costs.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use super::bare::bare_producer;
use super::support::pg::confirmed_flush_lsn;
use super::support::{Broker, Postgres, Relay};
use super::{cpu_seconds, env_or, rss_kib, start_relay, thread_cpu_seconds};

pub async fn throughput() {
    let events = env_or("BENCH_EVENTS", 200_000) as i64;
    let txn_size = env_or("BENCH_TXN_SIZE", 100) as i64;
    let pad = env_or("BENCH_PAYLOAD_BYTES", 0) as i64;
    let pg = Postgres::start();
    let broker = Broker::start();
    let client = pg.client_with_outbox().await;
    // Separate statements: a slot cannot be created in a transaction that wrote.
    for sql in [
        "CREATE PUBLICATION walrelay FOR TABLE outbox WITH (publish = 'insert')",
        "SELECT pg_create_logical_replication_slot('walrelay', 'pgoutput')",
        "SELECT pg_create_logical_replication_slot('recvlogical', 'pgoutput')",
    ] {
        client.batch_execute(sql).await.unwrap();
    }
    let fill = Instant::now();
    fill_outbox(&client, events, txn_size, pad).await;
    let end_lsn: String = client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get(0);
    let end: u64 = client
        .query_one("SELECT (pg_current_wal_lsn() - '0/0')::bigint", &[])
        .await
        .unwrap()
        .get::<_, i64>(0) as u64;
    println!(
        "filled {events} events in transactions of {txn_size} ({pad} bytes of padding each) in {:.1}s",
        fill.elapsed().as_secs_f64()
    );

    let Recvlogical {
        seconds: recv_secs,
        cpu: recv_cpu,
        walsender_cpu: recv_walsender_cpu,
    } = recvlogical(&pg, &client, "recvlogical", &end_lsn).await;

    let started = Instant::now();
    let broker_cpu_before = cpu_seconds(broker.pid());
    let relay = start_relay(&pg, &broker);
    // Drained = the slot confirmed past the last commit; Kafka's
    // acknowledgement of every event is timed beside it.
    loop {
        if relay
            .metric("walrelay_events_published_total")
            .unwrap_or(0.0)
            >= events as f64
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "walrelay did not drain; log:\n{}",
            relay.log()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let relay_secs = started.elapsed().as_secs_f64();
    while confirmed_flush_lsn(&client, "walrelay").await < end {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let confirmed_secs = started.elapsed().as_secs_f64();
    let relay_cpu = cpu_seconds(relay.pid());
    let relay_threads = thread_cpu_seconds(relay.pid());
    let rss = rss_kib(relay.pid());
    // Where a drain slower than pg_recvlogical's goes: walrelay shares the
    // machine with its walsender and the broker, all three busy at once
    // (the walsender of its last session only, had it reconnected).
    let broker_cpu = cpu_seconds(broker.pid()) - broker_cpu_before;
    let walsender_cpu = match walsender_pid(&client, "walrelay").await {
        Some(pid) => cpu_seconds(pid),
        None => f64::NAN,
    };
    if std::env::var("BENCH_SHOW_LOG").is_ok() {
        println!("{}", relay.log());
    }
    let per_event_us = |cpu: f64| cpu * 1e6 / events as f64;
    println!(
        "pg_recvlogical: {events} events in {recv_secs:.2}s = {:.0} events/s; {:.2} µs of CPU per event",
        events as f64 / recv_secs,
        per_event_us(recv_cpu)
    );
    println!(
        "walrelay:       {events} events confirmed in {confirmed_secs:.2}s = {:.0} events/s \
         ({:.0}% of pg_recvlogical); all acknowledged after {relay_secs:.2}s; peak RSS {} MiB; \
         {:.2} µs of CPU per event ({:.2}x pg_recvlogical's)",
        events as f64 / confirmed_secs,
        100.0 * recv_secs / confirmed_secs,
        rss / 1024,
        per_event_us(relay_cpu),
        relay_cpu / recv_cpu
    );
    for (thread, seconds) in relay_threads.into_iter().filter(|(_, s)| *s > 0.0) {
        println!(
            "  walrelay thread {thread}: {:.2} µs per event",
            per_event_us(seconds)
        );
    }
    println!(
        "walsenders:     pg_recvlogical's {:.2} µs of CPU per event, walrelay's {:.2}; the broker {:.2}; \
         walrelay, its walsender and the broker together {:.2} cores over the drain",
        per_event_us(recv_walsender_cpu),
        per_event_us(walsender_cpu),
        per_event_us(broker_cpu),
        (relay_cpu + broker_cpu + walsender_cpu) / confirmed_secs
    );
    drop(relay);
    drop(broker);
    let bare = bare_producer(events, pad);
    println!(
        "bare producer:  the same records through walrelay's Kafka settings to a fresh broker, \
         no Postgres: {:.0} records/s (walrelay's rate {:.0}% of it); {:.2} µs of CPU per record",
        events as f64 / bare.seconds,
        100.0 * bare.seconds / confirmed_secs,
        per_event_us(bare.cpu)
    );
    println!(
        "receiving alone + producing alone: pg_recvlogical + bare producer {:.2} µs per event; \
         walrelay {:.2}x that",
        per_event_us(recv_cpu + bare.cpu),
        relay_cpu / (recv_cpu + bare.cpu)
    );
}

/// A thread that reads `pid`'s CPU seconds every few milliseconds and
/// returns the last reading once the process has gone: a walsender's own
/// total, which its exit takes away from /proc.
fn last_cpu_seconds(pid: u32) -> std::thread::JoinHandle<f64> {
    std::thread::spawn(move || {
        // NaN if it had gone before the first look. Every 10 ms: the reader
        // must not load the machine that pg_recvlogical measures.
        let mut last = f64::NAN;
        while std::path::Path::new(&format!("/proc/{pid}/stat")).exists() {
            last = cpu_seconds(pid).max(last);
            std::thread::sleep(Duration::from_millis(10));
        }
        last
    })
}

/// The walsender serving `slot`, while a client streams from it.
async fn walsender_pid(client: &tokio_postgres::Client, slot: &str) -> Option<u32> {
    let row = client
        .query_opt(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap()?;
    row.get::<_, Option<i32>>(0).map(|pid| pid as u32)
}

/// One `pg_recvlogical` drain of `slot` to /dev/null.
struct Recvlogical {
    seconds: f64,
    /// pg_recvlogical's own CPU seconds, from `wait4`.
    cpu: f64,
    /// Its walsender's CPU seconds.
    walsender_cpu: f64,
}

async fn recvlogical(
    pg: &Postgres,
    client: &tokio_postgres::Client,
    slot: &str,
    end_lsn: &str,
) -> Recvlogical {
    let started = Instant::now();
    // Reaped by wait4 below, which also reports its CPU.
    #[allow(clippy::zombie_processes)]
    let child = Command::new(pg.bin("pg_recvlogical"))
        .args(["-d", &pg.url(), "--slot", slot, "--start", "--no-loop"])
        .args(["-o", "proto_version=1", "-o", "publication_names=walrelay"])
        // pgoutput's binary mode (PostgreSQL 14+), to weigh it against text.
        .args(if std::env::var("BENCH_RECVLOGICAL_BINARY").is_ok() {
            &["-o", "binary=true"][..]
        } else {
            &[][..]
        })
        .args(["-E", end_lsn, "-f", "/dev/null"])
        .spawn()
        .unwrap();
    let walsender = loop {
        if let Some(pid) = walsender_pid(client, slot).await {
            break Some(last_cpu_seconds(pid));
        }
        if started.elapsed() > Duration::from_secs(10) {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    let (status, cpu) = wait_with_cpu(child.id());
    assert!(status.success(), "pg_recvlogical: {status:?}");
    Recvlogical {
        seconds: started.elapsed().as_secs_f64(),
        cpu,
        walsender_cpu: walsender.map_or(f64::NAN, |t| t.join().unwrap()),
    }
}

/// Waits for a child with `wait4`, which reports the CPU (user + system) it
/// used, in seconds, beside its exit status.
pub fn wait_with_cpu(pid: u32) -> (ExitStatus, f64) {
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid as libc::pid_t, "wait4 failed");
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (
        ExitStatus::from_raw(status),
        seconds(usage.ru_utime) + seconds(usage.ru_stime),
    )
}

/// `events` events (an `OrderPlaced` with a `jsonb` payload of about 70
/// bytes, plus `pad` bytes in a `pad` field) in transactions of `txn_size`.
/// The padding is hex cut from a longer string at an offset that moves with
/// each row: text that pglz cannot shrink, so the WAL and the walsender
/// carry the full size, as they do for real payloads.
pub async fn fill_outbox(client: &tokio_postgres::Client, events: i64, txn_size: i64, pad: i64) {
    let mut done = 0;
    while done < events {
        let n = txn_size.min(events - done);
        client
            .execute(
                "WITH hex AS (SELECT string_agg(md5(g::text), '') AS s FROM generate_series(1, $3::int / 32 + 40) g) \
                 INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
                 SELECT gen_random_uuid(), 'order', 'order-' || (i % 1000), 'OrderPlaced', \
                        jsonb_build_object('version', 1, 'seq', i, 'total_cents', 1999, 'currency', 'EUR') \
                        || CASE WHEN $3::int > 0 \
                                THEN jsonb_build_object('pad', substr(hex.s, (i % 1000)::int + 1, $3::int)) \
                                ELSE '{}'::jsonb END \
                 FROM generate_series($1::bigint, $1::bigint + $2::bigint - 1) i, hex",
                &[&done, &n, &(pad as i32)],
            )
            .await
            .unwrap();
        done += n;
    }
}

/// The publication and `slots`, created before `fill_outbox` so that every
/// slot reads the same WAL; returns the WAL's end after the fill.
pub async fn fill_for_slots(
    client: &tokio_postgres::Client,
    slots: &[&str],
    events: i64,
    txn_size: i64,
) -> u64 {
    client
        .batch_execute("CREATE PUBLICATION walrelay FOR TABLE outbox WITH (publish = 'insert')")
        .await
        .unwrap();
    for slot in slots {
        client
            .execute(
                "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
                &[slot],
            )
            .await
            .unwrap();
    }
    fill_outbox(client, events, txn_size, 0).await;
    client
        .query_one("SELECT (pg_current_wal_lsn() - '0/0')::bigint", &[])
        .await
        .unwrap()
        .get::<_, i64>(0) as u64
}

/// Waits until `relay` has confirmed `slot` past `end`; past `deadline`,
/// fails with its log.
pub async fn wait_confirmed(
    client: &tokio_postgres::Client,
    relay: &Relay,
    slot: &str,
    end: u64,
    deadline: Instant,
) {
    while confirmed_flush_lsn(client, slot).await < end {
        assert!(
            Instant::now() < deadline,
            "{slot} did not drain; log:\n{}",
            relay.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
