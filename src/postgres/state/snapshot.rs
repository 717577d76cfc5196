//! The first start's snapshot, as the state table remembers it
//! (`run --snapshot-where`, `lifecycle::snapshot`): taken and done, or
//! begun and never finished, which the next start must redo before it
//! streams, since the slot stands where the snapshot was taken. Each write
//! lands only on the record its writer last saw, so that two walrelays
//! starting on one slot cannot move it back from `done` to `taking`.
//!
//! Kept in a column of its own (`snapshot jsonb`), added to a table made
//! by an older walrelay the first time a snapshot is asked for.

use serde::{Deserialize, Serialize};
use tokio_postgres::Client;

use super::StateTable;
use crate::error::{Error, Result};
use crate::postgres::sql_error;

/// A snapshot's progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotState {
    /// Begun, not known to be finished: nothing may be streamed before it is.
    Taking,
    /// Every row of it acknowledged by Kafka.
    Done,
}

/// What the state table records of a slot's snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRecord {
    pub state: SnapshotState,
    /// `--snapshot-where`, as given.
    pub predicate: String,
    /// The slot's consistent point, once the slot exists.
    pub consistent_point: Option<String>,
    /// Rows the snapshot selected, and how many Kafka acknowledged.
    pub rows: u64,
    pub published: u64,
}

impl StateTable {
    /// Adds the `snapshot` column to a table an older walrelay made. Only
    /// the table's owner may: anyone else gets the statement to run.
    pub async fn ensure_snapshot_column(&self, client: &Client) -> Result<()> {
        self.ensure_column(
            client,
            "snapshot",
            "jsonb",
            "--snapshot-where records the snapshot's progress",
        )
        .await
    }

    /// The slot's snapshot record, if a snapshot was ever begun.
    pub async fn read_snapshot(
        &self,
        client: &Client,
        slot: &str,
    ) -> Result<Option<SnapshotRecord>> {
        let sql = format!(
            "SELECT snapshot::text FROM {} WHERE slot = $1",
            self.0.quoted()
        );
        let row = client
            .query_opt(&sql, &[&slot])
            .await
            .map_err(|e| sql_error(format!("cannot read the snapshot record in {self}"), e))?;
        let text: Option<String> = row.and_then(|r| r.get(0));
        text.map(|t| {
            serde_json::from_str(&t).map_err(|e| {
                Error::permanent(format!(
                    "the snapshot record of slot {slot:?} in {self} is not one walrelay wrote: {t}"
                ))
                .with_source(e)
            })
        })
        .transpose()
    }

    /// The slot's snapshot record for a reader that changes nothing
    /// (`walrelay check`): a table without the column has none.
    pub async fn peek_snapshot(
        &self,
        client: &Client,
        slot: &str,
    ) -> Result<Option<SnapshotRecord>> {
        use tokio_postgres::error::SqlState;
        match self.read_snapshot(client, slot).await {
            Err(e) => {
                let absent = [SqlState::UNDEFINED_COLUMN, SqlState::UNDEFINED_TABLE];
                let code = std::error::Error::source(&e)
                    .and_then(|s| s.downcast_ref::<tokio_postgres::Error>())
                    .and_then(tokio_postgres::Error::code);
                match code {
                    Some(code) if absent.contains(code) => Ok(None),
                    _ => Err(e),
                }
            }
            found => found,
        }
    }

    /// Records the slot's snapshot over `seen`, the record this start last
    /// read or wrote, and over nothing else: the state never moves on from
    /// a record the writer did not see (another walrelay's, written since),
    /// and a `taking` record never replaces a `done` one, unless `anew`
    /// (the start that creates a lost slot again, with a snapshot of its
    /// own). Returns whether the record was written. Records are compared
    /// by state and consistent point: progress counts may differ. The
    /// slot's row exists: start-up wrote it.
    pub async fn record_snapshot(
        &self,
        client: &Client,
        slot: &str,
        record: &SnapshotRecord,
        seen: Option<&SnapshotRecord>,
        anew: bool,
    ) -> Result<bool> {
        // In SQL, so that two walrelays cannot both read the old record
        // and each write over it.
        let sql = format!(
            "UPDATE {} SET snapshot = $2::text::jsonb \
             WHERE slot = $1 \
               AND snapshot->>'state' IS NOT DISTINCT FROM $3 \
               AND snapshot->>'consistent_point' IS NOT DISTINCT FROM $4 \
               AND (snapshot->>'state' IS DISTINCT FROM 'done' \
                    OR $2::text::jsonb->>'state' = 'done' OR $5)",
            self.0.quoted()
        );
        let json = serde_json::to_string(record).expect("a record serializes");
        let seen_state = seen.map(|s| s.state.as_str());
        let seen_point = seen.and_then(|s| s.consistent_point.as_deref());
        client
            .execute(&sql, &[&slot, &json, &seen_state, &seen_point, &anew])
            .await
            .map(|written| written == 1)
            .map_err(|e| sql_error(format!("cannot record the snapshot in {self}"), e))
    }
}

impl SnapshotState {
    /// As the record's JSON spells it.
    pub fn as_str(&self) -> &'static str {
        match self {
            SnapshotState::Taking => "taking",
            SnapshotState::Done => "done",
        }
    }
}
