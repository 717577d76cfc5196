//! The broker's floor: the latency benchmark's load produced straight to the
//! broker, with no Postgres and no relay, read back by the same consumer.
//! Whatever a relay adds comes on top of this.

use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};

use super::support::Broker;
use super::{env_or, read_latencies, report_latencies, unix_us};

pub async fn floor() {
    let rate = env_or("BENCH_RATE", 2000);
    let seconds = env_or("BENCH_SECONDS", 15);
    let per_txn = env_or("BENCH_TXN_EVENTS", 20).max(1);
    let broker = Broker::start();
    broker.create_topic("outbox.event.Latency", 3);
    let linger = std::env::var("BENCH_FLOOR_LINGER_MS").unwrap_or_else(|_| "1".into());
    let producer: ThreadedProducer<_> = ClientConfig::new()
        .set("bootstrap.servers", broker.brokers())
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", &linger)
        .create()
        .unwrap();
    let batches = (rate * seconds / per_txn) as usize;
    let total = batches * per_txn as usize;
    let brokers = broker.brokers();
    let reader = std::thread::spawn(move || read_latencies(&brokers, total));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let interval = Duration::from_secs_f64(per_txn as f64 / rate as f64);
    let start = Instant::now();
    for b in 0..batches {
        let due = start + interval * b as u32;
        let now = Instant::now();
        if due > now {
            tokio::time::sleep(due - now).await;
        }
        let payload = format!("{{\"sent_us\": {}}}", unix_us());
        for i in 0..per_txn {
            let key = format!("order-{}", (b as u64 * per_txn + i) % 100);
            let record = BaseRecord::to("outbox.event.Latency")
                .key(&key)
                .payload(&payload);
            producer.send(record).map_err(|(e, _)| e).unwrap();
        }
    }
    let achieved = total as f64 / start.elapsed().as_secs_f64();
    producer.flush(Duration::from_secs(30)).unwrap();
    let latencies = reader.join().unwrap();
    report_latencies(
        &format!("broker floor (linger.ms={linger}, no Postgres, no relay)"),
        achieved,
        per_txn,
        seconds,
        latencies,
    );
}
