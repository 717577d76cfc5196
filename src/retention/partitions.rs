//! Whole partitions: which ones a plan may drop (module doc of
//! `retention`, "Partitions"), and detaching and dropping one under a
//! lock timeout of a few milliseconds.

use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::Client;
use tracing::{info, warn};

use super::catalog::{self, Outbox};
use super::rows::interval;
use crate::error::Result;
use crate::postgres::names::{quote_ident, TableName};
use crate::postgres::sql_error;

/// What keeps partitions whose rows may still come, read just before the
/// plan's snapshot.
#[derive(Debug, Default)]
pub struct Blockers {
    /// The start of the oldest transaction of another session in this
    /// database (text of a timestamptz).
    oldest_start: Option<String>,
    /// Prepared transactions in this database.
    prepared: i64,
    /// When this was read: a partition's bound must lie before it.
    read_at: Option<String>,
}

/// A partition a plan may drop.
#[derive(Debug)]
pub struct Droppable {
    pub root: TableName,
    pub partition: TableName,
}

/// The blockers, when some outbox is partitioned.
pub async fn blockers(client: &Client, outboxes: &[Outbox]) -> Result<Blockers> {
    if !outboxes.iter().any(|o| o.partitioned) {
        return Ok(Blockers::default());
    }
    let row = client
        .query_one(
            "SELECT (SELECT min(xact_start)::text FROM pg_catalog.pg_stat_activity \
                     WHERE datname = current_database() AND pid <> pg_backend_pid() \
                       AND backend_type = 'client backend' AND xact_start IS NOT NULL), \
                    (SELECT count(*) FROM pg_catalog.pg_prepared_xacts \
                     WHERE database = current_database()), \
                    clock_timestamp()::text",
            &[],
        )
        .await
        .map_err(|e| sql_error("cannot read the transactions in progress", e))?;
    Ok(Blockers {
        oldest_start: row.get(0),
        prepared: row.get(1),
        read_at: row.get(2),
    })
}

/// The partitions of `outbox` the snapshot open on `client` may drop.
pub async fn droppable(
    client: &Client,
    outbox: &Outbox,
    keep: Duration,
    floor: &str,
    blockers: &Blockers,
) -> Result<Vec<Droppable>> {
    if !outbox.partitioned {
        return Ok(Vec::new());
    }
    if blockers.prepared > 0 {
        info!(
            table = %outbox.table,
            prepared = blockers.prepared,
            "outbox retention keeps every partition while prepared transactions exist: \
             their rows are not visible yet"
        );
        return Ok(Vec::new());
    }
    let mut found = Vec::new();
    for partition in catalog::list(client, &outbox.table).await? {
        let (Some(lower), Some(upper)) = (&partition.lower, &partition.upper) else {
            continue;
        };
        if partition.default {
            continue;
        }
        let may: bool = client
            .query_one(
                "SELECT $1::text::timestamptz <= now() - $3::text::interval \
                    AND $2::text::timestamptz >= $4::text::timestamptz \
                    AND ($5::text IS NULL OR $1::text::timestamptz <= $5::text::timestamptz) \
                    AND $1::text::timestamptz <= $6::text::timestamptz",
                &[
                    upper,
                    lower,
                    &interval(keep),
                    &floor,
                    &blockers.oldest_start,
                    &blockers.read_at,
                ],
            )
            .await
            .map_err(|e| {
                sql_error(
                    format!("cannot compare the bounds of {}", partition.table),
                    e,
                )
            })?
            .get(0);
        if may {
            found.push(Droppable {
                root: outbox.table.clone(),
                partition: partition.table,
            });
        }
    }
    Ok(found)
}

/// Detaches and drops the partition in one short transaction; false when
/// another session holds a lock on it or on the outbox (next pass). The
/// DETACH needs an ACCESS EXCLUSIVE lock on the outbox, so it waits for it
/// only as briefly as a CREATE of a partition ahead does: the
/// application's INSERTs queue behind it meanwhile.
pub async fn drop(client: &Client, d: &Droppable) -> Result<bool> {
    let sql = format!(
        "BEGIN; SET LOCAL lock_timeout = '{}'; ALTER TABLE {root} DETACH PARTITION {part}; \
         DROP TABLE {part}; COMMIT",
        super::ahead::PARTITION_LOCK_TIMEOUT,
        root = d.root.quoted(),
        part = d.partition.quoted()
    );
    match client.batch_execute(&sql).await {
        Ok(()) => {
            info!(partition = %d.partition, table = %d.root, "outbox retention dropped a partition whose events are confirmed");
            Ok(true)
        }
        Err(e) => {
            let _ = client.batch_execute("ROLLBACK").await;
            if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) {
                warn!(partition = %d.partition, "a partition to drop is in use; trying again at the next pass");
                return Ok(false);
            }
            if e.code() == Some(&SqlState::UNDEFINED_TABLE) {
                // Dropped by someone else meanwhile.
                return Ok(false);
            }
            Err(sql_error(
                format!("cannot drop partition {}", d.partition),
                e,
            ))
        }
    }
}

/// What lets retention drop `d` when the role owns neither it nor the
/// outbox: an `ALTER TABLE … OWNER TO` for each it does not own; None when
/// it owns both (or the catalog cannot be read: the error says the rest).
pub async fn owner_fix(client: &Client, d: &Droppable) -> Option<String> {
    let rows = client
        .query(
            "SELECT t, current_user::text FROM unnest($1::text[]) t \
             WHERE NOT pg_has_role((SELECT relowner FROM pg_catalog.pg_class \
                                    WHERE oid = to_regclass(t)), 'USAGE')",
            &[&vec![d.root.quoted(), d.partition.quoted()]],
        )
        .await
        .ok()?;
    let fix: Vec<String> = rows
        .iter()
        .map(|r| {
            let (table, role): (String, String) = (r.get(0), r.get(1));
            format!("ALTER TABLE {table} OWNER TO {};", quote_ident(&role))
        })
        .collect();
    (!fix.is_empty()).then(|| fix.join(" "))
}
