//! `walrelay audit --since TIME|DURATION`: proves that every outbox row of
//! a time window has its event in the topic it routes to, or names the
//! ones that do not and the `walrelay replay` that publishes them.
//!
//! Memory stays bounded by working one topic at a time: the event ids of
//! that topic's rows in the window, as 128-bit hashes in a sorted array
//! (16 bytes and a flag a row), are marked off while the topic is read
//! from shortly before the rows' earliest time to its end; a second pass
//! over the same rows (one read-only snapshot) names those left unmarked.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};

use tokio_postgres::Client;
use tracing::{debug, info};

use report::{ident, replay_command, Output, LIST_IDS};

use super::rows::{self, mapped_tables, OutboxTable, RowCursor};
use crate::config::{AuditArgs, AuditFlags, Settings, Source};
use crate::error::{Error, Result};
use crate::kafka::reader::TopicReader;
use crate::metrics::meter::Meter;
use crate::postgres::names::{quote_ident, quote_literal};
use crate::postgres::pgoutput::Datum;
use crate::postgres::setup;
use crate::postgres::sql_error;

mod report;

/// The window, resolved once: both passes and the printed command use it.
struct Window {
    since: String,
    until: String,
    column: String,
}

impl Window {
    async fn resolve(client: &Client, flags: &AuditFlags) -> Result<Window> {
        let since: String = match humantime::parse_duration(flags.since.trim()) {
            Ok(back) => {
                client
                    .query_one(
                        "SELECT (now() - make_interval(secs => $1::float8))::text",
                        &[&back.as_secs_f64()],
                    )
                    .await
            }
            Err(_) => {
                client
                    .query_one("SELECT $1::text::timestamptz::text", &[&flags.since])
                    .await
            }
        }
        .map_err(|e| {
            sql_error(
                format!(
                    "--since {:?} is neither a duration (2h, 7days) nor a time Postgres reads \
                     (2026-12-01 10:00+00)",
                    flags.since
                ),
                e,
            )
        })?
        .get(0);
        let until: String = client
            .query_one(
                "SELECT COALESCE($1::text::timestamptz, now())::text",
                &[&flags.until],
            )
            .await
            .map_err(|e| {
                sql_error(
                    format!(
                        "--until {} is not a time Postgres reads (2026-12-01 12:00+00)",
                        flags.until.as_deref().unwrap_or_default()
                    ),
                    e,
                )
            })?
            .get(0);
        let reversed: bool = client
            .query_one(
                "SELECT $1::text::timestamptz > $2::text::timestamptz",
                &[&since, &until],
            )
            .await
            .map_err(|e| sql_error("cannot compare the window's bounds", e))?
            .get(0);
        if reversed {
            return Err(Error::permanent(format!(
                "the window is reversed: --since {} ({since}) is after {} ({until}); give \
                 --since the earlier time{}",
                flags.since,
                flags
                    .until
                    .as_deref()
                    .map_or_else(|| "now".to_string(), |u| format!("--until {u}")),
                if flags.until.is_some() {
                    " and --until the later"
                } else {
                    ""
                }
            )));
        }
        Ok(Window {
            since,
            until,
            column: flags.time_column.clone(),
        })
    }

    /// The window as a SQL condition.
    fn predicate(&self) -> String {
        let column = ident(&self.column);
        format!(
            "{column} >= {} AND {column} < {}",
            quote_literal(&self.since),
            quote_literal(&self.until)
        )
    }
}

/// One topic's share of the window.
#[derive(Default)]
struct TopicRows {
    /// The route-by values that route here.
    routes: BTreeSet<String>,
    rows: u64,
    /// The earliest row's time, in Unix milliseconds.
    earliest_ms: i64,
}

/// What the audit found so far.
#[derive(Default)]
struct Findings {
    rows: u64,
    missing: u64,
    /// The first missing ids, for the replay command.
    listed: Vec<String>,
    /// Route-by values of topics with missing events.
    routes: BTreeSet<String>,
    /// Rows that route to no topic at all.
    unroutable: u64,
    /// A missing row has a NULL event id.
    null_ids: bool,
    /// Missing events whose copy is in the dead-letter topic.
    dead_lettered: u64,
    /// Topics rows route to that do not exist in the cluster.
    absent: Vec<String>,
}

/// The event ids (`walrelay.event-id`) of the dead-letter topic's records
/// from `from_ms` on: a missing event found there was poison, not lost.
/// The topic holds only poison events, so the set stays small.
fn dead_lettered(reader: &TopicReader, settings: &Settings, from_ms: i64) -> Result<HashSet<u128>> {
    let mut ids = HashSet::new();
    // A dead-letter topic that does not exist: nothing was ever poison.
    tokio::task::block_in_place(|| {
        reader.scan(settings.dead_letter_topic(), from_ms, |message| {
            use rdkafka::message::{Headers, Message};
            let id = message.headers().and_then(|headers| {
                headers
                    .iter()
                    .find(|h| h.key == crate::delivery::dead_letter::EVENT_ID)
                    .and_then(|h| h.value)
            });
            if let Some(id) = id {
                ids.insert(hash(Some(id)));
            }
        })
    })?;
    Ok(ids)
}

/// Runs the audit; an error (exit 1) when an event is missing.
pub async fn run(args: AuditArgs) -> Result<()> {
    let settings = Settings::from_args(&args.run)?;
    let flags = &args.audit;
    if settings.source == Source::Messages {
        return Err(Error::permanent(
            "walrelay audit checks the rows of the outbox table, and --source messages has none",
        ));
    }
    let client = setup::connect(&settings.pg).await?;
    rows::begin(&client, None).await?;
    let window = Window::resolve(&client, flags).await?;
    let tables: Vec<OutboxTable> = mapped_tables(&client, &settings)
        .await?
        .into_iter()
        .map(|(table, _)| table)
        .collect();
    for table in &tables {
        if !table.has_column(&window.column) {
            return Err(Error::permanent(format!(
                "table {} has no column {:?} to place rows in the window: name one with \
                 --time-column",
                table.table, window.column
            )));
        }
    }
    let mut found = Findings::default();
    let topics = census(&client, &settings, &tables, &window, &mut found).await?;
    let out = Output { json: flags.json };
    out.window(&window, &topics, found.rows);
    if found.rows == 0 {
        // Nothing to look for in Kafka: an empty window (or one in the
        // future) passes, and says so.
        let _ = client.batch_execute("COMMIT").await;
        out.result(&found, None);
        return Ok(());
    }
    let reader = TopicReader::new(&settings.kafka_brokers, &settings.kafka_properties)?;
    let margin_ms = flags.margin.as_millis() as i64;
    let parked = match topics.values().map(|t| t.earliest_ms).min() {
        Some(earliest) => dead_lettered(&reader, &settings, (earliest - margin_ms).max(0))?,
        // Only rows that route nowhere: none can be in the dead-letter topic.
        None => HashSet::new(),
    };
    let audit = Audit {
        client: &client,
        settings: &settings,
        tables: &tables,
        window: &window,
        reader: &reader,
        parked,
        margin_ms,
        out: &out,
    };
    let mut meter = Meter::new("audit", "rows", found.rows);
    let mut checked = found.unroutable;
    for (topic, share) in &topics {
        audit.check_topic(topic, share, &mut found).await?;
        checked += share.rows;
        meter.update(checked);
    }
    meter.finish(checked);
    let _ = client.batch_execute("COMMIT").await;
    let replay = (found.missing > 0).then(|| replay_command(&settings, &window, &found));
    out.result(&found, replay.as_deref());
    match (found.missing, found.unroutable) {
        (0, 0) => Ok(()),
        (missing, unroutable) => Err(Error::permanent(format!(
            "{missing} of {} outbox rows between {} and {} have no event in their topic{}{}",
            found.rows,
            window.since,
            window.until,
            if unroutable > 0 {
                format!(", and {unroutable} route to no topic (poison: see --on-poison)")
            } else {
                String::new()
            },
            if found.absent.is_empty() {
                String::new()
            } else {
                format!(
                    "; {} {} not exist at {}: if that is not the cluster walrelay run \
                     publishes to, fix --kafka-brokers and audit again before replaying",
                    found.absent.join(", "),
                    if found.absent.len() == 1 {
                        "does"
                    } else {
                        "do"
                    },
                    settings.kafka_brokers
                )
            }
        ))),
    }
}

/// What every topic's check shares.
struct Audit<'a> {
    client: &'a Client,
    settings: &'a Settings,
    tables: &'a [OutboxTable],
    window: &'a Window,
    reader: &'a TopicReader,
    /// The hashed ids of the dead-letter topic's records.
    parked: HashSet<u128>,
    /// `--margin`, in milliseconds.
    margin_ms: i64,
    out: &'a Output,
}

impl Audit<'_> {
    /// One topic: its rows' ids, the topic read back to mark them off, and
    /// a second pass over the rows that names those left unmarked.
    async fn check_topic(
        &self,
        topic: &str,
        share: &TopicRows,
        found: &mut Findings,
    ) -> Result<()> {
        let (settings, tables) = (self.settings, self.tables);
        let ids = id_cursor_select(settings, self.window, share);
        let mut hashes = Vec::with_capacity(share.rows as usize);
        for_each_id(self.client, tables, &settings.mapping.id, &ids, |id| {
            hashes.push(hash(id))
        })
        .await?;
        // An id in two rows (two tables) is one event: found once, found.
        hashes.sort_unstable();
        hashes.dedup();
        let from_ms = (share.earliest_ms - self.margin_ms).max(0);
        let seen = match self.read_back(topic, from_ms, &hashes)? {
            Some(seen) => seen,
            None => {
                // Not one of its events can be there: say why first.
                self.out
                    .absent(topic, &self.settings.kafka_brokers, share.rows);
                found.absent.push(topic.to_string());
                vec![false; hashes.len()]
            }
        };
        debug!(topic, rows = share.rows, "topic read back");
        for_each_id(self.client, tables, &settings.mapping.id, &ids, |id| {
            let present = id.is_some() && hashes.binary_search(&hash(id)).is_ok_and(|i| seen[i]);
            if present {
                return;
            }
            let text = id.map_or_else(
                || "(NULL)".into(),
                |b| String::from_utf8_lossy(b).into_owned(),
            );
            let in_dead_letter = id.is_some_and(|id| self.parked.contains(&hash(Some(id))));
            let parked_in = in_dead_letter.then(|| settings.dead_letter_topic());
            self.out.missing(&text, topic, parked_in);
            found.dead_lettered += u64::from(in_dead_letter);
            // A NULL id cannot be selected by id: the command then
            // selects by window.
            found.null_ids |= id.is_none();
            if found.listed.len() < LIST_IDS {
                found.listed.push(text);
            }
            found.missing += 1;
            found.routes.extend(share.routes.iter().cloned());
        })
        .await
    }

    /// Reads `topic` from `from_ms` on and marks each of the sorted
    /// `hashes` whose event id a record carries; None when the topic does
    /// not exist.
    fn read_back(&self, topic: &str, from_ms: i64, hashes: &[u128]) -> Result<Option<Vec<bool>>> {
        let mut seen = vec![false; hashes.len()];
        let mut shown = std::time::Instant::now();
        let mut read = 0u64;
        let read_back = tokio::task::block_in_place(|| {
            self.reader.scan(topic, from_ms, |message| {
                use rdkafka::message::{Headers, Message};
                read += 1;
                if read.is_multiple_of(10_000)
                    && shown.elapsed() >= std::time::Duration::from_secs(5)
                {
                    shown = std::time::Instant::now();
                    info!(topic, records = read, "audit: reading the topic back");
                }
                let Some(headers) = message.headers() else {
                    return;
                };
                if let Some(id) = headers.iter().find(|h| h.key == "id").and_then(|h| h.value) {
                    if let Ok(i) = hashes.binary_search(&hash(Some(id))) {
                        seen[i] = true;
                    }
                }
            })
        })?;
        Ok(read_back.map(|_| seen))
    }
}

/// The window's rows per topic (and those no topic takes).
async fn census(
    client: &Client,
    settings: &Settings,
    tables: &[OutboxTable],
    window: &Window,
    found: &mut Findings,
) -> Result<BTreeMap<String, TopicRows>> {
    let mut topics: BTreeMap<String, TopicRows> = BTreeMap::new();
    for table in tables {
        let sql = format!(
            "SELECT {route}::text, count(*), \
                    floor(extract(epoch FROM min({time})::timestamptz) * 1000)::bigint \
             FROM {} WHERE {} GROUP BY 1",
            table.table.quoted(),
            window.predicate(),
            route = ident(&settings.mapping.route_by),
            time = ident(&window.column),
        );
        let rows = client
            .query(&sql, &[])
            .await
            .map_err(|e| sql_error(format!("cannot count the rows of {}", table.table), e))?;
        for row in rows {
            let (route, count, earliest): (Option<String>, i64, i64) =
                (row.get(0), row.get(1), row.get(2));
            found.rows += count as u64;
            let Some(Ok(topic)) = route.as_deref().map(|r| settings.router.topic(r)) else {
                found.unroutable += count as u64;
                continue;
            };
            let share = topics.entry(topic).or_insert_with(|| TopicRows {
                earliest_ms: earliest,
                ..TopicRows::default()
            });
            share.routes.extend(route);
            share.rows += count as u64;
            share.earliest_ms = share.earliest_ms.min(earliest);
        }
    }
    Ok(topics)
}

/// The condition that selects one topic's rows of the window.
fn id_cursor_select(settings: &Settings, window: &Window, share: &TopicRows) -> String {
    let routes: Vec<String> = share.routes.iter().map(|r| quote_literal(r)).collect();
    format!(
        "{} AND {}::text IN ({})",
        window.predicate(),
        ident(&settings.mapping.route_by),
        routes.join(", ")
    )
}

/// Calls `each` with the event id (column `id_column`) of every row
/// `predicate` selects, as the stream would carry it: the `id` header's bytes.
async fn for_each_id(
    client: &Client,
    tables: &[OutboxTable],
    id_column: &str,
    predicate: &str,
    mut each: impl FnMut(Option<&[u8]>),
) -> Result<()> {
    for table in tables {
        let select = format!(
            "SELECT {} FROM {} WHERE {predicate}",
            quote_ident(id_column),
            table.table.quoted()
        );
        let mut cursor = RowCursor::declare(client, table, &select, "the window's rows").await?;
        while let Some(batch) = cursor.next_batch().await? {
            for tuple in batch {
                match tuple.first() {
                    Some(Datum::Text(id)) => each(Some(id)),
                    _ => each(None),
                }
            }
        }
    }
    Ok(())
}

/// 128 bits of an event id: two SipHashes, so that a collision (which
/// would hide a missing event) is out of reach for any outbox.
fn hash(id: Option<&[u8]>) -> u128 {
    let half = |seed: u8| {
        let mut h = DefaultHasher::new();
        seed.hash(&mut h);
        id.hash(&mut h);
        h.finish() as u128
    };
    (half(0) << 64) | half(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_hash_apart_and_a_null_id_is_its_own() {
        assert_ne!(hash(Some(b"a")), hash(Some(b"b")));
        assert_ne!(hash(None), hash(Some(b"")));
        assert_eq!(hash(Some(b"a")), hash(Some(b"a")));
    }
}
