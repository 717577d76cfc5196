//! When an outbox change was last accepted (`--accept-outbox-change`),
//! for retention's floor. Rows written while the outbox was not published
//! never reached the slot; the runbook publishes them again before the
//! acceptance, but nothing can tell that it was done. So rows dated before
//! an acceptance are kept, as rows from before the slot are: retention
//! deletes only what it can prove delivered (`retention` module doc).

use tokio_postgres::Client;

use super::StateTable;
use crate::error::Result;

const COLUMN: &str = "outbox_accepted_at";

impl StateTable {
    /// Records that a start accepted an outbox change now.
    pub async fn record_outbox_accepted(&self, client: &Client, slot: &str) -> Result<()> {
        self.ensure_column(
            client,
            COLUMN,
            "timestamptz",
            "--accept-outbox-change records when it accepted the change, so that retention \
             keeps the rows written while the outbox was not published",
        )
        .await?;
        let sql = format!(
            "UPDATE {} SET {COLUMN} = now() WHERE slot = $1",
            self.0.quoted()
        );
        self.write(client, &sql, &[&slot]).await
    }
}

/// The column's value as `StateTable::read` selects it: absent from a
/// table an older walrelay made, it reads as NULL (no acceptance).
pub const SELECTED: &str = "(to_jsonb(s) ->> 'outbox_accepted_at')::timestamptz";
