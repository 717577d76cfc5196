//! Decoding on a standby (PostgreSQL 16+): what differs when `--pg-url`
//! names a hot standby instead of a primary.
//!
//! - The WAL position walrelay reads "now" (lag, the range at risk, the
//!   position the outbox was found intact at) is the standby's replay
//!   position: `pg_current_wal_lsn()` fails during recovery.
//! - The slot lives on the standby and cannot be a failover slot
//!   (PostgreSQL 17 refuses `failover = true` there).
//! - Creating the slot waits until the standby replays a running-transactions
//!   record from the primary. The primary writes one on its own only every
//!   15 s and only when it is busy, so walrelay asks it for one
//!   (`pg_log_standby_snapshot()`) every second while it waits.
//! - Without `hot_standby_feedback`, and a physical slot to keep it across
//!   reconnects, the primary may remove catalog rows the slot still needs,
//!   and the slot is invalidated (a loss, like a slot whose WAL is gone).
//!
//! The publication and walrelay's state table are written on the primary
//! (`postgres::state::route`); a standby only reads them.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_postgres::Client;
use tracing::{info, warn};

use super::lsn::Lsn;
use super::{server_version, sql_error};
use crate::error::{Error, Result};

/// Logical decoding on a standby arrived in PostgreSQL 16.
pub const FIRST_VERSION: i32 = 160_000;

/// The WAL position "now" as SQL: what the server wrote, or on a standby
/// what it replayed (all a reader there can see).
pub const WAL_POSITION: &str = "CASE WHEN pg_catalog.pg_is_in_recovery() \
     THEN pg_catalog.pg_last_wal_replay_lsn() ELSE pg_catalog.pg_current_wal_lsn() END";

/// What happens to a standby's slot when the primary cleans up too early.
const CLEANUP: &str = "the primary may remove catalog rows the slot still needs, and the slot \
     is then invalidated for good (a lost slot)";

/// How often the primary is asked for a running-transactions record while
/// the slot is being created.
const SNAPSHOT_EVERY: Duration = Duration::from_secs(1);
/// How often the wait is said again.
const WAIT_REPEAT: u32 = 30;

/// The server's WAL position now ([`WAL_POSITION`]).
pub async fn wal_position(client: &Client) -> Result<Lsn> {
    let row = client
        .query_one(&format!("SELECT ({WAL_POSITION})::text"), &[])
        .await
        .map_err(|e| sql_error("cannot read the server's WAL position", e))?;
    let text: Option<String> = row.get(0);
    text.ok_or_else(|| {
        Error::transient(
            "the standby has not replayed any WAL yet (pg_last_wal_replay_lsn() is NULL)",
        )
    })?
    .parse()
    .map_err(Error::permanent)
}

/// Whether the server is a standby (in recovery).
pub async fn in_recovery(client: &Client) -> Result<bool> {
    let row = client
        .query_one("SELECT pg_catalog.pg_is_in_recovery()", &[])
        .await
        .map_err(|e| sql_error("cannot ask whether Postgres is a standby", e))?;
    Ok(row.get(0))
}

/// A standby walrelay decodes on, as its settings say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standby {
    /// `server_version_num`.
    pub version: i32,
    pub hot_standby_feedback: bool,
    /// `primary_slot_name`; None when empty.
    pub primary_slot: Option<String>,
}

impl Standby {
    /// The server's standby settings; None when it is a primary. A standby
    /// older than PostgreSQL 16 cannot decode and is refused.
    pub async fn read(client: &Client) -> Result<Option<Standby>> {
        if !in_recovery(client).await? {
            return Ok(None);
        }
        let version = server_version(client).await?;
        if version < FIRST_VERSION {
            return Err(too_old(version));
        }
        let row = client
            .query_one(
                "SELECT current_setting('hot_standby_feedback')::bool, \
                        current_setting('primary_slot_name')",
                &[],
            )
            .await
            .map_err(|e| sql_error("cannot read the standby's settings", e))?;
        let slot: String = row.get(1);
        Ok(Some(Standby {
            version,
            hot_standby_feedback: row.get(0),
            primary_slot: (!slot.is_empty()).then_some(slot),
        }))
    }

    /// Why the primary may invalidate the slot with `hot_standby_feedback`
    /// as it is, with the fix; None when it is on.
    pub fn feedback_problem(&self) -> Option<String> {
        (!self.hot_standby_feedback).then(|| {
            format!(
                "the standby runs with hot_standby_feedback = off: {CLEANUP}; on the standby: \
                 ALTER SYSTEM SET hot_standby_feedback = on; SELECT pg_reload_conf();"
            )
        })
    }

    /// Why the primary may invalidate the slot after a disconnect, with the
    /// fix; None when the standby streams through a physical slot.
    pub fn physical_slot_problem(&self) -> Option<String> {
        self.primary_slot.is_none().then(|| {
            format!(
                "the standby streams without a physical slot (primary_slot_name is empty): \
                 hot_standby_feedback holds the primary's cleanup back only while the standby \
                 is connected, so after a disconnect {CLEANUP}; on the primary: SELECT \
                 pg_create_physical_replication_slot('<name>'); on the standby: ALTER SYSTEM \
                 SET primary_slot_name = '<name>'; SELECT pg_reload_conf();"
            )
        })
    }

    /// Says once per process that walrelay decodes on a standby, and warns
    /// about a missing setting (it does not stop walrelay: the slot may
    /// well last, and `walrelay check` says the same).
    pub fn announce(&self) {
        static SAID: AtomicBool = AtomicBool::new(false);
        if SAID.swap(true, Ordering::Relaxed) {
            return;
        }
        info!(
            version = self.version / 10000,
            primary_slot_name = self.primary_slot.as_deref().unwrap_or(""),
            "--pg-url names a standby: walrelay decodes there; its publication and state table \
             are written on the primary (--pg-primary-url)"
        );
        let problems = [self.feedback_problem(), self.physical_slot_problem()];
        for problem in problems.into_iter().flatten() {
            warn!("{problem} (docs/operations.md, \"Decoding on a standby\")");
        }
    }
}

/// The refusal for a standby that cannot decode.
fn too_old(version: i32) -> Error {
    Error::permanent(format!(
        "--pg-url names a standby of PostgreSQL {}, and logical decoding on a standby needs \
         PostgreSQL 16 or later: point --pg-url at the primary, or upgrade",
        version / 10000
    ))
}

/// Runs `creating` (the slot's creation on a standby) to its end, asking
/// `primary` every second for the running-transactions record it waits
/// for, and saying that it waits.
pub async fn while_creating_slot<F: Future>(creating: F, primary: &Client) -> F::Output {
    tokio::pin!(creating);
    // The record must come after the creation started to count: the first
    // request waits a moment.
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::now() + SNAPSHOT_EVERY / 5,
        SNAPSHOT_EVERY,
    );
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut asked = 0u32;
    let mut refused = false;
    loop {
        if asked.is_multiple_of(WAIT_REPEAT) {
            info!(
                waited_s = asked,
                "creating the slot on the standby waits for a running-transactions record from \
                 the primary; asking the primary for one (pg_log_standby_snapshot()) every second"
            );
        }
        tokio::select! {
            created = &mut creating => return created,
            _ = tick.tick() => {}
        }
        asked += 1;
        if let Err(e) = primary
            .query_one("SELECT pg_catalog.pg_log_standby_snapshot()::text", &[])
            .await
        {
            if !refused {
                refused = true;
                warn!(
                    error = %e,
                    "the primary refused pg_log_standby_snapshot(); the slot waits for the \
                     record the primary writes on its own (every 15 s while it is busy). To \
                     fix, on the primary: GRANT EXECUTE ON FUNCTION pg_log_standby_snapshot() \
                     TO <the --pg-primary-url role>;"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn standby(feedback: bool, slot: Option<&str>) -> Standby {
        Standby {
            version: 170004,
            hot_standby_feedback: feedback,
            primary_slot: slot.map(str::to_string),
        }
    }

    #[test]
    fn a_standby_needs_feedback_and_a_physical_slot_to_keep_its_slot() {
        let ready = standby(true, Some("walrelay_standby"));
        assert_eq!(ready.feedback_problem(), None);
        assert_eq!(ready.physical_slot_problem(), None);
        let off = standby(false, Some("s")).feedback_problem().unwrap();
        assert!(
            off.contains("ALTER SYSTEM SET hot_standby_feedback = on"),
            "{off}"
        );
        let no_slot = standby(true, None).physical_slot_problem().unwrap();
        assert!(no_slot.contains("primary_slot_name is empty"), "{no_slot}");
        assert!(
            no_slot.contains("pg_create_physical_replication_slot"),
            "{no_slot}"
        );
    }

    #[test]
    fn a_standby_older_than_16_is_refused_with_the_way_out() {
        let text = too_old(150007).to_string();
        assert!(text.contains("PostgreSQL 15"), "{text}");
        assert!(text.contains("point --pg-url at the primary"), "{text}");
    }
}
