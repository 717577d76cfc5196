//! Outbox retention (`walrelay run --retention DURATION`): deletes outbox
//! rows older than DURATION once their events are confirmed, in small
//! batches, or on an outbox partitioned by time detaches and drops whole
//! partitions; and with `--partitions-ahead N` makes partitions ahead of
//! time. It runs as a task of its own beside the relay, on a SQL
//! connection of its own with statement and lock timeouts, never in the
//! per-event path.
//!
//! # The rule: a row is deleted only once its event is confirmed
//!
//! A pass reads, in one REPEATABLE READ transaction, `L0 =
//! pg_current_wal_insert_lsn()` as its first statement (the snapshot `S` is
//! taken as that statement starts, L0 as it runs), and picks in `S` the
//! rows older than DURATION (`rows.rs`) and the droppable partitions
//! (`partitions.rs`). It then commits (holding no snapshot while it
//! waits) and deletes them only once
//!
//! - (a) the slot's `confirmed_flush_lsn` is at or past L0, and
//! - (b) the watchdog found the outbox published as walrelay accepted it
//!   (same table, same publication membership) at a WAL position at or
//!   past L0,
//!
//! and only rows whose `created_at` is at or after the time walrelay
//! recorded the slot's creation in its state table, or, later, the time a
//! start last accepted an outbox change (`--accept-outbox-change`): the
//! *floor*.
//!
//! Claim: every row visible in `S` that passes the floor has its event
//! acknowledged by Kafka once (a) and (b) hold. Let the row's inserting
//! transaction be T.
//!
//! 1. *T's commit record ends at or before L0.* A snapshot sees T only once
//!    T has left the proc array (`ProcArrayEndTransaction`), which Postgres
//!    does after inserting T's commit record into the WAL
//!    (`RecordTransactionCommit`); the insert position only grows, so the
//!    commit record ends at or before the insert position when `S` was
//!    taken, at or before L0. (Not `pg_current_wal_lsn()`, the *write*
//!    position: with `synchronous_commit = off` a transaction is visible
//!    before its commit record is written.)
//! 2. *The slot decodes T.* A logical slot decodes every transaction that
//!    commits after its consistent point. walrelay records the slot's
//!    creation (`created_at` in the state table) after the slot reached its
//!    consistent point; the row's `created_at`, the server's clock when it
//!    was inserted (`clock_timestamp()`) or when T started (`now()`), is at
//!    or after that time, so T inserted it after the consistent point and
//!    committed after it. Rows from before the slot — a previous relay's,
//!    the gap of a lost slot, the rows a first start's snapshot published —
//!    are walrelay's to keep: it cannot know they were delivered. So are
//!    the rows from before an accepted outbox change: those written while
//!    the outbox was not published never reached the slot (step 3 fails
//!    for them), and whether they were published again before the
//!    acceptance, as the runbook says, nothing can tell.
//! 3. *pgoutput sent the row.* By (b) the outbox was in the publication, as
//!    accepted, at the session's start and at a position past L0; and the
//!    guard, which retention requires (`guard_problem`), writes every change
//!    to the publication in between into the WAL, where the stream stops
//!    walrelay before confirming past it. So the outbox was published, as
//!    accepted, at T's commit too. (The watchdog's reads alone cannot say
//!    so: inserts switched off and on again between two reads leave the
//!    catalog as it was.)
//! 4. *Kafka acknowledged it.* walrelay confirms a position P only when
//!    every transaction with events committed before P had every event
//!    acknowledged (the checkpoint rule, `delivery/checkpoint.rs`), or when nothing
//!    is pending and P is a keepalive's WAL end, up to which the walsender
//!    has decoded and sent everything. T's commit ends at or before L0, at
//!    or before the confirmed position (a), so T's events are acknowledged.
//!
//! Deleting by key later deletes only those rows: each is named by its
//! `ctid` and its inserting transaction id (`xmin`), which no other row
//! version shares (T committed and inserts nothing more), so a row
//! deleted meanwhile and its space reused is not mistaken for another.
//!
//! A transaction open across the boundary is therefore safe whatever its
//! rows' `created_at`: its rows are not visible in `S`, so they are picked
//! by a later pass, whose L0 lies past T's commit.
//!
//! A broker outage stops the confirmed position where Kafka's last
//! acknowledgement left it, so a row whose event is not confirmed is not
//! deleted until Kafka has it. Rows whose events Kafka acknowledged before
//! the outage may still be deleted during it: their plan's L0 was
//! confirmed already, or is once the relay confirms the last acknowledged
//! position.
//!
//! # Partitions
//!
//! A partition of an outbox partitioned by RANGE on the time column is
//! detached and dropped, under the same (a) and (b), once its upper bound B
//! is at or before `now() - DURATION` in `S`, its lower bound at or after
//! the floor, and every row it will ever hold is visible in `S`. Rows it
//! could still get come from transactions running at `S` or starting later:
//! one starting later stamps its rows at or after its start, past B; one
//! running at `S` that started at or after B too; one that started before B
//! (and with `now()` as the default could stamp a row before B) was running
//! when the pass read `pg_stat_activity` just before taking `S` (that read
//! is after B), so the oldest transaction's start is before B and the
//! partition is kept. A prepared transaction does not show there, so any
//! prepared transaction in the database keeps every partition. Reading
//! other roles' `xact_start` needs `pg_read_all_stats`. This relies on
//! `created_at` being the server's time (an application that stamps rows
//! with its own clock, or backfills old times, defeats it); the row rule
//! above relies on it only for the floor and for DURATION.
//!
//! The DEFAULT partition is never dropped; its rows are deleted as rows.
//!
//! # The time column is a timestamptz
//!
//! Every comparison above (DURATION, the floor, a partition's bounds) is
//! made between instants. A `timestamp without time zone` (or a `date`)
//! holds a wall-clock value in the time zone of the session that wrote it,
//! which walrelay cannot know: PgJDBC, for one, sends the JVM's zone as
//! the session's TimeZone, so `DEFAULT now()` stores the writer's local
//! time. Read in retention's zone, a writer east of it would have rows from
//! before the slot deleted (step 2 fails), one west of it a partition still
//! written to judged expired. So the column must be a timestamptz, and
//! `run` checks it before it creates anything (`check_before_start`),
//! naming the `ALTER TABLE … TYPE timestamptz USING … AT TIME ZONE` that
//! converts it (a partition key cannot be converted in place: the table
//! must be rebuilt).

mod ahead;
mod catalog;
mod metrics;
mod partitions;
mod rows;
mod tables;

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_postgres::Client;
use tracing::{error, warn};

use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::postgres::lsn::Lsn;
use crate::postgres::names::TableName;
use crate::postgres::state::StateTable;
use crate::postgres::PgTarget;
use metrics::RetentionMetrics;
use tables::Tables;

/// What `--retention` and its flags ask for.
#[derive(Debug, Clone)]
pub struct RetentionSettings {
    /// Rows older than this go; None: nothing is deleted (`--partitions-ahead` alone).
    pub keep: Option<Duration>,
    pub batch_size: usize,
    pub interval: Duration,
    pub time_column: String,
    pub partitions_ahead: u32,
}

/// The outbox retention works on, and where walrelay keeps its books.
pub struct Retained {
    pub pg: PgTarget,
    pub slot: String,
    pub publication: String,
    pub state_table: StateTable,
    pub tables: Vec<TableName>,
}

/// Where walrelay keeps its books on the slot: retention's floor (the
/// slot's creation) is read there.
pub struct Books<'a> {
    pub publication: &'a str,
    pub slot: &'a str,
    pub state_table: &'a StateTable,
}

impl Books<'_> {
    /// The floor for the partitions whose owner matters; a record that
    /// cannot be read (the role's rights on the state table are the relay's
    /// to report) counts every partition.
    async fn floor(&self, client: &Client) -> catalog::Floor {
        match self
            .state_table
            .peek(client, self.publication, self.slot)
            .await
        {
            Ok(state) => match state.and_then(|s| s.retention_floor()) {
                Some(since) => catalog::Floor::Since(since),
                None => catalog::Floor::FirstStart,
            },
            Err(_) => catalog::Floor::Unknown,
        }
    }
}

/// How often a plan waiting for confirmation looks again.
const POLL: Duration = Duration::from_secs(1);

/// What one snapshot picked, waiting for its rows' events to be confirmed.
struct Plan {
    /// `pg_current_wal_insert_lsn()` read in the snapshot.
    l0: Lsn,
    made: Instant,
    rows: Vec<rows::Picked>,
    partitions: Vec<partitions::Droppable>,
    /// A table had more old rows than one plan takes.
    full: bool,
}

/// Runs until the relay stops. A bad setting (a missing column, a right
/// the role lacks, a partition scheme that cannot be inferred) stops
/// walrelay through `fatal` at start; a pass that fails is logged, counted
/// and tried again at the next one.
pub async fn run(
    target: Retained,
    settings: RetentionSettings,
    metrics: Metrics,
    fatal: mpsc::Sender<Error>,
) {
    let m = RetentionMetrics::register(&metrics);
    let tables = tables::Postgres::new(target, settings.clone(), m.clone());
    retain(tables, settings, metrics, m, fatal).await
}

/// Retention's task over any tables: Postgres's (`run`), or scripted ones
/// on paused time in the timer tests.
async fn retain(
    tables: impl Tables,
    settings: RetentionSettings,
    metrics: Metrics,
    m: RetentionMetrics,
    fatal: mpsc::Sender<Error>,
) {
    let mut task = Task {
        tables,
        settings,
        metrics,
        m,
        plan: None,
        next_pass: Instant::now(),
    };
    let mut checked = false;
    loop {
        let result = if checked {
            task.tick().await
        } else {
            task.tables.start().await
        };
        match result {
            Ok(()) if !checked => {
                checked = true;
                continue;
            }
            Ok(()) => {}
            Err(e) if !checked && !e.is_transient() => {
                let _ = fatal
                    .send(Error::permanent(format!("outbox retention: {e}")).with_source(e))
                    .await;
                return;
            }
            Err(e) => {
                task.m.errors.inc();
                task.tables.disconnect();
                if checked {
                    error!(error = %e.report(), "outbox retention pass failed; trying again at the next one");
                } else {
                    warn!(error = %e.report(), "outbox retention cannot start yet; trying again");
                }
                tokio::time::sleep(task.settings.interval).await;
                continue;
            }
        }
        tokio::time::sleep(task.pause()).await;
    }
}

/// When passes run and plans are looked at again; what they do is `T`'s.
struct Task<T> {
    tables: T,
    settings: RetentionSettings,
    metrics: Metrics,
    m: RetentionMetrics,
    plan: Option<Plan>,
    next_pass: Instant,
}

/// What `walrelay check` says of retention: the checks its start makes
/// (the tables, the time column, everything the role lacks, all at once,
/// the partition scheme for `--partitions-ahead`), changing nothing. The
/// guard is `postgres.guard`'s to report.
pub async fn check(
    client: &Client,
    tables: &[TableName],
    books: &Books<'_>,
    settings: &RetentionSettings,
) -> Result<String> {
    let outboxes = catalog::inspect(client, tables, settings).await?;
    let floor = books.floor(client).await;
    let lacks = catalog::lacks(client, tables, settings, books.publication, &floor).await?;
    if let Some(refused) = catalog::refusal(&lacks) {
        return Err(refused);
    }
    let mut said = Vec::new();
    for outbox in &outboxes {
        let how = match (outbox.partitioned, &outbox.default) {
            (false, _) => "deletes its rows".to_string(),
            (true, Some(default)) => format!("drops its partitions, deletes rows of {default}"),
            (true, None) => "drops its partitions".to_string(),
        };
        let mut line = format!("{}: {how}", outbox.table);
        if settings.partitions_ahead > 0 {
            let scheme = ahead::scheme(client, outbox).await?;
            line.push_str(&format!(
                "; makes partitions {}.{}<{}> of {} ahead",
                scheme.schema, scheme.prefix, scheme.format, scheme.width
            ));
        }
        said.push(line);
    }
    Ok(said.join("; "))
}

/// What `--retention` lacks without the guard, or None when it may run.
/// One decision for `run` (refused before anything is created) and for
/// `walrelay check` (`postgres.guard` fails with the same words).
///
/// Why the guard is required: the outbox rows are the only copy of an
/// event Kafka never got, and step 3 of the rule above needs the outbox
/// published from the session's start to past L0. The watchdog reads the
/// catalog only every --watchdog-interval, so a publication's `publish`
/// switched off and on again between two reads, or the outbox taken out of
/// the publication and put back, leaves nothing to see: rows written
/// meanwhile never reach the slot, the slot is confirmed past them, and a
/// pass would delete them. The guard writes every such change into the
/// WAL, where the stream meets it at its exact position and stops walrelay
/// before confirming past it.
pub const GUARD_FIX: &str = "run sql/walrelay_guard.sql once as a superuser (docs/operations.md, \
     \"The guard\"), or leave out --retention";

pub fn guard_problem(settings: &RetentionSettings, guard_installed: bool) -> Option<String> {
    if settings.keep.is_none() || guard_installed {
        return None;
    }
    Some(
        "--retention deletes outbox rows only with proof that their events reached Kafka, and \
         that proof needs the guard: without it, a publication switched off and on again (or \
         the outbox taken out of it and put back) between two watchdog checks loses the rows \
         written meanwhile, and retention would delete the only copy. Install the guard (a \
         superuser runs sql/walrelay_guard.sql once in this database, PostgreSQL 14 or later; \
         docs/operations.md, \"The guard\"), or leave out --retention"
            .to_string(),
    )
}

/// What `run` checks before it creates a publication or a slot: the time
/// column of every table is a timestamptz (module doc, "The time column is
/// a timestamptz"), and then nothing retention needs is missing: the
/// guard, and every right and partition ownership `catalog::lacks` finds,
/// refused in one message that names them all, each with its statement.
///
/// A partition a DBA made that walrelay does not own is refused here
/// rather than skipped: skipped, it would stay forever while the table
/// grows. One made while walrelay runs, which no start could see, is
/// reported by the pass that cannot drop it (`tables::Postgres::drop_partitions`).
pub async fn check_before_start(
    client: &Client,
    tables: &[TableName],
    books: &Books<'_>,
    settings: &RetentionSettings,
) -> Result<()> {
    if let Some((detail, fix)) = catalog::time_columns(client, tables, settings).await? {
        return Err(Error::permanent(format!("outbox retention: {detail}: {fix}")).with_fix(fix));
    }
    let floor = books.floor(client).await;
    let publication = books.publication;
    let mut lacks = catalog::lacks(client, tables, settings, publication, &floor).await?;
    let installed = crate::postgres::guard::installed(client).await?;
    if let Some(problem) = guard_problem(settings, installed) {
        if lacks.is_empty() {
            return Err(Error::permanent(problem).with_fix(GUARD_FIX));
        }
        lacks.push(catalog::Lack {
            what: problem,
            fix: format!("For the guard, {GUARD_FIX}."),
        });
    }
    match catalog::refusal(&lacks) {
        Some(refused) => Err(refused),
        None => Ok(()),
    }
}

/// For `walrelay check`: why a time column cannot be retention's, and the
/// fix; None when every one is a timestamptz.
pub async fn time_column_problem(
    client: &Client,
    tables: &[TableName],
    settings: &RetentionSettings,
) -> Result<Option<(String, String)>> {
    catalog::time_columns(client, tables, settings).await
}

impl<T: Tables> Task<T> {
    /// How long to wait before the next tick.
    fn pause(&self) -> Duration {
        let until_pass = self.next_pass.saturating_duration_since(Instant::now());
        match &self.plan {
            Some(_) => until_pass.min(POLL),
            None => until_pass,
        }
    }

    /// Deletes what a waiting plan picked once it is confirmed; at each
    /// interval, a new plan, partitions ahead and the oldest row's age.
    async fn tick(&mut self) -> Result<()> {
        if self.plan.is_some() {
            self.settle().await?;
        }
        if Instant::now() < self.next_pass {
            return Ok(());
        }
        self.next_pass = Instant::now() + self.settings.interval;
        if self.settings.partitions_ahead > 0 {
            self.tables.make_ahead().await?;
        }
        if let (None, Some(keep)) = (&self.plan, self.settings.keep) {
            self.plan = self.tables.pick(keep).await?;
            if self.plan.is_none() {
                // Nothing past the retention: nothing stuck either.
                self.m.partitions_stuck.set(0.0);
            }
            self.settle().await?;
        }
        let age = self.tables.oldest_row_age().await?;
        self.m.oldest_row_age.set(age);
        Ok(())
    }

    /// Carries out the plan once its rows' events are confirmed.
    async fn settle(&mut self) -> Result<()> {
        let Some(plan) = &self.plan else {
            return Ok(());
        };
        let l0 = plan.l0;
        let verified = Lsn(self.metrics.outbox_verified());
        let confirmed = self.tables.confirmed().await?;
        if confirmed.is_none_or(|c| c < l0) || verified < l0 {
            let waited = self
                .plan
                .as_ref()
                .map_or(0.0, |p| p.made.elapsed().as_secs_f64());
            self.m.waiting.set(waited);
            return Ok(());
        }
        // Dropped since start-up: no proof, nothing deleted (the plan waits).
        let installed = self.tables.guard_installed().await?;
        if let Some(problem) = guard_problem(&self.settings, installed) {
            return Err(Error::permanent(format!(
                "the guard was removed: {problem}"
            )));
        }
        let plan = self.plan.take().expect("checked above");
        self.m.waiting.set(0.0);
        self.tables.carry_out(&plan).await?;
        if plan.full {
            // More old rows wait: the next plan at once.
            self.next_pass = Instant::now();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
