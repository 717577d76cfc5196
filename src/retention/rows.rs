//! Rows, one by one: picked in the plan's snapshot, deleted by key once
//! their events are confirmed, a batch per statement and transaction.

use std::time::Duration;

use prometheus::IntCounter;
use tokio_postgres::Client;

use super::catalog::Outbox;
use crate::error::Result;
use crate::postgres::names::TableName;
use crate::postgres::sql_error;

/// Rows of one table picked in a snapshot.
#[derive(Debug)]
pub struct Picked {
    pub leaf: TableName,
    /// Each row's `ctid`.
    pub tids: Vec<String>,
    /// Each row's `ctid/xmin`: the row version itself (module doc of
    /// `retention`).
    pub keys: Vec<String>,
}

/// Up to `limit` rows of `leaf` older than `keep` and not older than the
/// floor, as the snapshot open on `client` sees them.
pub async fn pick(
    client: &Client,
    leaf: &TableName,
    outbox: &Outbox,
    keep: Duration,
    floor: &str,
    limit: usize,
) -> Result<Picked> {
    // No ORDER BY: with an index on the column the planner walks it, without
    // one the first old rows of a scan will do.
    let sql = format!(
        "SELECT ctid::text, xmin::text FROM ONLY {leaf} \
         WHERE {col} < now() - $1::text::interval AND {col} >= $2::text::timestamptz \
         LIMIT $3",
        leaf = leaf.quoted(),
        col = outbox.column,
    );
    let rows = client
        .query(&sql, &[&interval(keep), &floor, &(limit as i64)])
        .await
        .map_err(|e| {
            sql_error(
                format!(
                    "cannot read the old rows of {leaf} (without an index on the time column \
                     a large outbox is read whole: CREATE INDEX ON {} ({}))",
                    outbox.table.quoted(),
                    outbox.column
                ),
                e,
            )
        })?;
    let mut picked = Picked {
        leaf: leaf.clone(),
        tids: Vec::with_capacity(rows.len()),
        keys: Vec::with_capacity(rows.len()),
    };
    for row in rows {
        let (tid, xmin): (String, String) = (row.get(0), row.get(1));
        picked.keys.push(format!("{tid}/{xmin}"));
        picked.tids.push(tid);
    }
    Ok(picked)
}

/// Deletes the picked rows still there, `batch` per statement, each
/// statement its own short transaction. Returns how many went.
pub async fn delete(
    client: &Client,
    picked: &Picked,
    batch: usize,
    counter: &IntCounter,
) -> Result<u64> {
    let sql = format!(
        "DELETE FROM ONLY {} WHERE ctid = ANY($1::text[]::tid[]) \
         AND ctid::text || '/' || xmin::text = ANY($2::text[])",
        picked.leaf.quoted()
    );
    let statement = client
        .prepare(&sql)
        .await
        .map_err(|e| sql_error(format!("cannot prepare the DELETE of {}", picked.leaf), e))?;
    let mut deleted = 0;
    for (tids, keys) in picked.tids.chunks(batch).zip(picked.keys.chunks(batch)) {
        let n = client
            .execute(&statement, &[&tids, &keys])
            .await
            .map_err(|e| sql_error(format!("cannot delete old rows of {}", picked.leaf), e))?;
        counter.inc_by(n);
        deleted += n;
    }
    Ok(deleted)
}

/// A duration as a Postgres interval.
pub fn interval(d: Duration) -> String {
    format!("{} milliseconds", d.as_millis())
}
