//! The outbox tables as retention's task sees them, behind a seam:
//! `Postgres` works on them over retention's own connection; the timer
//! tests (`retention/tests.rs`) script them on paused tokio time. When a
//! pass runs, when a plan is looked at again and what a failure costs stay
//! in the task (`retention::retain`), the same for both.

use std::time::Duration;

use tokio::time::Instant;
use tokio_postgres::Client;
use tracing::{error, info, warn};

use super::catalog::{self, Outbox};
use super::metrics::RetentionMetrics;
use super::{
    ahead, check_before_start, partitions, rows, Books, Plan, Retained, RetentionSettings,
};
use crate::error::{Error, Result};
use crate::postgres::lsn::Lsn;
use crate::postgres::{setup, sql_error, PgTarget};

/// Rows picked in one snapshot at most, per table: the keys stay in memory
/// until the rows' events are confirmed.
const BATCHES_PER_PLAN: usize = 100;
/// Every statement of retention ends within this.
const STATEMENT_TIMEOUT: &str = "30s";
/// A statement of retention waits at most this for a lock, so it never
/// queues the outbox's writers behind it for long (a CREATE or DETACH of a
/// partition, which needs the outbox to itself, waits far less:
/// `ahead::PARTITION_LOCK_TIMEOUT`).
const LOCK_TIMEOUT: &str = "1s";

/// The task calls its tables through generics only, so the `async fn`s
/// here need no `Send` bound.
#[allow(async_fn_in_trait)]
pub trait Tables {
    /// The first pass: what the tables are, and whether retention may do
    /// what it is asked to there. An error that is not transient stops
    /// walrelay.
    async fn start(&mut self) -> Result<()>;

    /// Makes the partitions `--partitions-ahead` asks for.
    async fn make_ahead(&mut self) -> Result<()>;

    /// A plan from one snapshot, or None when nothing may go yet.
    async fn pick(&mut self, keep: Duration) -> Result<Option<Plan>>;

    /// The slot's confirmed position; None when there is no slot.
    async fn confirmed(&mut self) -> Result<Option<Lsn>>;

    /// Whether the guard is installed.
    async fn guard_installed(&mut self) -> Result<bool>;

    /// Deletes the plan's rows and drops its partitions: its events are
    /// confirmed.
    async fn carry_out(&mut self, plan: &Plan) -> Result<()>;

    /// The age of the oldest row left, in seconds (0 when empty).
    async fn oldest_row_age(&mut self) -> Result<f64>;

    /// Drops the connection after an error: the next pass opens another.
    fn disconnect(&mut self);
}

/// The outbox tables in Postgres.
pub struct Postgres {
    target: Retained,
    settings: RetentionSettings,
    m: RetentionMetrics,
    client: Option<Client>,
    outboxes: Vec<Outbox>,
    /// Rows from before the slot were reported once.
    floor_told: bool,
    /// A partition ahead left for a later pass was reported (until one is
    /// made again).
    ahead_blocked_told: bool,
}

impl Postgres {
    pub fn new(target: Retained, settings: RetentionSettings, m: RetentionMetrics) -> Self {
        Postgres {
            target,
            settings,
            m,
            client: None,
            outboxes: Vec::new(),
            floor_told: false,
            ahead_blocked_told: false,
        }
    }
}

impl Tables for Postgres {
    async fn start(&mut self) -> Result<()> {
        let settings = self.settings.clone();
        let tables = self.target.tables.clone();
        let client = connection(&mut self.client, &self.target.pg).await?;
        // The same refusal as `run`'s before it created anything, whichever
        // of the two comes first.
        let books = Books {
            publication: &self.target.publication,
            slot: &self.target.slot,
            state_table: &self.target.state_table,
        };
        check_before_start(client, &tables, &books, &settings).await?;
        self.outboxes = catalog::inspect(client, &tables, &settings).await?;
        if settings.partitions_ahead > 0 {
            for outbox in &self.outboxes {
                ahead::scheme(client, outbox).await?;
            }
        }
        info!(
            retention = ?settings.keep,
            interval = ?settings.interval,
            partitions_ahead = settings.partitions_ahead,
            tables = %tables.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
            "outbox retention started"
        );
        Ok(())
    }

    /// A partition that another session's lock keeps from being made is
    /// left for the next pass: said once, and loudly when the outbox would
    /// run out of partitions before then.
    async fn make_ahead(&mut self) -> Result<()> {
        let (ahead, soon) = (self.settings.partitions_ahead, self.settings.interval);
        let client = connection(&mut self.client, &self.target.pg).await?;
        let mut blocked = false;
        for outbox in &self.outboxes {
            let made = ahead::make(client, outbox, ahead, soon).await?;
            self.m.partitions_created.inc_by(made.made);
            let Some(b) = made.blocked else {
                continue;
            };
            blocked = true;
            self.m.partitions_ahead_blocked.inc();
            if b.running_out {
                warn!(
                    table = %outbox.table,
                    partition = %b.partition,
                    from = %b.from,
                    "--partitions-ahead cannot create the next partition: a transaction holds \
                     a lock on the outbox (see pg_locks); from this time on its rows go to \
                     the DEFAULT partition, or fail without one, until that transaction ends"
                );
            } else if !self.ahead_blocked_told {
                info!(
                    table = %outbox.table,
                    partition = %b.partition,
                    lock_timeout = ahead::PARTITION_LOCK_TIMEOUT,
                    "a transaction holds a lock on the outbox: creating the next partition \
                     would queue the application's writes behind it, so the next pass tries \
                     again"
                );
            }
        }
        self.ahead_blocked_told = blocked;
        Ok(())
    }

    async fn pick(&mut self, keep: Duration) -> Result<Option<Plan>> {
        let floor = self.floor().await?;
        let Some(floor) = floor else {
            return Ok(None);
        };
        let limit = self.settings.batch_size * BATCHES_PER_PLAN;
        let outboxes = self.outboxes.clone();
        let client = connection(&mut self.client, &self.target.pg).await?;
        let blockers = partitions::blockers(client, &outboxes).await?;
        let snapshot = catalog::Snapshot::take(client).await?;
        let mut plan = Plan {
            l0: snapshot.l0,
            made: Instant::now(),
            rows: Vec::new(),
            partitions: Vec::new(),
            full: false,
        };
        for outbox in &outboxes {
            for leaf in outbox.row_leaves() {
                let picked = rows::pick(client, leaf, outbox, keep, &floor, limit).await?;
                plan.full |= picked.keys.len() >= limit;
                if !picked.keys.is_empty() {
                    plan.rows.push(picked);
                }
            }
            plan.partitions
                .extend(partitions::droppable(client, outbox, keep, &floor, &blockers).await?);
        }
        snapshot.end(client).await?;
        if plan.rows.is_empty() && plan.partitions.is_empty() {
            return Ok(None);
        }
        Ok(Some(plan))
    }

    async fn confirmed(&mut self) -> Result<Option<Lsn>> {
        let client = connection(&mut self.client, &self.target.pg).await?;
        catalog::slot_confirmed(client, &self.target.slot).await
    }

    async fn guard_installed(&mut self) -> Result<bool> {
        let client = connection(&mut self.client, &self.target.pg).await?;
        crate::postgres::guard::installed(client).await
    }

    async fn carry_out(&mut self, plan: &Plan) -> Result<()> {
        let batch = self.settings.batch_size;
        let client = connection(&mut self.client, &self.target.pg).await?;
        let mut deleted = 0;
        for picked in &plan.rows {
            deleted += rows::delete(client, picked, batch, &self.m.rows_deleted).await?;
        }
        let dropped = self.drop_partitions(&plan.partitions).await?;
        if deleted > 0 || dropped > 0 {
            info!(
                rows = deleted,
                partitions = dropped,
                confirmed = %plan.l0,
                "outbox retention deleted rows whose events are confirmed"
            );
        }
        Ok(())
    }

    async fn oldest_row_age(&mut self) -> Result<f64> {
        let client = connection(&mut self.client, &self.target.pg).await?;
        catalog::oldest_row_age(client, &self.outboxes).await
    }

    fn disconnect(&mut self) {
        self.client = None;
    }
}

impl Postgres {
    /// The floor: rows from before walrelay created (or first used) the
    /// slot are not retention's to delete. None until it is recorded.
    async fn floor(&mut self) -> Result<Option<String>> {
        let (state_table, publication, slot) = (
            self.target.state_table.clone(),
            self.target.publication.clone(),
            self.target.slot.clone(),
        );
        let client = connection(&mut self.client, &self.target.pg).await?;
        let state = state_table.peek(client, &publication, &slot).await?;
        let Some(created_at) = state.and_then(|s| s.retention_floor()) else {
            return Ok(None);
        };
        if !self.floor_told {
            let outboxes = self.outboxes.clone();
            let client = connection(&mut self.client, &self.target.pg).await?;
            if catalog::any_before(client, &outboxes, &created_at).await? {
                info!(
                    slot = %slot,
                    since = %created_at,
                    "outbox retention keeps the rows from before walrelay first used the slot \
                     (or last accepted an outbox change): it cannot know their events were \
                     delivered; delete them yourself once you know (docs/operations.md, \
                     \"Outbox retention\")"
                );
            }
            self.floor_told = true;
        }
        Ok(Some(created_at))
    }

    /// Drops the plan's partitions. One that cannot be dropped (a DBA made
    /// it, or changed its owner, while walrelay ran) is logged with its fix
    /// and counted as stuck, and the others still go: it must not keep
    /// walrelay's own partitions from being dropped.
    async fn drop_partitions(&mut self, droppable: &[partitions::Droppable]) -> Result<u64> {
        let client = connection(&mut self.client, &self.target.pg).await?;
        let (mut dropped, mut stuck) = (0, 0);
        for partition in droppable {
            match partitions::drop(client, partition).await {
                Ok(true) => {
                    self.m.partitions_dropped.inc();
                    dropped += 1;
                }
                Ok(false) => {}
                // The connection is gone: no partition can go; a new one next pass.
                Err(e) if client.is_closed() => return Err(e),
                Err(e) => {
                    stuck += 1;
                    let fix = partitions::owner_fix(client, partition).await;
                    error!(
                        partition = %partition.partition,
                        table = %partition.root,
                        error = %e.report(),
                        fix = %fix.as_deref().unwrap_or("see the error"),
                        "outbox retention cannot drop a partition past the retention, so it \
                         stays and the outbox grows (walrelay_retention_partitions_stuck); the \
                         other partitions still go"
                    );
                }
            }
        }
        self.m.partitions_stuck.set(stuck as f64);
        Ok(dropped)
    }
}

/// How long opening retention's connection may take: a server that takes
/// the connection but never answers its startup would otherwise hold
/// retention forever, without a failed pass to count or a word in the log,
/// while `walrelay_retention_oldest_row_age_seconds` froze.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Retention's connection, opened (and set up) when there is none.
async fn connection<'a>(client: &'a mut Option<Client>, pg: &PgTarget) -> Result<&'a Client> {
    if client.is_none() {
        let open = async {
            let new = setup::connect(pg).await?;
            new.batch_execute(&format!(
                "SET application_name = 'walrelay retention'; \
                 SET statement_timeout = '{STATEMENT_TIMEOUT}'; \
                 SET lock_timeout = '{LOCK_TIMEOUT}'; \
                 SET idle_in_transaction_session_timeout = '60s'"
            ))
            .await
            .map_err(|e| sql_error("cannot set up retention's connection", e))?;
            Ok::<_, Error>(new)
        };
        let new = tokio::time::timeout(CONNECT_TIMEOUT, open)
            .await
            .unwrap_or_else(|_| {
                Err(Error::transient(format!(
                    "Postgres did not answer retention's connection within {CONNECT_TIMEOUT:?}"
                )))
            })?;
        *client = Some(new);
    }
    Ok(client.as_ref().expect("connected above"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that takes the connection and never answers its startup.
    #[tokio::test(start_paused = true)]
    async fn a_server_that_never_answers_retentions_connection_fails_the_pass_after_30_s() {
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = silent.local_addr().unwrap().port();
        let held = tokio::spawn(async move {
            let (socket, _) = silent.accept().await.unwrap();
            std::future::pending::<()>().await;
            drop(socket);
        });
        let pg = PgTarget::parse(&format!(
            "postgres://walrelay@127.0.0.1:{port}/shop?sslmode=disable"
        ))
        .unwrap();
        let started = Instant::now();
        let mut client = None;
        let error = connection(&mut client, &pg).await.unwrap_err();
        assert!(error.is_transient(), "{error:?}");
        assert!(error.to_string().contains("did not answer"), "{error}");
        assert_eq!(started.elapsed(), CONNECT_TIMEOUT);
        held.abort();
    }
}
