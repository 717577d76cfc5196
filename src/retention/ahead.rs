//! `--partitions-ahead N`: partitions made ahead of time, so inserts never
//! fall into the DEFAULT partition for want of one.
//!
//! The scheme is inferred from the newest partition (by upper bound) and
//! checked against the one before it, when there is one:
//!
//! - the width: a calendar step (1 year, 3 months, 1 month, 7 days, 1 day)
//!   if the newest partition spans exactly one, else its exact span
//!   (e.g. 1 hour);
//! - the name: a prefix and the lower bound written by `to_char` with the
//!   most precise of `FORMATS` that names the newest partition (and the one
//!   before it) that way, e.g. `outbox_2026_12_01` is `outbox_` and
//!   `YYYY_MM_DD`, pg_partman's `outbox_p20261201` is `outbox_p` and
//!   `YYYYMMDD`;
//!
//! in the time zone of walrelay's session (the server's or the role's
//! TimeZone). Next partitions follow the newest, in its schema, until one
//! reaches N widths past now. A scheme that cannot be inferred is refused
//! at start with what to do instead.
//!
//! `CREATE TABLE … PARTITION OF` takes an ACCESS EXCLUSIVE lock on the
//! outbox. While any transaction holds a lock there, the CREATE waits in
//! the lock queue and every INSERT of the application queues behind it.
//! So each CREATE runs in a transaction of its own under a lock timeout of
//! `PARTITION_LOCK_TIMEOUT`: a CREATE that cannot have the lock within it
//! gives up, the writers go on, and the next pass tries again (`Blocked`).

use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::Client;
use tracing::info;

use super::catalog::{self, Outbox};
use super::rows::interval;
use crate::error::{Error, Result};
use crate::postgres::names::{quote_literal, TableName};
use crate::postgres::sql_error;

/// `to_char` patterns a partition name may end with, most precise first.
const FORMATS: [&str; 11] = [
    "YYYY_MM_DD_HH24MISS",
    "YYYYMMDDHH24MISS",
    "YYYY_MM_DD_HH24MI",
    "YYYYMMDDHH24MI",
    "YYYY_MM_DD_HH24",
    "YYYYMMDDHH24",
    "YYYY_MM_DD",
    "YYYYMMDD",
    "YYYY_MM",
    "YYYYMM",
    "YYYY",
];
const CALENDAR_WIDTHS: [&str; 5] = ["1 year", "3 months", "1 month", "7 days", "1 day"];
/// How long a CREATE … PARTITION OF (or a DETACH, `partitions::drop`)
/// waits for its lock on the outbox: the application's INSERTs queue
/// behind it for at most this long.
pub const PARTITION_LOCK_TIMEOUT: &str = "50ms";
/// Partitions made in one pass at most (a long outage of walrelay may
/// leave many to make; the next pass goes on).
const MOST_PER_PASS: usize = 100;

/// How the outbox's partitions are named and sized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scheme {
    pub schema: String,
    pub prefix: String,
    pub format: &'static str,
    /// An interval, e.g. `1 day`.
    pub width: String,
    /// The newest partition's upper bound, as its literal's text.
    pub newest_upper: String,
}

/// The scheme, inferred from the outbox's partitions.
pub async fn scheme(client: &Client, outbox: &Outbox) -> Result<Scheme> {
    let table = &outbox.table;
    let parts: Vec<catalog::Partition> = catalog::list(client, table)
        .await?
        .into_iter()
        .filter(|p| !p.default && p.lower.is_some() && p.upper.is_some())
        .collect();
    let cannot = |why: String| {
        Error::permanent(format!(
            "--partitions-ahead cannot infer how the partitions of {table} are named and sized: \
             {why}. Create the next partition yourself, e.g. CREATE TABLE {}_2026_12_01 \
             PARTITION OF {} FOR VALUES FROM ('2026-12-01') TO ('2026-12-02'), name the \
             partitions <prefix><lower bound as YYYY_MM_DD, YYYYMMDD, YYYY_MM_DD_HH24, …>, or \
             drop --partitions-ahead",
            table.quoted(),
            table.quoted()
        ))
    };
    if parts.is_empty() {
        return Err(cannot(
            "it has no partition with a FROM … TO … range yet".into(),
        ));
    }
    // Calendar steps in the session's time zone (the column is a timestamptz:
    // `catalog::TIME_TYPE`).
    let arith = "timestamptz";
    let uppers: Vec<String> = parts.iter().map(|p| p.upper.clone().unwrap()).collect();
    let order: Vec<i64> = client
        .query(
            &format!(
                "SELECT i FROM unnest($1::text[]) WITH ORDINALITY AS t(u, i) \
                 ORDER BY u::{arith} DESC LIMIT 2"
            ),
            &[&uppers],
        )
        .await
        .map_err(|e| sql_error("cannot order the partitions' bounds", e))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let newest = &parts[order[0] as usize - 1];
    let before = order.get(1).map(|&i| &parts[i as usize - 1]);
    let (lower, upper) = (newest.lower.clone().unwrap(), newest.upper.clone().unwrap());
    let widths: Vec<String> = CALENDAR_WIDTHS.iter().map(|w| w.to_string()).collect();
    let width: String = client
        .query_one(
            &format!(
                "SELECT COALESCE( \
                   (SELECT w FROM unnest($3::text[]) w \
                    WHERE $1::text::{arith} + w::interval = $2::text::{arith} LIMIT 1), \
                   ($2::text::{arith} - $1::text::{arith})::text)"
            ),
            &[&lower, &upper, &widths],
        )
        .await
        .map_err(|e| sql_error("cannot read the partitions' width", e))?
        .get(0);
    let mut lowers = vec![lower.clone()];
    lowers.extend(before.and_then(|b| b.lower.clone()));
    for format in FORMATS {
        let written: Vec<String> = client
            .query_one(
                &format!("SELECT array_agg(to_char(l::{arith}, $2)) FROM unnest($1::text[]) l"),
                &[&lowers, &format],
            )
            .await
            .map_err(|e| sql_error("cannot write a partition bound as a name", e))?
            .get(0);
        let Some(prefix) = newest.table.name.strip_suffix(written[0].as_str()) else {
            continue;
        };
        let agrees = match (before, written.get(1)) {
            (Some(b), Some(w)) => b.table.name == format!("{prefix}{w}"),
            _ => true,
        };
        if agrees {
            return Ok(Scheme {
                schema: newest.table.schema.clone(),
                prefix: prefix.to_string(),
                format,
                width,
                newest_upper: upper,
            });
        }
    }
    Err(cannot(format!(
        "the newest partition {} (from {lower}) is not named <prefix><its lower bound> in a \
         known format{}",
        newest.table,
        before
            .map(|b| format!(", alike with the one before it, {}", b.table))
            .unwrap_or_default()
    )))
}

/// What one pass made.
#[derive(Debug, Default)]
pub struct Made {
    pub made: u64,
    /// The partition it could not create for want of the lock.
    pub blocked: Option<Blocked>,
}

/// A partition left for the next pass: another session held a lock on the
/// outbox longer than `PARTITION_LOCK_TIMEOUT`.
#[derive(Debug)]
pub struct Blocked {
    pub partition: TableName,
    /// Its lower bound: from there on the outbox has no partition yet.
    pub from: String,
    /// `from` comes before the next pass: rows may go to DEFAULT (or fail,
    /// without one) unless the lock is free by then.
    pub running_out: bool,
}

/// Makes the partitions missing up to `ahead` widths past now; `soon` is
/// the time to the next pass.
pub async fn make(client: &Client, outbox: &Outbox, ahead: u32, soon: Duration) -> Result<Made> {
    let scheme = scheme(client, outbox).await?;
    let arith = "timestamptz";
    let existing: Vec<String> = catalog::list(client, &outbox.table)
        .await?
        .into_iter()
        .map(|p| p.table.name)
        .collect();
    let mut lower = scheme.newest_upper.clone();
    let mut made = Made::default();
    for _ in 0..MOST_PER_PASS {
        let row = client
            .query_one(
                &format!(
                    "SELECT $1::text::{arith} < now()::{arith} + $2::int * $3::text::interval, \
                            (($1::text::{arith} + $3::text::interval)::{ty})::text, to_char($1::text::{arith}, $4), \
                            $1::text::{arith} < now()::{arith} + $5::text::interval",
                    // The column's own type, so the bound reads as its values do.
                    ty = outbox.column_type,
                ),
                &[&lower, &(ahead as i32), &scheme.width, &scheme.format, &interval(soon)],
            )
            .await
            .map_err(|e| sql_error("cannot compute the next partition's bounds", e))?;
        let (due, upper, suffix, soon): (bool, String, String, bool) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        if !due {
            break;
        }
        let name = format!("{}{suffix}", scheme.prefix);
        if existing.contains(&name) {
            return Err(Error::permanent(format!(
                "--partitions-ahead would name the partition from {lower} {name}, which \
                 exists: the names ({}{}) do not tell partitions of {} apart; create the next \
                 partitions yourself or drop --partitions-ahead",
                scheme.prefix, scheme.format, scheme.width
            )));
        }
        let partition = TableName {
            schema: scheme.schema.clone(),
            name,
        };
        if !create(client, outbox, &partition, &lower, &upper).await? {
            made.blocked = Some(Blocked {
                partition,
                from: lower,
                running_out: soon,
            });
            break;
        }
        made.made += 1;
        lower = upper;
    }
    Ok(made)
}

/// Creates one partition in a transaction of its own under the short lock
/// timeout; false when the lock was not to be had.
async fn create(
    client: &Client,
    outbox: &Outbox,
    partition: &TableName,
    lower: &str,
    upper: &str,
) -> Result<bool> {
    let sql = format!(
        "BEGIN; SET LOCAL lock_timeout = '{PARTITION_LOCK_TIMEOUT}'; \
         CREATE TABLE {} PARTITION OF {} FOR VALUES FROM ({}) TO ({}); COMMIT",
        partition.quoted(),
        outbox.table.quoted(),
        quote_literal(lower),
        quote_literal(upper)
    );
    let Err(e) = client.batch_execute(&sql).await else {
        info!(partition = %partition, from = %lower, to = %upper, "created an outbox partition ahead of time");
        return Ok(true);
    };
    let _ = client.batch_execute("ROLLBACK").await;
    if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) {
        return Ok(false);
    }
    if e.code() == Some(&SqlState::CHECK_VIOLATION) {
        return Err(Error::permanent(format!(
            "--partitions-ahead cannot create {partition} for [{lower}, {upper}): rows \
             of that range are in the DEFAULT partition already; move them into a \
             table of their own and attach it as that partition (docs/operations.md, \
             \"Outbox retention\")"
        ))
        .with_source(e));
    }
    Err(sql_error(format!("cannot create partition {partition}"), e))
}
