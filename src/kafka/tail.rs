//! `walrelay tail`, hidden: prints every record of some topics as JSON
//! lines (topic, partition, offset, key, headers, value), once a given
//! number of them have arrived. It is the demo's reader (scripts/demo.sh),
//! in the binary so that the demo builds no example and none of the
//! dev-dependencies an example brings.

use std::time::{Duration, Instant};

use rdkafka::message::{BorrowedMessage, Headers, Message};

use super::reader::TopicReader;
use crate::error::{Error, Result};

/// How often the topics are read again while too few records are in.
const AGAIN: Duration = Duration::from_millis(300);

/// Prints the records of `topics` at `brokers` once at least `count` are
/// in, or fails after `timeout`.
pub async fn run(brokers: &str, count: usize, timeout: Duration, topics: &[String]) -> Result<()> {
    tokio::task::block_in_place(|| {
        let reader = TopicReader::new(brokers, &[])?;
        tail(&reader, count, timeout, topics)
    })
}

fn tail(reader: &TopicReader, count: usize, timeout: Duration, topics: &[String]) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut lines = Vec::new();
        for topic in topics {
            // A topic walrelay has not created yet reads as empty.
            reader.scan(topic, 0, |message| lines.push(json_line(message)))?;
        }
        if lines.len() >= count {
            for line in lines {
                println!("{line}");
            }
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::permanent(format!(
                "only {} of {} records arrived in {} within {:?}; is walrelay running (its log)?",
                lines.len(),
                count,
                topics.join(", "),
                timeout
            )));
        }
        std::thread::sleep(AGAIN);
    }
}

/// One record as a JSON object; the value parsed as JSON when it is.
fn json_line(m: &BorrowedMessage<'_>) -> serde_json::Value {
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
    serde_json::json!({
        "topic": m.topic(),
        "partition": m.partition(),
        "offset": m.offset(),
        "key": text(m.key()),
        "headers": headers,
        "value": value.as_deref().and_then(|v| serde_json::from_str::<serde_json::Value>(v).ok()),
    })
}
