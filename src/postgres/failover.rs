//! PostgreSQL 17 failover slots: a logical slot created with `failover = true`
//! is copied to a standby that runs `sync_replication_slots = on`, so that after
//! a promotion walrelay resumes from where it stood instead of finding no slot.
//! The server settings this needs are in docs/operations.md.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio_postgres::Client;
use tracing::{info, warn};

use super::{server_version, sql_error};
use crate::error::Result;

/// `pg_create_logical_replication_slot`'s `failover` argument and the
/// `failover` column of `pg_replication_slots` arrived in PostgreSQL 17.
const FIRST_VERSION: i32 = 170_000;

const CREATE: &str =
    "SELECT lsn::text FROM pg_catalog.pg_create_logical_replication_slot($1, 'pgoutput')";
/// (slot_name, plugin, temporary, twophase, failover).
const CREATE_FAILOVER: &str = "SELECT lsn::text FROM \
     pg_catalog.pg_create_logical_replication_slot($1, 'pgoutput', false, false, true)";

/// The warning about an existing slot is worth reading once, not on every reconnect.
static WARNED_NOT_FAILOVER: AtomicBool = AtomicBool::new(false);

/// The statement that creates the slot (one parameter: its name): a failover
/// slot when asked for and the server has them.
pub async fn create_slot_statement(client: &Client, failover: bool) -> Result<&'static str> {
    if !failover {
        return Ok(CREATE);
    }
    let version = server_version(client).await?;
    if version < FIRST_VERSION {
        tracing::debug!(
            version,
            "PostgreSQL before 17 has no failover slots; a promoted standby will not have the slot"
        );
        return Ok(CREATE);
    }
    info!(
        "creating the slot with failover = true; a standby keeps it only with \
         sync_replication_slots = on (see docs/operations.md, \"Failover\")"
    );
    Ok(CREATE_FAILOVER)
}

/// The statement that creates a slot on a standby: never a failover slot,
/// which PostgreSQL 17 refuses there ("cannot enable failover for a
/// replication slot created on the standby"): failover slots are copied
/// from a primary to its standbys, not made on one. Says so once when
/// `--failover-slot` asked for one.
pub fn on_standby(failover: bool) -> &'static str {
    static SAID: AtomicBool = AtomicBool::new(false);
    if failover && !SAID.swap(true, Ordering::Relaxed) {
        info!(
            "the slot on the standby is not a failover slot, whatever --failover-slot says: \
             PostgreSQL refuses failover = true for a slot on a standby (failover slots are \
             copied from a primary to its standbys). The slot lives on this standby and \
             survives its promotion; a failover to another server leaves it behind \
             (docs/operations.md, \"Decoding on a standby\")"
        );
    }
    CREATE
}

/// Warns once when `--failover-slot` is on but the existing slot (created by
/// an older walrelay, or with `--failover-slot=false`) is not a failover slot:
/// a promoted standby would not have it. Changing it needs a replication
/// connection and an inactive slot, so walrelay names the command instead of
/// running it.
pub async fn check_existing_slot(client: &Client, slot: &str, failover: bool) -> Result<()> {
    if !failover || WARNED_NOT_FAILOVER.load(Ordering::Relaxed) {
        return Ok(());
    }
    if server_version(client).await? < FIRST_VERSION {
        return Ok(());
    }
    let row = client
        .query_opt(
            "SELECT s.failover, current_database() FROM pg_catalog.pg_replication_slots s \
             WHERE s.slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(|e| sql_error("cannot read pg_replication_slots", e))?;
    let Some(row) = row else { return Ok(()) };
    let is_failover: bool = row.get(0);
    if is_failover || WARNED_NOT_FAILOVER.swap(true, Ordering::Relaxed) {
        return Ok(());
    }
    let database: String = row.get(1);
    warn!(
        slot,
        "replication slot {slot:?} is not a failover slot, so a standby does not keep it and \
         a failover would leave walrelay without its slot. To fix: stop walrelay, run \
         psql \"host=… user=… dbname={database} replication=database\" -c \
         'ALTER_REPLICATION_SLOT {slot} (FAILOVER true)', and start walrelay again \
         (standby settings: docs/operations.md, \"Failover\"); or pass --failover-slot=false \
         to keep it as it is"
    );
    Ok(())
}
