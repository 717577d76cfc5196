//! Start-up checks and slot management, over an ordinary SQL connection.
//!
//! The order matters: the publication must exist before the slot, because
//! pgoutput reads publication membership as of each decoded WAL position.

use std::time::Duration;

use tokio_postgres::{Client, NoTls};
use tracing::{error, info, warn};

use super::lsn::Lsn;
use super::names::TableName;
use super::state::decide::SlotPlan;
use super::state::recovery::lost_slot_error;
use super::{describe_target, server_version, sql_error, PgTarget};
use crate::error::{Error, Result};

/// How long dropping a slot a failed start created may take.
const DROP_TIMEOUT: Duration = Duration::from_secs(5);

/// How long opening a connection may take in all: each host's TCP connect
/// (`connect_timeout`, 10 s by default, as `socket::open` waits), then 30 s
/// for TLS, the login and the server's start-up. tokio-postgres bounds the
/// TCP connect only: a server (or a proxy) that takes the connection and
/// never answers would hold the caller forever, without a word.
pub fn startup_timeout(target: &PgTarget) -> Duration {
    let per_host = target
        .config
        .get_connect_timeout()
        .copied()
        .unwrap_or(Duration::from_secs(10));
    let hosts = target.config.get_hosts().len().max(1) as u32;
    per_host * hosts + Duration::from_secs(30)
}

/// `opening` (a connection to `target`), or a transient error once it has
/// taken longer than `startup_timeout`.
pub async fn within_startup<T>(
    target: &PgTarget,
    opening: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    let limit = startup_timeout(target);
    tokio::time::timeout(limit, opening)
        .await
        .unwrap_or_else(|_| {
            Err(Error::transient(format!(
                "Postgres at {} took the connection but did not finish its start-up within \
                 {limit:?}",
                describe_target(&target.config)
            )))
        })
}

/// An ordinary SQL connection, logged in as `--pg-auth` says (a fresh IAM
/// token for each connection), within `startup_timeout`.
pub async fn connect(target: &PgTarget) -> Result<Client> {
    within_startup(target, open(target)).await
}

async fn open(target: &PgTarget) -> Result<Client> {
    let config = super::auth::login_config(target).await?;
    let failed = |e: tokio_postgres::Error| {
        // tokio-postgres says so in the error's source.
        let no_tls = std::error::Error::source(&e)
            .is_some_and(|cause| cause.to_string().contains("server does not support TLS"));
        if target.uses_token() && no_tls {
            return super::auth::no_tls_for_token(target);
        }
        let fix = e
            .as_db_error()
            .and_then(|db| super::auth::refused_login_fix(target, db.code().code()));
        let error = sql_error(
            format!(
                "cannot connect to Postgres at {}",
                describe_target(&target.config)
            ),
            e,
        );
        match fix {
            Some(fix) => error.with_note(&format!("; {fix}")),
            None => error,
        }
    };
    // The connection task's type depends on TLS, hence two branches.
    let client = match target.tls.make_connector() {
        Some(tls) => {
            let (client, connection) = config.connect(tls).await.map_err(failed)?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %e, "control connection closed");
                }
            });
            client
        }
        None => {
            let (client, connection) = config.connect(NoTls).await.map_err(failed)?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %e, "control connection closed");
                }
            });
            client
        }
    };
    Ok(client)
}

pub async fn check_wal_level(client: &Client) -> Result<()> {
    let row = client
        .query_one("SHOW wal_level", &[])
        .await
        .map_err(|e| sql_error("cannot read wal_level", e))?;
    let level: String = row.get(0);
    if level != "logical" {
        return Err(Error::refusal(
            format!("Postgres runs with wal_level={level}, walrelay needs wal_level=logical"),
            "run ALTER SYSTEM SET wal_level = logical; (or set it in postgresql.conf) and \
             restart Postgres",
        ));
    }
    Ok(())
}

/// Checks that the table exists and has every column walrelay maps.
pub async fn check_table(client: &Client, table: &TableName, columns: &[&str]) -> Result<()> {
    let rows = client
        .query(
            "SELECT a.attname FROM pg_catalog.pg_attribute a \
             JOIN pg_catalog.pg_class c ON c.oid = a.attrelid \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p') \
               AND a.attnum > 0 AND NOT a.attisdropped",
            &[&table.schema, &table.name],
        )
        .await
        .map_err(|e| sql_error(format!("cannot inspect table {table}"), e))?;
    if rows.is_empty() {
        return Err(Error::refusal(
            format!("table {table} does not exist (or this user cannot see it)"),
            "create it (sql/outbox.sql has the default layout) or point --table at your outbox \
             table",
        ));
    }
    let present: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    for column in columns {
        if !present.iter().any(|c| c == column) {
            return Err(Error::refusal(
                format!(
                    "table {table} has no column {column:?} (it has: {})",
                    present.join(", ")
                ),
                "add the column or map another one with the matching walrelay flag",
            ));
        }
    }
    Ok(())
}

/// The server's WAL position now: its insert position, or on a standby its
/// replay position (`pg_current_wal_lsn()` fails during recovery).
pub async fn current_wal_lsn(client: &Client) -> Result<Lsn> {
    super::standby::wal_position(client).await
}

/// The server's `wal_sender_timeout`; None when it is 0 (disabled).
pub async fn wal_sender_timeout(client: &Client) -> Result<Option<std::time::Duration>> {
    let row = client
        .query_one(
            "SELECT setting::bigint FROM pg_catalog.pg_settings WHERE name = 'wal_sender_timeout'",
            &[],
        )
        .await
        .map_err(|e| sql_error("cannot read wal_sender_timeout", e))?;
    let ms: i64 = row.get(0);
    Ok((ms > 0).then(|| std::time::Duration::from_millis(ms as u64)))
}

/// The table-less outbox needs pgoutput's `messages` option.
pub async fn check_messages_supported(client: &Client) -> Result<()> {
    let version = server_version(client).await?;
    if version < 140000 {
        return Err(Error::refusal(
            format!(
                "--source messages needs PostgreSQL 14 or later (this server is {})",
                version / 10000
            ),
            "upgrade, or use an outbox table with --source table",
        ));
    }
    Ok(())
}

/// How to make sure the slot exists.
#[derive(Debug, Clone)]
pub struct SlotOptions<'a> {
    pub slot: &'a str,
    /// What the start-up decision said (`state::decide`).
    pub plan: &'a SlotPlan,
    /// The slot's confirmed position, as `existing_slot` found it.
    pub existing: Option<Lsn>,
    /// Create a slot a standby can take over (PostgreSQL 17+).
    pub failover: bool,
    /// Set when the server is a standby: its primary, asked for the
    /// running-transactions record that slot creation there waits for.
    pub primary: Option<&'a Client>,
}

/// The slot as a start found or made it.
#[derive(Debug, Clone, Copy)]
pub struct SlotReady {
    /// Its confirmed position.
    pub confirmed: Lsn,
    /// Set when this start created it.
    pub created: bool,
}

/// Returns the slot's confirmed position, creating the slot when the plan
/// says so. An existing slot is never dropped or recreated.
pub async fn ensure_slot(client: &Client, options: &SlotOptions<'_>) -> Result<SlotReady> {
    let slot = options.slot;
    if let (SlotPlan::Reuse, Some(confirmed)) = (options.plan, options.existing) {
        if options.primary.is_some() {
            let _said = super::failover::on_standby(options.failover);
        } else {
            super::failover::check_existing_slot(client, slot, options.failover).await?;
        }
        return Ok(SlotReady {
            confirmed,
            created: false,
        });
    }
    let Some(lsn) = create_slot(client, slot, options).await? else {
        // Another walrelay created it a moment ago: use theirs.
        let confirmed = existing_slot(client, slot).await?.ok_or_else(|| {
            Error::transient(format!(
                "replication slot {slot:?} appeared and vanished during start-up"
            ))
        })?;
        return Ok(SlotReady {
            confirmed,
            created: false,
        });
    };
    match options.plan {
        SlotPlan::CreateReplacing { gap_from } => error!(
            slot,
            gap_from = %gap_from,
            gap_to = %lsn,
            "created a new replication slot in place of a missing one, as \
             --recreate-missing-slot asks: events committed between these LSNs cannot be \
             delivered by walrelay; publish them again (docs/operations.md, \"Publishing events \
             again\")"
        ),
        _ => info!(slot, lsn = %lsn, "created replication slot"),
    }
    Ok(SlotReady {
        confirmed: lsn,
        created: true,
    })
}

/// Cancels what a connection's server process is doing (a slot creation a
/// start abandoned), bounded like a drop.
pub async fn cancel(target: &PgTarget, token: tokio_postgres::CancelToken) {
    let cancelling = async {
        match target.tls.make_connector() {
            Some(tls) => token.cancel_query(tls).await,
            None => token.cancel_query(NoTls).await,
        }
    };
    match tokio::time::timeout(DROP_TIMEOUT, cancelling).await {
        Ok(Ok(())) => info!("asked Postgres to cancel the slot creation of an abandoned start"),
        Ok(Err(e)) => warn!(error = %e, "cannot cancel the slot creation of an abandoned start"),
        Err(_) => {
            warn!("cannot cancel the slot creation of an abandoned start: Postgres did not answer")
        }
    }
}

/// Drops the slot this start created, after the start failed before
/// streaming: left behind, it would hold WAL until the disk fills. Only an
/// inactive slot is dropped, so never one another process streams from.
/// Best effort, on a connection of its own (the start's may be the one that
/// failed), bounded so that a stop is not held up.
pub async fn drop_created_slot(target: &PgTarget, slot: &str) {
    let dropping = async {
        let client = connect(target).await?;
        client
            .query(
                "SELECT pg_catalog.pg_drop_replication_slot(slot_name) \
                 FROM pg_catalog.pg_replication_slots WHERE slot_name = $1 AND NOT active",
                &[&slot],
            )
            .await
            .map_err(|e| sql_error("cannot drop the replication slot", e))
    };
    match tokio::time::timeout(DROP_TIMEOUT, dropping).await {
        Ok(Ok(rows)) if rows.len() == 1 => info!(
            slot,
            "dropped the replication slot this start created: the start failed before streaming"
        ),
        Ok(Ok(_)) => warn!(
            slot,
            "the start failed before streaming and the replication slot it created is in use \
             by another process; left to that process"
        ),
        Ok(Err(e)) => warn!(
            slot,
            error = %e.report(),
            "cannot drop the replication slot this failed start created; unless walrelay \
             starts again, drop it (SELECT pg_drop_replication_slot('{slot}');), since it holds \
             WAL"
        ),
        Err(_) => warn!(
            slot,
            "cannot drop the replication slot this failed start created: Postgres did not \
             answer; unless walrelay starts again, drop it \
             (SELECT pg_drop_replication_slot('{slot}');), since it holds WAL"
        ),
    }
}

/// Creates the slot; None if another process created it first.
async fn create_slot(
    client: &Client,
    slot: &str,
    options: &SlotOptions<'_>,
) -> Result<Option<Lsn>> {
    let created = match options.primary {
        Some(primary) => {
            let statement = super::failover::on_standby(options.failover);
            let name = [&slot as &(dyn tokio_postgres::types::ToSql + Sync)];
            let creating = client.query_one(statement, &name);
            super::standby::while_creating_slot(creating, primary).await
        }
        None => {
            let statement =
                super::failover::create_slot_statement(client, options.failover).await?;
            client.query_one(statement, &[&slot]).await
        }
    };
    match created {
        Ok(row) => {
            let lsn: String = row.get(0);
            Ok(Some(lsn.parse().map_err(Error::permanent)?))
        }
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::DUPLICATE_OBJECT) => Ok(None),
        Err(e) => Err(sql_error(
            format!(
                "cannot create replication slot {slot:?}; the user needs the REPLICATION \
                 attribute (ALTER ROLE … REPLICATION) and free max_replication_slots"
            ),
            e,
        )),
    }
}

/// The slot's confirmed position if it exists and walrelay can stream from it.
pub async fn existing_slot(client: &Client, slot: &str) -> Result<Option<Lsn>> {
    let Some(report) = super::slot::read(client, slot).await? else {
        return Ok(None);
    };
    let (plugin, slot_type) = (&report.plugin, &report.slot_type);
    if slot_type != "logical" || plugin.as_deref() != Some("pgoutput") {
        return Err(Error::refusal(
            format!(
                "replication slot {slot:?} exists but is a {slot_type} slot with output plugin \
                 {}; walrelay needs a logical pgoutput slot",
                plugin.as_deref().unwrap_or("none")
            ),
            format!(
                "choose another --slot, or drop the old slot once nothing needs it (SELECT \
                 pg_drop_replication_slot('{slot}');)"
            ),
        ));
    }
    if !report.in_this_database {
        return Err(Error::refusal(
            format!(
                "replication slot {slot:?} belongs to database {}",
                report.database.as_deref().unwrap_or("?")
            ),
            "point --pg-url at that database or choose another --slot",
        ));
    }
    if report.wal_status.as_deref() == Some("lost") {
        return Err(lost_slot_error(slot, report.confirmed_flush));
    }
    let confirmed = report.confirmed_flush.unwrap_or(Lsn::ZERO);
    if let Some(pid) = report.active_pid {
        warn!(slot, pid, "replication slot is in use by another process");
    }
    info!(slot, confirmed_flush_lsn = %confirmed, "reusing replication slot");
    Ok(Some(confirmed))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port that takes connections and never says a word.
    async fn silent_server() -> (u16, tokio::task::JoinHandle<()>) {
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = silent.local_addr().unwrap().port();
        let held = tokio::spawn(async move {
            let mut sockets = Vec::new();
            while let Ok((socket, _)) = silent.accept().await {
                sockets.push(socket);
            }
        });
        (port, held)
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_that_takes_the_connection_and_never_answers_is_given_up_on() {
        let (port, held) = silent_server().await;
        let target = PgTarget::parse(&format!(
            "postgres://walrelay@127.0.0.1:{port}/shop?sslmode=disable&connect_timeout=5"
        ))
        .unwrap();
        assert_eq!(startup_timeout(&target), Duration::from_secs(35));
        let started = tokio::time::Instant::now();
        let error = connect(&target).await.unwrap_err();
        assert!(error.is_transient(), "{error:?}");
        assert!(
            error.to_string().contains("did not finish its start-up"),
            "{error}"
        );
        assert_eq!(started.elapsed(), Duration::from_secs(35));
        // The replication connection has the same limit.
        let started = tokio::time::Instant::now();
        let error = crate::postgres::replication::connect(&target)
            .await
            .err()
            .expect("no connection");
        assert!(error.is_transient(), "{error:?}");
        assert_eq!(started.elapsed(), Duration::from_secs(35));
        held.abort();
    }
}
