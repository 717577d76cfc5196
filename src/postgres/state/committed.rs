//! What Kafka committed, as the database remembers it
//! (`--delivery exactly-once`).
//!
//! Each Kafka transaction writes its position into the position topic, and
//! a session reads the last one back to know what Kafka holds
//! (`relay::exactly_once`). Kafka can lose a transaction it reported
//! committed (a broker that restarted uncleanly), and the position topic
//! then reads older than what walrelay committed. Process memory notices
//! that only in the process that made the commit; a restart, or another
//! replica taking the slot over, would read the older position and stream
//! on past the lost events.
//!
//! So the state table keeps the evidence too, in a column of its own
//! (`kafka_committed jsonb`, added the first time exactly-once runs): the
//! delivered position, written only in exactly-once mode. There a position
//! is confirmed, and hence recorded, only after the Kafka transaction that
//! holds its events committed, so Kafka must hold at least that much. An
//! at-least-once run never writes it: its delivered positions say nothing
//! about the position topic, and a slot that went from exactly-once to
//! at-least-once and back must not look like a loss.

use tokio_postgres::Client;

use super::{ServerId, StateTable};
use crate::error::Result;
use crate::postgres::lsn::Lsn;
use crate::postgres::sql_error;

/// The column that holds the evidence.
const COLUMN: &str = "kafka_committed";

impl StateTable {
    /// Adds the `kafka_committed` column to a table made by an older
    /// walrelay. Only the table's owner may: anyone else gets the statement.
    pub async fn ensure_kafka_committed_column(&self, client: &Client) -> Result<()> {
        self.ensure_column(
            client,
            COLUMN,
            "jsonb",
            "--delivery exactly-once records there what Kafka committed, so that a restart or \
             a takeover notices a commit Kafka lost",
        )
        .await
    }

    /// The last position a Kafka transaction of this slot committed, as
    /// recorded; None before exactly-once ever ran (or with the column
    /// absent: a reader such as `check` adds nothing).
    pub async fn kafka_committed(
        &self,
        client: &Client,
        slot: &str,
    ) -> Result<Option<(ServerId, Lsn)>> {
        // to_jsonb of the whole row reads NULL for a column the table lacks.
        let sql = format!(
            "SELECT to_jsonb(s) -> '{COLUMN}' ->> 'lsn', to_jsonb(s) -> '{COLUMN}' ->> 'system_id', \
                    (to_jsonb(s) -> '{COLUMN}' ->> 'timeline')::integer \
             FROM {} s WHERE slot = $1",
            self.0.quoted()
        );
        let row = client
            .query_opt(&sql, &[&slot])
            .await
            .map_err(|e| sql_error(format!("cannot read {self}"), e))?;
        Ok(row.and_then(|row| {
            let lsn = row.get::<_, Option<String>>(0)?.parse::<Lsn>().ok()?;
            let server = ServerId {
                system_id: row.get::<_, Option<String>>(1)?,
                timeline: u32::try_from(row.get::<_, Option<i32>>(2)?).ok()?,
            };
            Some((server, lsn))
        }))
    }
}

/// The SET clause that records `$2` (LSN), `$3` (system id) and `$4`
/// (timeline) as committed in Kafka, for `record_delivered`.
pub(super) fn set_clause() -> String {
    format!(
        ", {COLUMN} = jsonb_build_object('lsn', $2::text, 'system_id', $3::text, \
         'timeline', $4::integer)"
    )
}
