//! One snapshot per slot at a time (`run --snapshot-where`). The replicas
//! of a deployment start with the same flags, and while one of them
//! publishes the slot's snapshot the slot is inactive (the replication
//! connection that exported the snapshot has closed), so neither the slot
//! nor the state table's `taking` can tell a snapshot under way from one
//! abandoned. A session-level advisory lock keyed by the slot's name, held
//! on a connection of its own from before `taking` is recorded until the
//! stream has started, tells them apart: `taking` with a holder means wait
//! as a standby; `taking` with none means its taker is gone. A start
//! without `--snapshot-where` waits for a holder too, so that nothing
//! streams before the snapshot's rows.
//!
//! The lock lives on the server `--pg-url` names, where the slot and the
//! exported snapshot live (advisory locks work on a hot standby too), in
//! the slot's database (advisory locks are per database, as logical slots
//! are). Postgres releases it when the holder's backend ends: at once when
//! the walrelay process dies (its kernel closes the socket, which the idle
//! backend reads as the end), and, when its host or the network dies, once
//! TCP keepalives find the peer gone. The backend waits idle the whole
//! snapshot long and would only notice after the system's keepalive default
//! (two hours on Linux), so the lock's connection asks the server for
//! walrelay's own dead-peer timings (`postgres::dead_peer`): about a minute.

use tokio_postgres::Client;

use super::{dead_peer, setup, sql_error, PgTarget};
use crate::error::{Error, Kind, Result};

/// The first key of every walrelay snapshot lock (`WRSN`): other
/// applications' advisory locks in the database stay out of the way.
const KEY_SPACE: i32 = 0x5752_534E;

/// The second key: FNV-1a of the slot's name. Two names with one hash
/// would only take their snapshots one after the other.
fn slot_key(slot: &str) -> i32 {
    let hash = slot.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    });
    i32::from_ne_bytes(hash.to_ne_bytes())
}

/// The lock, held: on its connection's session until `release`, or until
/// the connection ends (dropped, or the process gone).
pub struct SnapshotLock {
    client: Client,
    slot: String,
}

/// Whom the lock is held by, as `pg_stat_activity` shows them (a role
/// without `pg_read_all_stats` sees only other roles' pids).
#[derive(Debug, Clone)]
pub struct Holder {
    pub pid: i32,
    pub application: Option<String>,
    pub client_addr: Option<String>,
    pub since: Option<String>,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "backend pid {}", self.pid)?;
        if let Some(addr) = &self.client_addr {
            write!(f, " from {addr}")?;
        }
        if let Some(app) = self.application.as_deref().filter(|a| !a.is_empty()) {
            write!(f, " ({app})")?;
        }
        if let Some(since) = &self.since {
            write!(f, ", connected since {since}")?;
        }
        Ok(())
    }
}

impl SnapshotLock {
    /// Takes the slot's lock without waiting. When another session holds
    /// it the error is a standby's (`Kind::Standby`), naming the holder:
    /// the caller waits as a standby does and starts again once it is gone.
    pub async fn take(target: &PgTarget, slot: &str) -> Result<SnapshotLock> {
        let client = setup::connect(target).await?;
        // Ignored on a Unix-domain socket, where no peer can vanish unseen;
        // through pg_settings, so that a server without one (tcp_user_timeout
        // is PostgreSQL 12+) sets the others.
        let keepalives = format!(
            "SELECT pg_catalog.set_config(s.name, v.value, false) \
             FROM (VALUES ('tcp_keepalives_idle', '{}'), ('tcp_keepalives_interval', '{}'), \
                          ('tcp_keepalives_count', '{}'), ('tcp_user_timeout', '{}')) \
                  AS v(name, value) \
             JOIN pg_catalog.pg_settings s ON s.name = v.name",
            dead_peer::KEEPALIVE_IDLE.as_secs(),
            dead_peer::KEEPALIVE_INTERVAL.as_secs(),
            dead_peer::KEEPALIVE_RETRIES,
            dead_peer::TCP_USER_TIMEOUT.as_millis(),
        );
        client
            .batch_execute(&keepalives)
            .await
            .map_err(|e| sql_error("cannot set the snapshot lock's keepalives", e))?;
        let taken: bool = client
            .query_one(
                "SELECT pg_catalog.pg_try_advisory_lock($1, $2)",
                &[&KEY_SPACE, &slot_key(slot)],
            )
            .await
            .map_err(|e| sql_error("cannot take the snapshot lock", e))?
            .get(0);
        if taken {
            return Ok(SnapshotLock {
                client,
                slot: slot.to_string(),
            });
        }
        Err(busy(slot, holder(&client, slot).await?))
    }

    /// Fails when the lock's connection no longer answers: the server may
    /// have ended its session (the lock with it), and another walrelay may
    /// be taking the snapshot. Asked before the state table says `done`.
    pub async fn check(&self) -> Result<()> {
        self.client
            .simple_query("SELECT 1")
            .await
            .map(drop)
            .map_err(|e| {
                sql_error(
                    format!(
                        "lost the snapshot lock of slot {:?} (its connection ended): another \
                         walrelay may be taking the snapshot; starting again",
                        self.slot
                    ),
                    e,
                )
            })
    }

    /// Lets go, once the state table says `done` or the stream has started.
    /// Best effort: the connection's end releases the lock anyway.
    pub async fn release(self) {
        let _ = self
            .client
            .query_one(
                "SELECT pg_catalog.pg_advisory_unlock($1, $2)",
                &[&KEY_SPACE, &slot_key(&self.slot)],
            )
            .await;
    }
}

/// For a start without `--snapshot-where`: it must not stream while
/// another walrelay takes the slot's snapshot either (each key's snapshot
/// rows go before its streamed events), and waits as a standby meanwhile.
pub async fn wait_while_held(client: &Client, slot: &str) -> Result<()> {
    match holder(client, slot).await? {
        Some(holder) => Err(busy(slot, Some(holder))),
        None => Ok(()),
    }
}

/// The standby's error while `holder` holds the slot's snapshot lock.
fn busy(slot: &str, holder: Option<Holder>) -> Error {
    let who = holder.map_or_else(
        || "a session that has just let go".into(),
        |h| h.to_string(),
    );
    Error::new(
        Kind::Standby,
        format!(
            "another walrelay is taking the snapshot of slot {slot:?} (--snapshot-where; its \
             lock is held by {who}): this one waits as a standby, and takes over if that one \
             goes away before the stream starts"
        ),
    )
}

/// The session holding the slot's snapshot lock, if any: a standby waits
/// while there is one.
pub async fn holder(client: &Client, slot: &str) -> Result<Option<Holder>> {
    // Two int4 keys show as classid and objid (as unsigned oids), objsubid 2.
    let oid = |key: i32| i64::from(u32::from_ne_bytes(key.to_ne_bytes()));
    let row = client
        .query_opt(
            "SELECT l.pid, a.application_name, a.client_addr::text, \
                    date_trunc('second', a.backend_start)::text \
             FROM pg_catalog.pg_locks l \
             LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid \
             WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 \
               AND l.classid = $1::int8::oid AND l.objid = $2::int8::oid \
               AND l.database = (SELECT oid FROM pg_catalog.pg_database \
                                  WHERE datname = current_database()) \
             LIMIT 1",
            &[&oid(KEY_SPACE), &oid(slot_key(slot))],
        )
        .await
        .map_err(|e| sql_error("cannot read pg_locks", e))?;
    Ok(row.map(|r| Holder {
        pid: r.get(0),
        application: r.get(1),
        client_addr: r.get(2),
        since: r.get(3),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_slot_has_its_own_stable_key() {
        // FNV-1a's own test vectors: the key must not change between
        // versions, or an old and a new replica would not see each other.
        assert_eq!(slot_key(""), 0x811c_9dc5_u32 as i32);
        assert_eq!(slot_key("a"), 0xe40c_292c_u32 as i32);
        assert_ne!(slot_key("walrelay"), slot_key("walrelay_2"));
    }
}
