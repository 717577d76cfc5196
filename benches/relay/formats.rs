//! Avro and Protobuf beside JSON (`-- formats`, issue 46 item 8): what the
//! schema registry's formats cost a drain, in the same run.
//!
//! BENCH_EVENTS (200,000) events in transactions of BENCH_TXN_SIZE (100)
//! wait in the outbox, filled once (relay/drain.rs's rows). Each drain has
//! a slot of its own, created before the fill, so every drain reads the
//! same WAL; BENCH_PAIRS (3) rounds take turns (JSON, Avro, Protobuf, then
//! Avro, Protobuf, JSON, …: each format first once in three rounds), each
//! drain into a fresh broker. All write keys and values through the
//! converter and expand the jsonb payload (`--expand-json-payload`), so the
//! difference is the format: JsonConverter without schemas against
//! Confluent's AvroConverter and ProtobufConverter in the wire format,
//! their schemas in one Apicurio Registry 3.3.3 (tests/support/registry.rs)
//! started before the first drain.
//! Each drain is timed from walrelay's start to its slot confirmed past the
//! last commit, as relay/drain.rs times it; CPU is walrelay's, every thread.

use std::time::{Duration, Instant};

use super::drain::{fill_for_slots, wait_confirmed};
use super::support::registry::SchemaRegistry;
use super::support::{Broker, Postgres};
use super::{cpu_seconds, env_or, rss_kib, start_relay_with};

pub async fn formats() {
    let events = env_or("BENCH_EVENTS", 200_000) as i64;
    let txn_size = env_or("BENCH_TXN_SIZE", 100) as i64;
    let pairs = env_or("BENCH_PAIRS", 3);
    let registry = SchemaRegistry::start();
    let url = registry.url();
    let json = ["--key-format", "json", "--value-format", "json"];
    let registered = |format| {
        [
            "--key-format",
            format,
            "--value-format",
            format,
            "--schema-registry-url",
            &url,
        ]
    };
    let (avro, protobuf) = (registered("avro"), registered("protobuf"));
    let pg = Postgres::start();
    let client = pg.client_with_outbox().await;
    let mut drains = Vec::new();
    for pair in 0..pairs {
        // Each round starts with the next format: none always drains the
        // colder cache or the busier minute.
        let mut turn = [
            ("json", &json[..]),
            ("avro", &avro[..]),
            ("protobuf", &protobuf[..]),
        ];
        turn.rotate_left((pair % 3) as usize);
        for (format, flags) in turn {
            drains.push((format, format!("{format}_{pair}"), flags));
        }
    }
    let slots: Vec<&str> = drains.iter().map(|(_, slot, _)| slot.as_str()).collect();
    let end = fill_for_slots(&client, &slots, events, txn_size).await;
    println!("formats: {events} events in transactions of {txn_size}, {pairs} rounds of drains");
    let mut results: Vec<(&str, f64, f64)> = Vec::new();
    for (format, slot, flags) in &drains {
        let broker = Broker::start();
        let mut args = vec!["--slot", slot, "--expand-json-payload"];
        args.extend(flags.iter().copied());
        let started = Instant::now();
        let mut relay = start_relay_with(&pg, &broker, &args);
        let deadline = started + Duration::from_secs(600);
        wait_confirmed(&client, &relay, slot, end, deadline).await;
        let secs = started.elapsed().as_secs_f64();
        let cpu = cpu_seconds(relay.pid());
        let rss = rss_kib(relay.pid());
        let published = relay
            .metric("walrelay_events_published_total")
            .unwrap_or(0.0);
        // Confirmed past the end means every event was acknowledged; the
        // count says none went elsewhere (a dead-letter topic, say).
        assert!(
            published >= events as f64,
            "{format}: published {published} of {events}; log:\n{}",
            relay.log()
        );
        relay.kill9();
        // After the timing: a record of each drain is in the format asked
        // for (Avro, Protobuf: Confluent's magic byte 0 then the schema id).
        let reader = broker.consumer();
        reader.subscribe(&["outbox.event.OrderPlaced"]);
        let first = reader.read(1, Duration::from_secs(60));
        let value = first
            .first()
            .and_then(|r| r.raw_value.clone())
            .expect("a record of the drain");
        let expected = if *format == "json" { b'{' } else { 0 };
        assert_eq!(value[0], expected, "{format}: {value:?}");
        let rate = events as f64 / secs;
        let per_event = cpu * 1e6 / events as f64;
        println!(
            "  {format:<8} {slot:<10} {rate:>7.0} events/s ({secs:.2}s); CPU {per_event:.2} µs/event; \
             peak RSS {} MiB",
            rss / 1024
        );
        results.push((format, rate, per_event));
    }
    for format in ["json", "avro", "protobuf"] {
        let mut rates: Vec<f64> = results
            .iter()
            .filter(|r| r.0 == format)
            .map(|r| r.1)
            .collect();
        let mut cpus: Vec<f64> = results
            .iter()
            .filter(|r| r.0 == format)
            .map(|r| r.2)
            .collect();
        println!(
            "{format}: median {:.0} events/s, {:.2} µs of CPU per event",
            median(&mut rates),
            median(&mut cpus)
        );
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
