//! Reads a replication slot's state from `pg_replication_slots`: the one
//! reader for start-up, the watchdog, the slot's history and `walrelay status`.

use serde_json::json;
use tokio_postgres::Client;

use super::lsn::Lsn;
use super::sql_error;
use super::standby::WAL_POSITION;
use crate::error::Result;

#[derive(Debug, Clone)]
pub struct SlotReport {
    pub name: String,
    pub plugin: Option<String>,
    /// `logical` or `physical`.
    pub slot_type: String,
    pub database: Option<String>,
    /// The slot belongs to the database this connection is in.
    pub in_this_database: bool,
    pub active: bool,
    pub active_pid: Option<i32>,
    pub confirmed_flush: Option<Lsn>,
    pub restart: Option<Lsn>,
    pub wal_status: Option<String>,
    /// Bytes that can still be written before the slot is lost; None when unlimited.
    pub safe_wal_size: Option<i64>,
    pub current_wal: Lsn,
    /// The WAL position now (on a standby, its replay position) minus
    /// `confirmed_flush_lsn`.
    pub lag_bytes: i64,
    /// The WAL position now minus `restart_lsn`: WAL kept on disk for the slot.
    pub retained_bytes: i64,
    /// `max_slot_wal_keep_size` in bytes; None when -1 (unlimited).
    pub wal_keep_limit: Option<i64>,
}

impl SlotReport {
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "slot": self.name,
            "plugin": self.plugin,
            "database": self.database,
            "active": self.active,
            "active_pid": self.active_pid,
            "confirmed_flush_lsn": self.confirmed_flush.map(|l| l.to_string()),
            "restart_lsn": self.restart.map(|l| l.to_string()),
            "current_wal_lsn": self.current_wal.to_string(),
            "lag_bytes": self.lag_bytes,
            "retained_wal_bytes": self.retained_bytes,
            "wal_status": self.wal_status,
            "safe_wal_size_bytes": self.safe_wal_size,
            "max_slot_wal_keep_size_bytes": self.wal_keep_limit,
        })
    }
}

pub async fn read(client: &Client, slot: &str) -> Result<Option<SlotReport>> {
    // On a standby (logical decoding there is PostgreSQL 16+) the WAL end is
    // what has been replayed; pg_current_wal_lsn() fails during recovery.
    let row = client
        .query_opt(
            &format!(
                "WITH w AS (SELECT {WAL_POSITION} AS lsn) \
             SELECT s.plugin, s.database, s.active, s.active_pid, \
                    s.confirmed_flush_lsn::text, s.restart_lsn::text, s.wal_status, \
                    s.safe_wal_size, w.lsn::text, \
                    COALESCE((w.lsn - s.confirmed_flush_lsn)::bigint, 0), \
                    COALESCE((w.lsn - s.restart_lsn)::bigint, 0), \
                    (SELECT setting::bigint FROM pg_catalog.pg_settings \
                      WHERE name = 'max_slot_wal_keep_size'), \
                    s.slot_type, COALESCE(s.database = current_database(), false) \
             FROM pg_catalog.pg_replication_slots s, w WHERE s.slot_name = $1"
            ),
            &[&slot],
        )
        .await
        .map_err(|e| sql_error("cannot read pg_replication_slots", e))?;
    let Some(row) = row else { return Ok(None) };
    let lsn = |i: usize| -> Option<Lsn> { row.get::<_, Option<String>>(i)?.parse().ok() };
    let keep_mb: Option<i64> = row.get(11);
    Ok(Some(SlotReport {
        name: slot.to_string(),
        plugin: row.get(0),
        slot_type: row.get(12),
        database: row.get(1),
        in_this_database: row.get(13),
        active: row.get(2),
        active_pid: row.get(3),
        confirmed_flush: lsn(4),
        restart: lsn(5),
        wal_status: row.get(6),
        safe_wal_size: row.get(7),
        current_wal: lsn(8).unwrap_or_default(),
        lag_bytes: row.get(9),
        retained_bytes: row.get(10),
        wal_keep_limit: keep_mb.filter(|&mb| mb >= 0).map(|mb| mb * 1024 * 1024),
    }))
}
