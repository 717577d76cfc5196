//! A bare producer beside each drain: the drain's records (the same keys,
//! `id` header and value sizes) sent straight to a fresh broker through
//! walrelay's own client settings (`kafka::client::client_config`, and the
//! `-X` properties of BENCH_RELAY_ARGS), as fast as librdkafka takes them,
//! with no Postgres and no relay. It runs as a child of this binary
//! (`BENCH_BARE_PRODUCER` set), so its CPU comes from `wait4`, like
//! `pg_recvlogical`'s.
//!
//! Its rate is the broker's pace for these records on this machine, which
//! no relay on librdkafka with these settings passes. Its CPU is what a
//! plain producer loop costs, not a lower bound: it hands librdkafka one
//! record at a time, where walrelay hands it a read's worth at once.

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;

use super::drain::wait_with_cpu;
use super::support::Broker;
use super::thread_cpu_seconds;

const ENV: &str = "BENCH_BARE_PRODUCER";
/// walrelay's default --max-inflight-bytes.
const MAX_INFLIGHT_BYTES: u64 = 16 << 20;
/// The partitions walrelay gives a routed topic it creates (--topic-partitions).
const PARTITIONS: u32 = 3;
/// walrelay's default --read-batch-window.
const WINDOW: Duration = Duration::from_millis(4);

/// What one bare run cost.
pub struct Bare {
    pub seconds: f64,
    /// The child's CPU seconds, from `wait4`.
    pub cpu: f64,
}

/// Sends `events` records like a drain's (`pad` bytes of padding each) to
/// a fresh broker, from a child process.
pub fn bare_producer(events: i64, pad: i64) -> Bare {
    run_child(events as u64, pad as u64, 0)
}

/// Sends `rate` small records a second for `seconds`, the records due
/// handed over together every `WINDOW`, as walrelay's read window does at a
/// steady rate.
pub fn paced_bare_producer(rate: u64, seconds: u64) -> Bare {
    run_child(rate * seconds, 0, rate)
}

fn run_child(events: u64, pad: u64, rate: u64) -> Bare {
    let broker = Broker::start();
    let topic = "bare.OrderPlaced";
    broker.create_topic(topic, PARTITIONS);
    let started = Instant::now();
    // Reaped by wait4, which also reports its CPU.
    #[allow(clippy::zombie_processes)]
    let child = Command::new(std::env::current_exe().unwrap())
        .env(
            ENV,
            format!("{} {topic} {events} {pad} {rate}", broker.brokers()),
        )
        .spawn()
        .unwrap();
    let (status, cpu) = wait_with_cpu(child.id());
    assert!(status.success(), "bare producer: {status:?}");
    Bare {
        seconds: started.elapsed().as_secs_f64(),
        cpu,
    }
}

/// In the child: sends the records and exits; true if this process is one.
pub fn run_if_child() -> bool {
    let Ok(args) = std::env::var(ENV) else {
        return false;
    };
    let args: Vec<&str> = args.split_whitespace().collect();
    let [brokers, topic, events, pad, rate] = args[..] else {
        panic!("{ENV}={args:?}: want BROKERS TOPIC EVENTS PAD RATE");
    };
    let (events, pad, rate): (u64, usize, u64) = (
        events.parse().unwrap(),
        pad.parse().unwrap(),
        rate.parse().unwrap(),
    );
    // The same -X properties as the walrelay it stands beside.
    let relay_args = std::env::var("BENCH_RELAY_ARGS").unwrap_or_default();
    let properties: Vec<(String, String)> = relay_args
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|pair| pair[0] == "-X")
        .filter_map(|pair| pair[1].split_once('='))
        .map(|(k, v)| {
            let k = walrelay::kafka::aliases::canonical(k);
            (k.to_string(), v.to_string())
        })
        .collect();
    let config = walrelay::kafka::client::client_config(brokers, &properties, 0);
    let producer: BaseProducer<Reports> = config.create_with_context(Reports::default()).unwrap();
    // Built once, so that the CPU is librdkafka's more than this loop's.
    // Hex padding like the drain's, and the rest of the value as its jsonb
    // reads back (about 70 bytes).
    let padding: String = (0..pad)
        .map(|i| b"0123456789abcdef"[i % 16] as char)
        .collect();
    let value = if pad > 0 {
        format!(
            r#"{{"pad": "{padding}", "seq": 1, "version": 1, "currency": "EUR", "total_cents": 1999}}"#
        )
    } else {
        r#"{"seq": 1, "version": 1, "currency": "EUR", "total_cents": 1999}"#.to_string()
    };
    let keys: Vec<String> = (0..1000).map(|i| format!("order-{i}")).collect();
    let mut id = *b"00000000-0000-4000-8000-000000000000";
    let record_bytes = (value.len() + 64) as u64;
    // Bytes of the records sent before the i-th and not yet reported.
    let in_flight = |i: u64| {
        let reports = producer.context();
        let done = reports.acked.load(Ordering::Relaxed) + reports.failed.load(Ordering::Relaxed);
        (i - done) * record_bytes
    };
    let start = Instant::now();
    for i in 0..events {
        if rate > 0 {
            // Paced: sleep to the window's end in which the next record is due.
            let due = start + Duration::from_secs_f64(i as f64 / rate as f64);
            let now = Instant::now();
            if due > now {
                producer.poll(Duration::ZERO);
                let windows = (due - start).as_nanos().div_ceil(WINDOW.as_nanos());
                std::thread::sleep(start + WINDOW * windows as u32 - now);
            }
        }
        // In flight bounded as walrelay bounds it (--max-inflight-bytes):
        // unbounded, librdkafka would queue the whole drain, and the cost
        // would be fresh memory, not producing. Once full, it waits for half
        // to be acknowledged, not for each record: a wake-up per record
        // would cost more than producing.
        if in_flight(i) > MAX_INFLIGHT_BYTES {
            let waiting = Instant::now();
            while in_flight(i) > MAX_INFLIGHT_BYTES / 2 {
                assert!(
                    waiting.elapsed() < Duration::from_secs(120),
                    "bare producer: no acknowledgement for 120 s"
                );
                producer.poll(Duration::from_millis(100));
            }
        }
        // A distinct event id in the last 12 digits, as cheaply as walrelay's copy of it.
        let mut n = i;
        for digit in id[24..].iter_mut().rev() {
            *digit = b"0123456789abcdef"[(n % 16) as usize];
            n /= 16;
        }
        let headers = OwnedHeaders::new_with_capacity(1).insert(Header {
            key: "id",
            value: Some(&id[..]),
        });
        let mut record = BaseRecord::to(topic)
            .key(keys[(i % 1000) as usize].as_bytes())
            .payload(value.as_bytes())
            .headers(headers);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => panic!("bare producer: {e}"),
            }
        }
        // Delivery reports are served here; every record would cost more.
        if i % 64 == 0 {
            producer.poll(Duration::ZERO);
        }
    }
    producer.flush(Duration::from_secs(120)).unwrap();
    let reports = producer.context();
    assert_eq!(
        reports.failed.load(Ordering::Relaxed),
        0,
        "bare producer: failed deliveries"
    );
    assert_eq!(
        reports.acked.load(Ordering::Relaxed),
        events,
        "bare producer: acknowledged"
    );
    for (thread, seconds) in thread_cpu_seconds(std::process::id())
        .into_iter()
        .filter(|(_, s)| *s > 0.0)
    {
        println!(
            "  bare producer thread {thread}: {:.2} µs per record",
            seconds * 1e6 / events as f64
        );
    }
    true
}

#[derive(Default)]
struct Reports {
    acked: AtomicU64,
    failed: AtomicU64,
}

impl ClientContext for Reports {}

impl ProducerContext for Reports {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let counter = if result.is_ok() {
            &self.acked
        } else {
            &self.failed
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
