//! `walrelay redrive`: publishes the records of the dead-letter topic again
//! to the topics they were meant for, once their cause is fixed.
//!
//! Each record goes to the topic in its `walrelay.original-topic` header
//! with its key, value and headers, walrelay's own `walrelay.*` headers
//! taken off: the event as `run` would have sent it. Records are read in
//! order per partition of the dead-letter topic, and a key's records are
//! all in one partition, so a key's events are sent in order (the
//! producer is `run`'s idempotent one, which keeps order per partition).
//!
//! The position is kept in a consumer group (`--group`), committed only
//! over records that are *settled*: Kafka acknowledged what took their
//! place (`position.rs`). A second run therefore sends nothing again, and
//! a run stopped at any point sends again at most what was not yet
//! committed (consumers dedupe by id). Nothing is ever left behind the
//! position unsent: a record that is not redriven goes back to the end of
//! the dead-letter topic, whole, before the group moves past it:
//!
//! - one that fails again (Kafka refuses it, or its topic may not be used,
//!   or it never had a topic) with the new `walrelay.reason`;
//! - one that `--filter-event-type` does not select, unchanged. A filtered
//!   run thus moves the group past everything, and a later run with
//!   another filter (or none) finds the skipped records at the end. The
//!   order of a key's events is only kept among the records a run sends.
//!
//! Reading stops at each partition's end as of the start, so records put
//! back are not read again in the same run. `--dry-run` reads the same
//! records and prints what would happen to each, sending nothing and
//! committing nothing.

mod position;
mod reader;
mod record;
mod report;
mod sender;

use tokio::sync::{mpsc, watch};

use crate::config::{RedriveArgs, RedriveSettings};
use crate::error::{Error, Result};
use crate::kafka::producer::KafkaSink;
use crate::metrics::Metrics;
use reader::DeadLetterReader;
use report::Report;
use sender::Redrive;

pub async fn run(args: RedriveArgs, shutdown: watch::Receiver<bool>) -> Result<()> {
    let settings = args.settings()?;
    let mut report = Report::new(settings.json, settings.dry_run);
    let (topic, group) = (&settings.dead_letter_topic, &settings.group);
    let Some(reader) = DeadLetterReader::open(&settings).await? else {
        report.plan(topic, group, None);
        // Asked to redrive from a topic that is not there: a mistyped
        // --dead-letter-topic or --kafka-brokers, not a success.
        return Err(Error::permanent(format!(
            "the dead-letter topic {topic} does not exist at {}: nothing to redrive. Name \
             the --dead-letter-topic walrelay run writes to, on the cluster it publishes to \
             (--kafka-brokers)",
            settings
                .consumer
                .get("bootstrap.servers")
                .unwrap_or_default()
        )));
    };
    report.plan(topic, group, Some(&reader.ranges));
    let start: std::collections::BTreeMap<i32, i64> =
        reader.ranges.iter().map(|(&p, r)| (p, r.start)).collect();
    if settings.dry_run {
        let result = dry_run(reader, &settings, &mut report, shutdown).await;
        report.summary(topic, group, &start);
        return result;
    }
    let (fatal_tx, fatal_rx) = mpsc::channel(1);
    let sink = KafkaSink::new(
        &settings.producer,
        &settings.topics,
        Metrics::new(),
        fatal_tx,
    )?;
    let mut redrive = Redrive::new(&settings, sink, reader, report);
    let result = redrive.run(shutdown, fatal_rx).await;
    // Whatever happened, what is settled is committed.
    let committed = redrive.commit().await;
    redrive.summary();
    result?;
    committed?;
    match redrive.failed_again() {
        0 => Ok(()),
        n => Err(Error::permanent(format!(
            "{n} record{} failed again and {} back in {topic} with the new walrelay.reason \
             (listed above); fix the cause it names and run walrelay redrive again",
            if n == 1 { "" } else { "s" },
            if n == 1 { "is" } else { "are" },
        ))),
    }
}

/// Reads what a run would read and says what would happen to each record.
async fn dry_run(
    mut reader: DeadLetterReader,
    settings: &RedriveSettings,
    report: &mut Report,
    mut shutdown: watch::Receiver<bool>,
) -> Result<()> {
    loop {
        let next = tokio::select! {
            next = reader.next() => next?,
            _ = shutdown.wait_for(|stop| *stop) => return Err(interrupted()),
        };
        let Some(record) = next else {
            return Ok(());
        };
        let plan = record.plan(&settings.event_types);
        report.would(&record, &plan);
    }
}

fn interrupted() -> Error {
    Error::permanent(
        "redrive was stopped; what Kafka acknowledged is committed, the rest is read again by \
         the next run: run walrelay redrive again",
    )
}
