//! Prints the messages of Kafka topics as JSON lines: topic, partition,
//! offset, key, headers and value. Reads every partition from the start with
//! assign(), so it needs no consumer group.
//!
//! cargo run --example tail -- BROKERS COUNT TIMEOUT_SECS TOPIC...

use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 4 {
        eprintln!("usage: tail BROKERS COUNT TIMEOUT_SECS TOPIC...");
        std::process::exit(2);
    }
    let (brokers, count, timeout) = (
        &args[0],
        args[1].parse::<usize>().unwrap(),
        args[2].parse::<u64>().unwrap(),
    );
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "walrelay-tail")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let deadline = Instant::now() + Duration::from_secs(timeout);
    let mut assignment = TopicPartitionList::new();
    for topic in &args[3..] {
        let partitions = loop {
            let found = consumer
                .fetch_metadata(Some(topic), Duration::from_secs(5))
                .ok()
                .and_then(|md| {
                    md.topics()
                        .iter()
                        .find(|t| t.name() == topic && t.error().is_none())
                        .map(|t| t.partitions().len())
                })
                .filter(|&n| n > 0);
            match found {
                Some(n) => break n,
                None if Instant::now() > deadline => {
                    eprintln!("topic {topic} did not appear");
                    std::process::exit(1);
                }
                None => std::thread::sleep(Duration::from_millis(200)),
            }
        };
        for p in 0..partitions as i32 {
            assignment
                .add_partition_offset(topic, p, Offset::Beginning)
                .unwrap();
        }
    }
    consumer.assign(&assignment).expect("assign");
    let mut seen = 0;
    while seen < count && Instant::now() < deadline {
        let Some(result) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let m = result.expect("consume");
        let text = |b: Option<&[u8]>| b.map(|v| String::from_utf8_lossy(v).into_owned());
        let headers: serde_json::Map<String, serde_json::Value> = m
            .headers()
            .map(|h| {
                h.iter()
                    .map(|h| (h.key.to_string(), text(h.value).into()))
                    .collect()
            })
            .unwrap_or_default();
        let value = text(m.payload());
        let line = serde_json::json!({
            "topic": m.topic(),
            "partition": m.partition(),
            "offset": m.offset(),
            "key": text(m.key()),
            "headers": headers,
            "value": value.as_deref().and_then(|v| serde_json::from_str::<serde_json::Value>(v).ok()),
        });
        println!("{line}");
        seen += 1;
    }
    if seen < count {
        eprintln!("only {seen} of {count} messages arrived within {timeout}s");
        std::process::exit(1);
    }
}
