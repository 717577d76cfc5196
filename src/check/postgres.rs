//! The Postgres side of `walrelay check`. Where `run` already checks
//! something at start-up (wal_level, the table's columns), the same
//! function from `postgres::setup` is called.

use tokio_postgres::Client;

use super::Check;
use crate::config::{OnUpdate, Settings, Source};
use crate::postgres::names::{quote_ident, TableName};
use crate::postgres::publication::{self, Binding};
use crate::postgres::state::decide::SlotPlan;
use crate::postgres::{describe_target, setup, slot};
use crate::watchdog::human_bytes;

/// What the catalog says about the outbox table.
struct TableInfo {
    partitioned: bool,
    can_select: bool,
}

pub async fn checks(settings: &Settings) -> Vec<Check> {
    let pg = &settings.pg;
    let mut out = Vec::new();
    let client = match setup::connect(pg).await {
        Ok(client) => {
            out.push(Check::pass(
                "postgres.connect",
                format!("connected to {}", describe_target(&pg.config)),
            ));
            client
        }
        Err(e) => {
            out.push(Check::fail(
                "postgres.connect",
                e.report(),
                "check --pg-url (host, port, database, user, password, sslmode) and that \
                 pg_hba.conf admits this client; the other Postgres checks need a connection",
            ));
            return out;
        }
    };
    match Probe::new(&client, settings).await {
        Ok(probe) => probe.run(&mut out).await,
        Err(e) => out.push(Check::fail(
            "postgres.catalog",
            e.to_string(),
            "grant the role access to the pg_catalog views (it has it by default)",
        )),
    }
    out
}

#[derive(Clone)]
struct Probe<'a> {
    client: &'a Client,
    settings: &'a Settings,
    /// The outbox table being checked (each of `--table` in turn).
    table: &'a TableName,
    version: i32,
    user: String,
    database: String,
    /// The server is a standby (in recovery).
    standby: bool,
}

impl<'a> Probe<'a> {
    async fn new(
        client: &'a Client,
        settings: &'a Settings,
    ) -> Result<Self, tokio_postgres::Error> {
        let row = client
            .query_one(
                "SELECT current_setting('server_version_num')::int, current_user::text, \
                        current_database()::text, pg_is_in_recovery()",
                &[],
            )
            .await?;
        Ok(Probe {
            client,
            settings,
            table: &settings.tables[0],
            version: row.get(0),
            user: row.get(1),
            database: row.get(2),
            standby: row.get(3),
        })
    }

    async fn run(&self, out: &mut Vec<Check>) {
        out.push(match setup::check_wal_level(self.client).await {
            Ok(()) => Check::pass("postgres.wal_level", "wal_level = logical"),
            Err(e) => Check::from_error("postgres.wal_level", &e),
        });
        out.extend(super::standby::checks(self.client, self.settings).await);
        out.push(self.or_fail("postgres.replication_slots", self.slots().await));
        out.push(self.or_fail("postgres.wal_senders", self.wal_senders().await));
        out.push(self.or_fail("postgres.max_slot_wal_keep_size", self.wal_keep().await));
        out.push(self.or_fail("postgres.role", self.role().await));

        match self.settings.source {
            Source::Table => {
                for table in &self.settings.tables {
                    Probe {
                        table,
                        ..self.clone()
                    }
                    .table_checks(out)
                    .await;
                }
                out.push(self.or_fail("postgres.guard", self.guard().await));
            }
            Source::Messages => {
                out.push(match setup::check_messages_supported(self.client).await {
                    Ok(()) => Check::pass(
                        "postgres.messages",
                        "PostgreSQL 14+ streams pg_logical_emit_message",
                    ),
                    Err(e) => Check::from_error("postgres.messages", &e),
                });
                let binding =
                    publication::inspect(self.client, &self.settings.publication, self.table).await;
                out.push(match &binding {
                    Ok(binding) => self.publication_check(None, binding).await,
                    Err(e) => Check::from_error("postgres.publication", e),
                });
            }
        }
        if let Some(retention) = &self.settings.retention {
            let tables = &self.settings.tables;
            let books = crate::retention::Books {
                publication: &self.settings.publication,
                slot: &self.settings.slot,
                state_table: &self.settings.state_table,
            };
            let problem = crate::retention::time_column_problem(self.client, tables, retention);
            out.push(match problem.await {
                Ok(Some((detail, fix))) => Check::fail("postgres.retention", detail, fix),
                Ok(None) => {
                    match crate::retention::check(self.client, tables, &books, retention).await {
                        Ok(detail) => Check::pass("postgres.retention", detail),
                        Err(e) => Check::from_error("postgres.retention", &e),
                    }
                }
                Err(e) => Check::from_error("postgres.retention", &e),
            });
        }
        let (state, plan) = super::state::check(self.client, self.settings).await;
        out.push(state);
        out.push(self.or_fail("postgres.slot", self.slot(plan.as_ref()).await));
        out.push(self.or_fail("postgres.slot_failover", self.failover().await));
    }

    /// The checks of one outbox table: its columns, the role's rights, its
    /// partitioning and its place in the publication.
    async fn table_checks(&self, out: &mut Vec<Check>) {
        let binding =
            publication::inspect(self.client, &self.settings.publication, self.table).await;
        out.push(
            match setup::check_table(
                self.client,
                self.table,
                &self.settings.mapping.column_names(),
            )
            .await
            {
                Ok(()) => Check::pass(
                    "postgres.table",
                    format!(
                        "{} has the mapped columns {}",
                        self.table,
                        self.settings.mapping.column_names().join(", ")
                    ),
                ),
                Err(e) => Check::from_error("postgres.table", &e),
            },
        );
        match (self.table().await, &binding) {
            (Ok(Some(table)), Ok(binding)) => {
                out.push(self.table_select(&table));
                out.push(self.partitioning(&table, binding));
                out.push(self.publication_check(Some(&table), binding).await);
            }
            (Ok(None), _) => {
                for name in [
                    "postgres.table_select",
                    "postgres.partitioning",
                    "postgres.publication",
                ] {
                    out.push(Check::skip(name, "needs the table"));
                }
            }
            (Err(e), _) => out.push(self.query_failed("postgres.table", &e)),
            (_, Err(e)) => out.push(Check::from_error("postgres.publication", e)),
        }
    }

    fn or_fail(&self, name: &'static str, result: Result<Check, tokio_postgres::Error>) -> Check {
        result.unwrap_or_else(|e| self.query_failed(name, &e))
    }

    fn query_failed(&self, name: &'static str, e: &tokio_postgres::Error) -> Check {
        let detail = match e.as_db_error() {
            Some(db) => format!("the query failed: {}", db.message()),
            None => format!("the query failed: {e}"),
        };
        Check::fail(
            name,
            detail,
            format!(
                "let role {} read the pg_catalog views and settings",
                self.user
            ),
        )
    }

    fn slot_name(&self) -> &str {
        &self.settings.slot
    }

    async fn slots(&self) -> Result<Check, tokio_postgres::Error> {
        let row = self
            .client
            .query_one(
                "SELECT current_setting('max_replication_slots')::int, \
                        (SELECT count(*) FROM pg_catalog.pg_replication_slots)::int, \
                        EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots WHERE slot_name = $1)",
                &[&self.slot_name()],
            )
            .await?;
        let (max, used, exists): (i32, i32, bool) = (row.get(0), row.get(1), row.get(2));
        let detail = format!("{used} of max_replication_slots = {max} in use");
        Ok(if exists {
            Check::pass(
                "postgres.replication_slots",
                format!("{detail}; slot {:?} exists", self.slot_name()),
            )
        } else if used < max {
            Check::pass(
                "postgres.replication_slots",
                format!("{detail}; one is free for slot {:?}", self.slot_name()),
            )
        } else {
            Check::fail(
                "postgres.replication_slots",
                format!("{detail}: none is free for slot {:?}", self.slot_name()),
                format!(
                    "raise max_replication_slots (ALTER SYSTEM SET max_replication_slots = {}; \
                     then restart Postgres), or drop a slot nothing uses",
                    max + 1
                ),
            )
        })
    }

    async fn wal_senders(&self) -> Result<Check, tokio_postgres::Error> {
        let row = self
            .client
            .query_one(
                "SELECT current_setting('max_wal_senders')::int, \
                        (SELECT count(*) FROM pg_catalog.pg_stat_activity \
                          WHERE backend_type = 'walsender')::int",
                &[],
            )
            .await?;
        let (max, used): (i32, i32) = (row.get(0), row.get(1));
        let detail = format!("{used} of max_wal_senders = {max} in use");
        Ok(if used < max {
            Check::pass("postgres.wal_senders", detail)
        } else {
            Check::fail(
                "postgres.wal_senders",
                format!("{detail}: walrelay's replication connection would be refused"),
                format!(
                    "raise max_wal_senders (ALTER SYSTEM SET max_wal_senders = {}; then restart \
                     Postgres)",
                    max + 2
                ),
            )
        })
    }

    async fn wal_keep(&self) -> Result<Check, tokio_postgres::Error> {
        const FIX: &str = "set max_slot_wal_keep_size (e.g. ALTER SYSTEM SET \
             max_slot_wal_keep_size = '10GB'; SELECT pg_reload_conf();) so a stuck slot cannot \
             fill the disk; see docs/operations.md, \"Why set max_slot_wal_keep_size\"";
        if self.version < 130000 {
            return Ok(Check::warn(
                "postgres.max_slot_wal_keep_size",
                "PostgreSQL before 13 keeps WAL for a slot without limit",
                "watch the slot lag (walrelay_slot_lag_bytes) closely, or upgrade",
            ));
        }
        let row = self
            .client
            .query_one(
                "SELECT setting::bigint FROM pg_catalog.pg_settings \
                 WHERE name = 'max_slot_wal_keep_size'",
                &[],
            )
            .await?;
        let mb: i64 = row.get(0);
        Ok(if mb < 0 {
            Check::warn(
                "postgres.max_slot_wal_keep_size",
                "max_slot_wal_keep_size = -1: a slot that stops moving keeps WAL until the disk is full",
                FIX,
            )
        } else {
            Check::pass(
                "postgres.max_slot_wal_keep_size",
                format!(
                    "max_slot_wal_keep_size = {}",
                    human_bytes(mb as u64 * 1024 * 1024)
                ),
            )
        })
    }

    /// The event trigger that marks publication changes in the WAL
    /// (`postgres::guard`), as `run` reads it.
    async fn guard(&self) -> Result<Check, tokio_postgres::Error> {
        let installed = match crate::postgres::guard::installed(self.client).await {
            Ok(installed) => installed,
            Err(e) => return Ok(Check::from_error("postgres.guard", &e)),
        };
        // `run` refuses --retention without it: the same decision.
        let retention = self.settings.retention.as_ref();
        if let Some(problem) = retention.and_then(|r| crate::retention::guard_problem(r, installed))
        {
            return Ok(Check::fail(
                "postgres.guard",
                problem,
                crate::retention::GUARD_FIX,
            ));
        }
        if self.version < 140000 {
            return Ok(Check::warn(
                "postgres.guard",
                "PostgreSQL before 14 cannot stream the guard's messages",
                "upgrade to see publication changes at their exact WAL position",
            ));
        }
        Ok(if installed {
            Check::pass(
                "postgres.guard",
                "the guard's event triggers are installed: a change to how the outbox is \
                 published stops walrelay at its exact WAL position",
            )
        } else {
            Check::warn(
                "postgres.guard",
                "the guard is not installed: a change to the outbox's publication is found \
                 only by the checks at start-up and every --watchdog-interval, and one undone \
                 between two checks (publish switched off and on) is not found at all",
                "run sql/walrelay_guard.sql once as a superuser (docs/operations.md, \"The guard\")",
            )
        })
    }

    async fn role(&self) -> Result<Check, tokio_postgres::Error> {
        let row = self
            .client
            .query_one(
                "SELECT rolreplication, rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user",
                &[],
            )
            .await?;
        let (replication, superuser): (bool, bool) = (row.get(0), row.get(1));
        Ok(if replication || superuser {
            Check::pass(
                "postgres.role",
                format!(
                    "role {} has {}",
                    self.user,
                    if superuser {
                        "SUPERUSER"
                    } else {
                        "REPLICATION"
                    }
                ),
            )
        } else {
            Check::fail(
                "postgres.role",
                format!(
                    "role {} has no REPLICATION attribute: it cannot stream from a slot",
                    self.user
                ),
                crate::postgres::replication_grant(&self.user),
            )
        })
    }

    async fn table(&self) -> Result<Option<TableInfo>, tokio_postgres::Error> {
        let row = self
            .client
            .query_opt(
                "SELECT c.relkind = 'p', has_table_privilege(c.oid, 'SELECT') \
                 FROM pg_catalog.pg_class c \
                 JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')",
                &[&self.table.schema, &self.table.name],
            )
            .await?;
        Ok(row.map(|r| TableInfo {
            partitioned: r.get(0),
            can_select: r.get(1),
        }))
    }

    fn table_select(&self, table: &TableInfo) -> Check {
        if table.can_select {
            Check::pass(
                "postgres.table_select",
                format!("role {} may SELECT from {}", self.user, self.table),
            )
        } else {
            // Logical decoding checks no table rights: `run` streams without
            // it (tests/check.rs runs both), so this is no failure.
            Check::warn(
                "postgres.table_select",
                format!(
                    "role {} may not SELECT from {}; walrelay run streams without it, but \
                     the role cannot read the rows it publishes (docs/security.md grants it)",
                    self.user, self.table
                ),
                format!(
                    "as the table's owner: GRANT SELECT ON {} TO {};",
                    self.table.quoted(),
                    quote_ident(&self.user)
                ),
            )
        }
    }

    async fn publication_check(&self, table: Option<&TableInfo>, binding: &Binding) -> Check {
        let name = &self.settings.publication;
        if binding.publication.is_none() && self.standby {
            let tables = match self.settings.source {
                Source::Table => &self.settings.tables[..],
                Source::Messages => &[],
            };
            return Check::fail(
                "postgres.publication",
                format!(
                    "publication {name:?} is absent, and a standby cannot create one: walrelay \
                     run refuses to start"
                ),
                format!(
                    "on the primary, as the table's owner: {};",
                    publication::create_sql(
                        name,
                        tables,
                        self.version,
                        self.settings.on_update != crate::config::OnUpdate::Warn,
                    )
                ),
            );
        }
        if binding.publication.is_none() {
            // `run` creates it, if this role may: the same decision.
            let tables = match table {
                Some(_) => std::slice::from_ref(self.table),
                None => &[],
            };
            let updates = self.settings.on_update != OnUpdate::Warn;
            let refusal = publication::creation_refusal(self.client, name, tables, updates).await;
            return match refusal {
                Ok(None) => Check::pass(
                    "postgres.publication",
                    format!("publication {name:?} is absent; walrelay run creates it"),
                ),
                Ok(Some((problem, fix))) => Check::fail("postgres.publication", problem, fix),
                Err(e) => Check::from_error("postgres.publication", &e),
            };
        }
        if table.is_none() {
            return Check::pass(
                "postgres.publication",
                format!("publication {name:?} exists"),
            );
        }
        // The same reading of the catalog that run and the watchdog judge.
        let updates = binding.publication.is_some_and(|p| p.updates);
        let problem = binding.problem(name, self.table, None).or_else(|| {
            (self.settings.on_update != OnUpdate::Warn)
                .then(|| publication::updates_problem(name, updates))
                .flatten()
        });
        match problem {
            Some(problem) => Check::fail("postgres.publication", problem.to_string(), problem.fix),
            None => Check::pass(
                "postgres.publication",
                format!("publication {name:?} publishes inserts into {}", self.table),
            ),
        }
    }

    fn partitioning(&self, table: &TableInfo, binding: &Binding) -> Check {
        if !table.partitioned {
            return Check::pass(
                "postgres.partitioning",
                format!("{} is not partitioned", self.table),
            );
        }
        let name = &self.settings.publication;
        if self.version < 130000 {
            return Check::fail(
                "postgres.partitioning",
                format!(
                    "{} is partitioned, and PostgreSQL before 13 cannot publish it through its root",
                    self.table
                ),
                "upgrade to PostgreSQL 13 or later, or use a plain outbox table",
            );
        }
        match binding.publication {
            None => Check::pass(
                "postgres.partitioning",
                format!(
                    "{} is partitioned; walrelay run creates publication {name:?} with \
                     publish_via_partition_root = true",
                    self.table
                ),
            ),
            Some(p) if p.via_root => Check::pass(
                "postgres.partitioning",
                format!(
                    "{} is partitioned and publication {name:?} publishes via the partition root",
                    self.table
                ),
            ),
            Some(_) => Check::fail(
                "postgres.partitioning",
                format!(
                    "{} is partitioned but publication {name:?} publishes its partitions under \
                     their own names, so a partition attached later could be missed",
                    self.table
                ),
                format!(
                    "ALTER PUBLICATION {} SET (publish_via_partition_root = true);",
                    quote_ident(name)
                ),
            ),
        }
    }

    /// The slot; for an absent one, `plan` is what run would do
    /// (`postgres.state`), None when run would refuse to start.
    async fn slot(&self, plan: Option<&SlotPlan>) -> Result<Check, tokio_postgres::Error> {
        let name = self.slot_name();
        let report = match slot::read(self.client, name).await {
            Ok(r) => r,
            Err(e) => {
                return Ok(Check::from_error("postgres.slot", &e));
            }
        };
        let Some(r) = report else {
            return Ok(match plan {
                Some(SlotPlan::CreateFirst) => Check::pass(
                    "postgres.slot",
                    format!("slot {name:?} is absent; walrelay run creates it with pgoutput"),
                ),
                Some(SlotPlan::CreateReplacing { gap_from }) => Check::warn(
                    "postgres.slot",
                    format!(
                        "slot {name:?} is missing; with --recreate-missing-slot walrelay run \
                         creates a new one, and events after LSN {gap_from} are not delivered"
                    ),
                    "publish those events again (docs/operations.md, \"Publishing events again\")",
                ),
                _ => Check::fail(
                    "postgres.slot",
                    format!("slot {name:?} is absent, and walrelay run would not create it"),
                    "see postgres.state",
                ),
            });
        };
        let drop_fix = format!(
            "choose another --slot, or drop the old slot once nothing needs it \
             (SELECT pg_drop_replication_slot('{name}');)"
        );
        if r.plugin.as_deref() != Some("pgoutput") {
            return Ok(Check::fail(
                "postgres.slot",
                format!(
                    "slot {name:?} exists with output plugin {}; walrelay needs a logical \
                     pgoutput slot",
                    r.plugin.as_deref().unwrap_or("none (a physical slot)")
                ),
                drop_fix,
            ));
        }
        if r.database.as_deref() != Some(self.database.as_str()) {
            return Ok(Check::fail(
                "postgres.slot",
                format!(
                    "slot {name:?} belongs to database {}, not {}",
                    r.database.as_deref().unwrap_or("?"),
                    self.database
                ),
                "point --pg-url at that database or choose another --slot",
            ));
        }
        let status = r.wal_status.as_deref().unwrap_or("unknown");
        let held = match r.active_pid {
            Some(pid) => format!("; held by pid {pid} (this walrelay would wait as a standby)"),
            None => String::new(),
        };
        let detail = format!(
            "slot {name:?}: pgoutput, wal_status = {status}, lag {}{held}",
            human_bytes(r.lag_bytes.max(0) as u64)
        );
        Ok(match status {
            "lost" => Check::fail(
                "postgres.slot",
                detail,
                "the slot can never resume: see docs/operations.md, \"The slot is lost\"",
            ),
            "unreserved" => Check::warn(
                "postgres.slot",
                detail,
                "Postgres is about to remove WAL the slot needs: start walrelay now, or raise \
                 max_slot_wal_keep_size",
            ),
            _ => Check::pass("postgres.slot", detail),
        })
    }

    async fn failover(&self) -> Result<Check, tokio_postgres::Error> {
        if self.standby {
            return Ok(Check::skip(
                "postgres.slot_failover",
                "a slot on a standby is never a failover slot (PostgreSQL refuses it there); it \
                 survives the standby's promotion",
            ));
        }
        if self.version < 170000 {
            return Ok(Check::skip(
                "postgres.slot_failover",
                format!(
                    "PostgreSQL {} has no slot failover (17+)",
                    self.version / 10000
                ),
            ));
        }
        let name = self.slot_name();
        let row = self
            .client
            .query_opt(
                "SELECT failover FROM pg_catalog.pg_replication_slots WHERE slot_name = $1",
                &[&name],
            )
            .await?;
        let sync = "and set sync_replication_slots = on (with hot_standby_feedback and a \
                    primary_slot_name) on the standbys";
        Ok(match row.map(|r| r.get::<_, bool>(0)) {
            Some(true) => Check::pass(
                "postgres.slot_failover",
                format!("slot {name:?} has failover = true"),
            ),
            Some(false) => Check::warn(
                "postgres.slot_failover",
                format!("slot {name:?} has failover = false: a promoted standby will not have it"),
                format!(
                    "while walrelay is stopped: psql \"dbname={} replication=database\" -c \
                     'ALTER_REPLICATION_SLOT {name} (FAILOVER true)' {sync}",
                    self.database
                ),
            ),
            None if self.settings.failover_slot => Check::pass(
                "postgres.slot_failover",
                format!(
                    "slot {name:?} is absent; walrelay run creates it with failover = true \
                     ({sync} for a standby to keep it)"
                ),
            ),
            None => Check::warn(
                "postgres.slot_failover",
                format!(
                    "slot {name:?} is absent and walrelay run creates it with failover = false \
                     (--failover-slot=false)"
                ),
                format!("drop --failover-slot=false, {sync}"),
            ),
        })
    }
}
