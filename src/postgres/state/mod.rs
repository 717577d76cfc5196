//! walrelay's memory of each slot, kept in the database itself: one row per
//! slot in a small table (`--state-table`, `public.walrelay_state` unless
//! told otherwise).
//!
//! Three things are decided from it that process memory cannot decide:
//!
//! - **A missing slot is a first start or a loss.** Creating a new slot
//!   after a loss starts at the current WAL position and skips every event
//!   in between, without a word. The row records that the slot was created,
//!   so a missing one stops walrelay instead.
//! - **The outbox is the one walrelay read.** A table dropped and
//!   recreated, or removed from the publication and added back, publishes
//!   nothing in between. The row records each table's oid and how the
//!   publication includes it (`membership::of`); a difference at start-up
//!   or while streaming stops walrelay with the LSN range at risk.
//! - **One configuration per slot.** The settings that decide what is
//!   published (tables, source, prefix, routing) are recorded; an instance
//!   with other settings refuses to stream from the slot.
//!
//! It also holds the last position Kafka acknowledged everything before,
//! with the server history it belongs to (`IDENTIFY_SYSTEM`'s system id and
//! timeline), so a restart after a Postgres crash, whose slot fell back to
//! its last checkpoint, resumes there instead of sending minutes again.
//!
//! Every write at start-up must succeed: a role that cannot write the row
//! is refused with the statements that fix it, because without the row a
//! lost slot would look like a first start. The table is replicated to
//! physical standbys like any other, so the memory survives a failover. On
//! a standby walrelay reads and writes it on the primary (`route`): each
//! write takes a [`StateClient`], which only the route makes.
//! Older walrelays kept the slot's history in the publication's comment;
//! `legacy` reads it once when the table has no row.

mod accepted;
mod committed;
pub mod decide;
mod legacy;
pub mod recovery;
pub mod route;
pub mod snapshot;

use serde::{Deserialize, Serialize};
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

use super::lsn::Lsn;
use super::names::TableName;
use super::sql_error;
use crate::error::{Error, Result};
pub use route::{StateClient, StateRoute};

/// The default `--state-table`.
pub const DEFAULT_TABLE: &str = "public.walrelay_state";

/// The server history a position belongs to: positions are only
/// comparable within one system and timeline (a promoted standby's WAL
/// reuses positions the old primary had written).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerId {
    pub system_id: String,
    pub timeline: u32,
}

/// One outbox table as walrelay accepted it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxIdentity {
    /// `schema.table`.
    pub table: String,
    pub oid: u32,
    /// How the publication includes the table (`membership::of`): a
    /// table removed from it and added back gets a new one.
    pub membership: String,
    /// The oids the table had before an accepted replacement. Rows the
    /// old table wrote before it was dropped may still wait in the slot,
    /// under the outbox's name and the old oid: they are events like any
    /// other, and refusing them would leave walrelay stuck before them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier_oids: Vec<u32>,
    /// Changes to the outbox committed before this position were accepted
    /// with --accept-outbox-change: the guard's messages about them (see
    /// `guard`) are read past.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_through: Option<Lsn>,
}

/// How many replaced oids of one table are remembered: more than a slot
/// would ever hold rows of, and a bound on the row's size.
const EARLIER_OIDS_KEPT: usize = 16;

impl OutboxIdentity {
    /// The oids whose rows are this table's events: its own and those of
    /// the tables it replaced.
    pub fn oids(&self) -> impl Iterator<Item = u32> + '_ {
        std::iter::once(self.oid).chain(self.earlier_oids.iter().copied())
    }
}

/// Carries what the recorded tables remember into the tables as they are
/// now: a table whose oid changed (an accepted replacement) remembers the
/// old one, so the old table's rows still in the slot are read; and the
/// position through which changes were accepted.
pub fn carry_history(now: &mut [OutboxIdentity], recorded: &[OutboxIdentity]) {
    for table in now.iter_mut() {
        let Some(old) = recorded.iter().find(|r| r.table == table.table) else {
            continue;
        };
        table.accepted_through = old.accepted_through;
        let mut earlier: Vec<u32> = Vec::new();
        for oid in old.oids().filter(|&o| o != table.oid) {
            if !earlier.contains(&oid) && earlier.len() < EARLIER_OIDS_KEPT {
                earlier.push(oid);
            }
        }
        table.earlier_oids = earlier;
    }
}

/// The outbox tables a session accepted, and the WAL position at which it
/// found them so: a change since lies after it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Accepted {
    pub outbox: Vec<OutboxIdentity>,
    pub intact_at: Lsn,
}

/// A position Kafka acknowledged everything before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    pub lsn: Lsn,
    /// None when recorded by an older walrelay, which did not say.
    pub server: Option<ServerId>,
    pub at: String,
}

/// What the database remembers of one slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotState {
    pub slot: String,
    /// Where and when walrelay created the slot (None: not yet).
    pub created: Option<(Lsn, String)>,
    pub delivered: Option<Delivered>,
    /// The last WAL position at which the outbox tables were found as
    /// recorded, and when: a change since lies after it.
    pub verified: Option<(Lsn, String)>,
    /// The outbox tables as last accepted (empty: never recorded).
    pub outbox: Vec<OutboxIdentity>,
    /// The settings that decide what is published, as last accepted.
    pub settings: Option<serde_json::Value>,
    /// Retention's floor: rows dated before it are walrelay's to keep. The
    /// slot's creation, or a later accepted outbox change (`accepted`).
    pub kept_before: Option<String>,
}

impl SlotState {
    /// Where events that can no longer be read would begin.
    pub fn last_delivered(&self) -> String {
        match (&self.delivered, &self.created) {
            (Some(d), _) => format!("{} (recorded at {})", d.lsn, d.at),
            (None, Some((lsn, at))) => format!("{lsn} (the slot's creation at {at})"),
            (None, None) => "unknown".to_string(),
        }
    }

    /// Retention's floor (rows dated before it are walrelay's to keep):
    /// a later accepted outbox change, else the slot's creation; None
    /// before walrelay created the slot.
    pub fn retention_floor(&self) -> Option<String> {
        let (_, created_at) = self.created.as_ref()?;
        Some(
            self.kept_before
                .clone()
                .unwrap_or_else(|| created_at.clone()),
        )
    }

    /// The position of [`Self::last_delivered`], when there is one.
    pub fn delivered_lsn(&self) -> Option<Lsn> {
        match (&self.delivered, &self.created) {
            (Some(d), _) => Some(d.lsn),
            (None, created) => created.as_ref().map(|(lsn, _)| *lsn),
        }
    }

    /// The position of [`Self::last_verified`], when there is one.
    pub fn verified_lsn(&self) -> Option<Lsn> {
        match (&self.verified, &self.created) {
            (Some((lsn, _)), _) => Some(*lsn),
            (None, created) => created.as_ref().map(|(lsn, _)| *lsn),
        }
    }

    /// Where a change to the outbox tables would begin.
    pub fn last_verified(&self) -> String {
        match (&self.verified, &self.created) {
            (Some((lsn, at)), _) => format!("{lsn} (verified at {at})"),
            (None, Some((lsn, at))) => format!("{lsn} (the slot's creation at {at})"),
            (None, None) => "unknown".to_string(),
        }
    }

    /// The recorded position, if it belongs to `server`'s history.
    pub fn resume_point(&self, server: &ServerId) -> Option<Lsn> {
        let d = self.delivered.as_ref()?;
        (d.server.as_ref() == Some(server)).then_some(d.lsn)
    }
}

/// The table that holds the rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateTable(pub TableName);

const COLUMNS: &str = "slot, created_lsn::text, created_at::text, delivered_lsn::text, \
                       delivered_system_id, delivered_timeline, delivered_at::text, \
                       outbox::text, settings::text, verified_lsn::text, verified_at::text, \
                       GREATEST(created_at, {accepted})::text";

impl StateTable {
    /// The statement that creates the table, for walrelay and for the DBA.
    pub fn create_sql(&self) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {} (\n\
             \x20   slot text PRIMARY KEY,\n\
             \x20   created_lsn pg_lsn,\n\
             \x20   created_at timestamptz,\n\
             \x20   delivered_lsn pg_lsn,\n\
             \x20   delivered_system_id text,\n\
             \x20   delivered_timeline integer,\n\
             \x20   delivered_at timestamptz,\n\
             \x20   verified_lsn pg_lsn,\n\
             \x20   verified_at timestamptz,\n\
             \x20   outbox jsonb,\n\
             \x20   settings jsonb,\n\
             \x20   snapshot jsonb,\n\
             \x20   kafka_committed jsonb,\n\
             \x20   outbox_accepted_at timestamptz\n\
             )",
            self.0.quoted()
        )
    }

    /// The grant a least-privilege role needs.
    pub fn grant_sql(&self, role: &str) -> String {
        format!(
            "GRANT SELECT, INSERT, UPDATE ON {} TO {};",
            self.0.quoted(),
            super::names::quote_ident(role)
        )
    }

    /// Reads the slot's row, creating the table when it is missing and
    /// importing an older walrelay's comment line when the row is.
    pub async fn load(
        &self,
        client: &StateClient<'_>,
        publication: &str,
        slot: &str,
    ) -> Result<Option<SlotState>> {
        let state = match self.read(client, slot).await {
            Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => {
                self.create(client).await?;
                None
            }
            other => other.map_err(|e| self.refused("read", e))?,
        };
        if state.is_some() {
            return Ok(state);
        }
        let Some(old) = legacy::read(client, publication, slot).await? else {
            return Ok(None);
        };
        self.insert(client, &old).await?;
        Ok(Some(old))
    }

    /// The slot's row; None without one. For readers that must not create
    /// the table (`status`, `check`): a missing table reads as no row.
    pub async fn peek(
        &self,
        client: &Client,
        publication: &str,
        slot: &str,
    ) -> Result<Option<SlotState>> {
        match self.read(client, slot).await {
            Ok(Some(state)) => Ok(Some(state)),
            Ok(None) => legacy::read(client, publication, slot).await,
            Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => {
                legacy::read(client, publication, slot).await
            }
            Err(e) => Err(self.refused("read", e)),
        }
    }

    async fn read(
        &self,
        client: &Client,
        slot: &str,
    ) -> std::result::Result<Option<SlotState>, tokio_postgres::Error> {
        let columns = COLUMNS.replace("{accepted}", accepted::SELECTED);
        let sql = format!(
            "SELECT {columns} FROM {} s WHERE slot = $1",
            self.0.quoted()
        );
        let Some(row) = client.query_opt(&sql, &[&slot]).await? else {
            return Ok(None);
        };
        let lsn = |i: usize| {
            row.get::<_, Option<String>>(i)
                .and_then(|t| t.parse::<Lsn>().ok())
        };
        let created = lsn(1).map(|l| (l, row.get::<_, Option<String>>(2).unwrap_or_default()));
        let delivered = lsn(3).map(|l| Delivered {
            lsn: l,
            server: row
                .get::<_, Option<String>>(4)
                .zip(row.get::<_, Option<i32>>(5))
                .map(|(system_id, timeline)| ServerId {
                    system_id,
                    timeline: timeline as u32,
                }),
            at: row.get::<_, Option<String>>(6).unwrap_or_default(),
        });
        let outbox = row
            .get::<_, Option<String>>(7)
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        let settings = row
            .get::<_, Option<String>>(8)
            .and_then(|t| serde_json::from_str(&t).ok());
        let verified = lsn(9).map(|l| (l, row.get::<_, Option<String>>(10).unwrap_or_default()));
        Ok(Some(SlotState {
            slot: row.get(0),
            created,
            delivered,
            verified,
            outbox,
            settings,
            kept_before: row.get(11),
        }))
    }

    async fn create(&self, client: &Client) -> Result<()> {
        match client.batch_execute(&self.create_sql()).await {
            // Another walrelay (another slot) created it at the same moment:
            // CREATE TABLE IF NOT EXISTS does not wait for a concurrent one,
            // it fails on the unique index of the table's row type, or, when
            // the other committed first, with "type ... already exists".
            Err(e)
                if e.code() == Some(&SqlState::UNIQUE_VIOLATION)
                    || e.code() == Some(&SqlState::DUPLICATE_TABLE)
                    || e.code() == Some(&SqlState::DUPLICATE_OBJECT) =>
            {
                Ok(())
            }
            other => other.map_err(|e| self.refused("create", e)),
        }
    }

    /// Adds `column` to a table an older walrelay made, for `why`. Only
    /// the table's owner may: anyone else gets the statement to run.
    async fn ensure_column(
        &self,
        client: &Client,
        column: &str,
        ty: &str,
        why: &str,
    ) -> Result<()> {
        let present = client
            .query_opt(
                "SELECT 1 FROM pg_catalog.pg_attribute \
                 WHERE attrelid = $1::text::regclass AND attname = $2 AND NOT attisdropped",
                &[&self.0.quoted(), &column],
            )
            .await
            .map_err(|e| sql_error(format!("cannot read the columns of {self}"), e))?
            .is_some();
        if present {
            return Ok(());
        }
        let alter = format!(
            "ALTER TABLE {} ADD COLUMN IF NOT EXISTS {column} {ty}",
            self.0.quoted()
        );
        client.batch_execute(&alter).await.map_err(|e| {
            Error::permanent(format!(
                "{why}, in the state table {self}, which has no {column} column, and this role \
                 may not add it: let its owner run {alter};"
            ))
            .with_source(e)
        })
    }

    async fn insert(&self, client: &Client, state: &SlotState) -> Result<()> {
        let sql = format!(
            "INSERT INTO {} (slot, created_lsn, created_at, delivered_lsn, delivered_at) \
             VALUES ($1, $2::text::pg_lsn, $3::text::timestamptz, $4::text::pg_lsn, \
                     $5::text::timestamptz) \
             ON CONFLICT (slot) DO NOTHING",
            self.0.quoted()
        );
        let created_lsn = state.created.as_ref().map(|(l, _)| l.to_string());
        let created_at = state.created.as_ref().map(|(_, at)| at.clone());
        let delivered_lsn = state.delivered.as_ref().map(|d| d.lsn.to_string());
        let delivered_at = state.delivered.as_ref().map(|d| d.at.clone());
        self.write(
            client,
            &sql,
            &[
                &state.slot,
                &created_lsn,
                &created_at,
                &delivered_lsn,
                &delivered_at,
            ],
        )
        .await
    }

    /// Records the outbox tables and settings a start accepted (a new row
    /// on the first start), verified as of `verified`.
    pub async fn record_start(
        &self,
        client: &StateClient<'_>,
        slot: &str,
        outbox: &[OutboxIdentity],
        settings: &serde_json::Value,
        verified: Lsn,
    ) -> Result<()> {
        let sql = format!(
            "INSERT INTO {} (slot, outbox, settings, verified_lsn, verified_at) \
             VALUES ($1, $2::text::jsonb, $3::text::jsonb, $4::text::pg_lsn, now()) \
             ON CONFLICT (slot) DO UPDATE SET outbox = EXCLUDED.outbox, \
                 settings = EXCLUDED.settings, verified_lsn = EXCLUDED.verified_lsn, \
                 verified_at = EXCLUDED.verified_at",
            self.0.quoted()
        );
        let outbox = serde_json::to_string(outbox).expect("identities serialize");
        self.write(
            client,
            &sql,
            &[&slot, &outbox, &settings.to_string(), &verified.to_string()],
        )
        .await
    }

    /// Records new settings for the slot ahead of the rest of a start
    /// (`--accept-config-change`), so that instances with the old ones
    /// stop even while this one still waits for the database to match.
    pub async fn record_settings(
        &self,
        client: &StateClient<'_>,
        slot: &str,
        settings: &serde_json::Value,
    ) -> Result<()> {
        let sql = format!(
            "INSERT INTO {} (slot, settings) VALUES ($1, $2::text::jsonb) \
             ON CONFLICT (slot) DO UPDATE SET settings = EXCLUDED.settings",
            self.0.quoted()
        );
        self.write(client, &sql, &[&slot, &settings.to_string()])
            .await
    }

    /// Records that the outbox tables were found as recorded at `lsn`.
    pub async fn record_verified(
        &self,
        client: &StateClient<'_>,
        slot: &str,
        lsn: Lsn,
    ) -> std::result::Result<(), tokio_postgres::Error> {
        let sql = format!(
            "UPDATE {} SET verified_lsn = $2::text::pg_lsn, verified_at = now() \
             WHERE slot = $1 AND (verified_lsn IS NULL OR verified_lsn < $2::text::pg_lsn)",
            self.0.quoted()
        );
        client
            .execute(&sql, &[&slot, &lsn.to_string()])
            .await
            .map(drop)
    }

    /// Records that walrelay created the slot at `lsn`.
    pub async fn record_created(
        &self,
        client: &StateClient<'_>,
        slot: &str,
        lsn: Lsn,
    ) -> Result<()> {
        let sql = format!(
            "UPDATE {} SET created_lsn = $2::text::pg_lsn, created_at = now(), \
                 delivered_lsn = NULL, delivered_system_id = NULL, delivered_timeline = NULL, \
                 delivered_at = NULL \
             WHERE slot = $1",
            self.0.quoted()
        );
        self.write(client, &sql, &[&slot, &lsn.to_string()]).await
    }

    /// Records a delivered position; an older one never replaces a newer
    /// one of the same server history. `in_kafka_transactions` (exactly
    /// once, where a position is confirmed only after its Kafka transaction
    /// committed) records it as committed in Kafka too (`committed`).
    pub async fn record_delivered(
        &self,
        client: &StateClient<'_>,
        slot: &str,
        lsn: Lsn,
        server: &ServerId,
        in_kafka_transactions: bool,
    ) -> std::result::Result<(), tokio_postgres::Error> {
        let committed = if in_kafka_transactions {
            committed::set_clause()
        } else {
            String::new()
        };
        let sql = format!(
            "UPDATE {} SET delivered_lsn = $2::text::pg_lsn, delivered_system_id = $3, \
                 delivered_timeline = $4, delivered_at = now(){committed} \
             WHERE slot = $1 AND (delivered_lsn IS NULL OR delivered_lsn < $2::text::pg_lsn \
                 OR delivered_system_id IS DISTINCT FROM $3 \
                 OR delivered_timeline IS DISTINCT FROM $4)",
            self.0.quoted()
        );
        let timeline = server.timeline as i32;
        client
            .execute(
                &sql,
                &[&slot, &lsn.to_string(), &server.system_id, &timeline],
            )
            .await
            .map(drop)
    }

    /// Runs a write that start-up needs: a refusal names the fix.
    async fn write(
        &self,
        client: &Client,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<()> {
        client
            .execute(sql, params)
            .await
            .map(drop)
            .map_err(|e| self.refused("write", e))
    }

    /// What a DBA does for a role that may not use the table.
    pub fn fix(&self) -> String {
        format!(
            "let a DBA run sql/walrelay_state.sql (or: {}; {}), or point --state-table at a \
             table this role may read and write",
            self.create_sql().replace('\n', " "),
            self.grant_sql("<walrelay's role>")
        )
    }

    /// The error for a role that may not use the table, with the fix.
    fn refused(&self, what: &str, e: tokio_postgres::Error) -> Error {
        let table = &self.0;
        if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) {
            return Error::permanent(format!(
                "walrelay may not {what} its state table {table}, where it remembers each slot \
                 so that a lost slot is never taken for a first start: {}",
                self.fix()
            ))
            .with_source(e);
        }
        sql_error(format!("cannot {what} walrelay's state table {table}"), e)
    }
}

impl std::fmt::Display for StateTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(timeline: u32) -> ServerId {
        ServerId {
            system_id: "7412".into(),
            timeline,
        }
    }

    #[test]
    fn a_delivered_position_is_a_resume_point_only_on_its_own_timeline() {
        let state = SlotState {
            slot: "walrelay".into(),
            created: Some((Lsn(0x100), "t0".into())),
            delivered: Some(Delivered {
                lsn: Lsn(0x2000),
                server: Some(server(1)),
                at: "t1".into(),
            }),
            verified: None,
            outbox: Vec::new(),
            settings: None,
            kept_before: None,
        };
        assert_eq!(state.resume_point(&server(1)), Some(Lsn(0x2000)));
        assert_eq!(state.resume_point(&server(2)), None, "a promoted standby");
        let other = ServerId {
            system_id: "9999".into(),
            timeline: 1,
        };
        assert_eq!(state.resume_point(&other), None, "another cluster");
        assert!(state
            .last_delivered()
            .starts_with("0/2000 (recorded at t1)"));
    }

    #[test]
    fn a_replaced_table_remembers_the_oids_whose_rows_may_still_be_in_the_slot() {
        let table = |oid, earlier: Vec<u32>| OutboxIdentity {
            table: "public.outbox".into(),
            oid,
            membership: format!("publication 7 rel {oid}"),
            earlier_oids: earlier,
            accepted_through: Some(Lsn(0x50)),
        };
        let mut now = vec![table(300, vec![])];
        carry_history(&mut now, &[table(200, vec![100])]);
        assert_eq!(now[0].earlier_oids, vec![200, 100]);
        assert_eq!(now[0].oids().collect::<Vec<_>>(), vec![300, 200, 100]);
        assert_eq!(now[0].accepted_through, Some(Lsn(0x50)));
        // Unchanged, it stays as recorded, so nothing is written again.
        let mut same = vec![table(300, vec![])];
        carry_history(&mut same, &now);
        assert_eq!(same, now);
        // What an older walrelay wrote still reads.
        let old: OutboxIdentity = serde_json::from_str(
            r#"{"table": "public.outbox", "oid": 5, "membership": "publication 7 rel 9"}"#,
        )
        .unwrap();
        assert!(old.earlier_oids.is_empty() && old.accepted_through.is_none());
        let written = serde_json::to_string(&now[0]).unwrap();
        assert!(
            written.contains(r#""accepted_through":"0/50""#),
            "{written}"
        );
    }

    #[test]
    fn the_shipped_sql_creates_the_table_walrelay_creates() {
        let shipped = include_str!("../../../sql/walrelay_state.sql");
        let table = StateTable(DEFAULT_TABLE.parse().unwrap());
        assert!(shipped.contains(&table.create_sql()), "{shipped}");
        // The same grant as grant_sql, with the role left for the DBA to name.
        let grant = table
            .grant_sql("walrelay")
            .replace("\"walrelay\";", "walrelay;");
        assert!(shipped.contains(&grant), "{shipped}");
    }

    #[test]
    fn the_create_statement_names_the_table_quoted() {
        let table = StateTable("ops.walrelay_state".parse().unwrap());
        assert!(table
            .create_sql()
            .starts_with("CREATE TABLE IF NOT EXISTS \"ops\".\"walrelay_state\""));
        assert_eq!(
            table.grant_sql("walrelay"),
            "GRANT SELECT, INSERT, UPDATE ON \"ops\".\"walrelay_state\" TO \"walrelay\";"
        );
    }
}
