//! `walrelay replay --where SQL`: publishes outbox rows again, as they are
//! now, to the topics, keys, headers and values `run` gives them.
//!
//! The rows come from `rows` (a cursor in one read-only snapshot), the
//! events from `outbox::mapping`, the records go through the relay's own
//! publisher (`sender`), so a replayed event is the streamed one, byte for
//! byte. It needs no slot and changes nothing in the database, so it runs
//! beside `walrelay run`; consumers dedupe by the event id.

use serde_json::json;
use tokio::sync::mpsc;
use tokio_postgres::Client;
use tracing::info;

use super::order;
use super::plan::Plan;
use super::rows::{self, mapped_tables, OutboxTable, RowCursor};
use super::sender::RowSender;
use crate::clock;
use crate::config::{ReplayArgs, Settings, Source};
use crate::error::{Error, Result};
use crate::kafka::producer::KafkaSink;
use crate::metrics::meter::Meter;
use crate::metrics::Metrics;
use crate::outbox::cloudevents::Change;
use crate::outbox::mapping::OutboxSchema;
use crate::postgres::lsn::Lsn;
use crate::postgres::setup;
use crate::sink::Record;

pub async fn run(args: ReplayArgs) -> Result<()> {
    let settings = Settings::from_args(&args.run)?;
    let flags = &args.replay;
    if settings.source == Source::Messages {
        return Err(Error::permanent(
            "walrelay replay reads rows of the outbox table, and --source messages has none: \
             emitted messages live only in the WAL",
        ));
    }
    if settings.exactly_once.is_some() {
        return Err(Error::permanent(
            "walrelay replay sends rows again on purpose, at-least-once, and does not take \
             --delivery exactly-once: drop the flag (consumers dedupe by the event id)",
        ));
    }
    if flags.max_rate == Some(0) {
        return Err(Error::permanent(
            "--max-rate must be above 0 (rows per second); leave it out for no limit",
        ));
    }
    let client = setup::connect(&settings.pg).await?;
    rows::begin(&client, None).await?;
    let tables = mapped_tables(&client, &settings).await?;
    let mut order_by = Vec::with_capacity(tables.len());
    for (table, _) in &tables {
        let key = &settings.mapping.key;
        order_by.push(
            order::order_by(&client, table, flags.order_by.as_deref(), key, "--order-by").await?,
        );
    }
    let table_list: Vec<OutboxTable> = tables.iter().map(|(t, _)| t.clone()).collect();
    let plan = Plan::count(&client, &settings, &table_list, &flags.predicate).await?;
    let out = Output { json: flags.json };
    out.plan(&plan, flags, &order_by);
    if plan.rows() == 0 {
        // Asked to publish rows, and there are none: not a success.
        out.result(0, 0, flags.dry_run);
        return Err(Error::permanent(format!(
            "no rows match --where {}: nothing to replay. Check the condition against \
             the outbox (a range must start before it ends, and rows retention deleted \
             are gone)",
            flags.predicate
        )));
    }
    if flags.dry_run {
        return dry_run(&client, &settings, &tables, &order_by, flags, &out).await;
    }

    let metrics = Metrics::new();
    let (fatal_tx, mut fatal_rx) = mpsc::channel(1);
    let sink = KafkaSink::new(&settings.kafka, &settings.topics, metrics.clone(), fatal_tx)?;
    let mut sender = RowSender::new(
        &settings,
        sink,
        metrics,
        Lsn::ZERO,
        flags.max_rate.map(f64::from),
    );
    let mut meter = Meter::new("replay", "rows", plan.rows());
    let sending = async {
        for ((table, schema), order) in tables.iter().zip(&order_by) {
            let mut cursor = RowCursor::open(&client, table, &flags.predicate, order).await?;
            sender
                .send_all(&mut cursor, schema, |done| {
                    meter.update(done);
                })
                .await?;
        }
        sender
            .drain(|done| {
                meter.update(done);
            })
            .await
    };
    let result = tokio::select! {
        result = sending => result,
        Some(fatal) = fatal_rx.recv() => Err(fatal),
    };
    let _ = client.batch_execute("COMMIT").await;
    let done = sender.done();
    meter.finish(done);
    if let Err(e) = result {
        return Err(Error::permanent(format!(
            "walrelay replay stopped after Kafka acknowledged {done} of {} rows; nothing in \
             the database changed, so running the same command again sends every row again \
             (consumers dedupe by id)",
            plan.rows()
        ))
        .with_source(e));
    }
    out.result(done, plan.rows(), false);
    Ok(())
}

/// Prints each record that would be sent; sends nothing. Rows that would
/// be poison are printed with the reason, and make the exit non-zero under
/// `--on-poison halt`, as they would stop a real replay.
async fn dry_run(
    client: &Client,
    settings: &Settings,
    tables: &[(OutboxTable, OutboxSchema)],
    order_by: &[String],
    flags: &crate::config::ReplayFlags,
    out: &Output,
) -> Result<()> {
    let (mut rows, mut poison) = (0u64, 0u64);
    let now_ms = clock::unix_now_us() / 1000;
    for ((table, schema), order) in tables.iter().zip(order_by) {
        let mut cursor = RowCursor::open(client, table, &flags.predicate, order).await?;
        while let Some(batch) = cursor.next_batch().await? {
            for tuple in batch {
                rows += 1;
                let event = match schema.event(tuple, &Change::read_at(now_ms * 1000)) {
                    Ok(event) => event,
                    Err(e) => {
                        poison += 1;
                        out.poison(&e.event.id_text(), &e.reason);
                        continue;
                    }
                };
                let topic = match &event.route_value {
                    None => Err(format!(
                        "its route-by column {:?} is NULL",
                        settings.mapping.route_by
                    )),
                    Some(value) => settings.router.topic(&String::from_utf8_lossy(value)),
                };
                match topic {
                    Ok(topic) => out.record(&event.record(&topic, now_ms)),
                    Err(reason) => {
                        poison += 1;
                        out.poison(&event.id_text(), &reason);
                    }
                }
            }
        }
    }
    let _ = client.batch_execute("COMMIT").await;
    out.result(rows - poison, rows, true);
    if poison > 0 && settings.on_poison == crate::config::OnPoison::Halt {
        return Err(Error::permanent(format!(
            "{poison} of {rows} rows would be poison, and --on-poison halt would stop the \
             replay at the first; fix them, or replay with --on-poison dead-letter"
        )));
    }
    Ok(())
}

/// What replay prints on stdout: text for people, or one JSON object a line.
struct Output {
    json: bool,
}

impl Output {
    fn plan(&self, plan: &Plan, flags: &crate::config::ReplayFlags, order_by: &[String]) {
        if self.json {
            let mut doc = plan.to_json();
            doc["where"] = json!(flags.predicate);
            doc["order_by"] = json!(order_by);
            doc["dry_run"] = json!(flags.dry_run);
            doc["max_rate"] = json!(flags.max_rate);
            crate::outln!("{}", json!({ "plan": doc }));
            return;
        }
        let verb = if flags.dry_run {
            "walrelay replay (dry run) would send"
        } else {
            "walrelay replay will send"
        };
        crate::outln!("{}", plan.text(verb));
        crate::outln!("  where {}", flags.predicate);
        crate::outln!("  ordered by {}", order_by.join("; "));
        if let Some(rate) = flags.max_rate {
            crate::outln!("  at most {rate} rows/s");
        }
        if !flags.dry_run {
            info!(rows = plan.rows(), "replay starting");
        }
    }

    fn record(&self, record: &Record<'_>) {
        if self.json {
            let headers: Vec<_> = record
                .headers
                .iter()
                .map(|(name, value)| json!([name, value.as_deref().map(bytes_json)]))
                .collect();
            crate::outln!(
                "{}",
                json!({"record": {
                    "topic": record.topic,
                    "partition": record.partition,
                    "key": record.key.map(bytes_json),
                    "headers": headers,
                    "value": record.value.map(bytes_json),
                    "timestamp_ms": record.timestamp_ms,
                }})
            );
            return;
        }
        let headers: Vec<String> = record
            .headers
            .iter()
            .map(|(name, value)| format!("{name}={}", text(value.as_deref())))
            .collect();
        let partition = record
            .partition
            .map_or_else(String::new, |p| format!(" partition={p}"));
        crate::outln!(
            "{}{partition} key={} headers[{}] value={}",
            record.topic,
            text(record.key),
            headers.join(", "),
            text(record.value)
        );
    }

    fn poison(&self, id: &str, reason: &str) {
        if self.json {
            crate::outln!("{}", json!({"poison": {"id": id, "reason": reason}}));
        } else {
            crate::outln!("poison: event {id}: {reason}");
        }
    }

    fn result(&self, sent: u64, rows: u64, dry_run: bool) {
        if self.json {
            crate::outln!(
                "{}",
                json!({"result": {"rows": rows, "sent": sent, "dry_run": dry_run}})
            );
        } else if dry_run {
            crate::outln!("dry run: {sent} of {rows} rows would be sent; nothing was sent");
        } else {
            crate::outln!("replayed {sent} of {rows} rows: Kafka acknowledged every one");
        }
    }
}

/// Bytes as JSON: a string when they are UTF-8, else `{"base64": …}`.
fn bytes_json(bytes: &[u8]) -> serde_json::Value {
    use base64::Engine as _;
    match std::str::from_utf8(bytes) {
        Ok(text) => json!(text),
        Err(_) => json!({"base64": base64::engine::general_purpose::STANDARD.encode(bytes)}),
    }
}

/// Bytes for a line of text: quoted, with anything unprintable escaped.
fn text(bytes: Option<&[u8]>) -> String {
    match bytes {
        None => "null".to_string(),
        Some(b) => format!("{:?}", String::from_utf8_lossy(b)),
    }
}
