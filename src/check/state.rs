//! `walrelay check` on walrelay's memory of the slot: whether the state
//! table can be used, and what `run` would decide about the slot and the
//! outbox. The decision is `state::decide`'s, the one `run` acts on, so the
//! two cannot disagree.

use tokio_postgres::Client;

use super::Check;
use crate::config::{Settings, Source};
use crate::lifecycle::snapshot::{self, Step};
use crate::postgres::publication;
use crate::postgres::setup;
use crate::postgres::snapshot_lock;
use crate::postgres::state::decide::{decide, Observed, SlotPlan};
use crate::postgres::state::OutboxIdentity;

/// The state check, and the plan for the slot when `run` would start.
pub async fn check(client: &Client, settings: &Settings) -> (Check, Option<SlotPlan>) {
    const NAME: &str = "postgres.state";
    let table = &settings.state_table;
    // Where run reads and writes it: the primary, when --pg-url is a standby.
    let route = settings.state_route();
    let state = match route.client(client).await {
        Ok(state) => state,
        Err(e) => return (Check::from_error(NAME, &e), None),
    };
    let stored = match table
        .peek(&state, &settings.publication, &settings.slot)
        .await
    {
        Ok(stored) => stored,
        Err(e) => return (Check::from_error(NAME, &e), None),
    };
    let usable = match usable(&state, settings).await {
        Ok(usable) => usable,
        Err(e) => return (Check::from_error(NAME, &e), None),
    };
    if let Some(problem) = usable {
        return (Check::fail(NAME, problem, table.fix()), None);
    }
    let observed = match observe(client, settings).await {
        Ok(observed) => observed,
        Err(e) => return (Check::from_error(NAME, &e), None),
    };
    let published = settings.published();
    let verdict = decide(
        &Observed {
            slot: &settings.slot,
            stored: stored.as_ref(),
            outbox: &observed.outbox,
            settings: &published,
            slot_exists: observed.slot_exists,
            wal_now: observed.wal_now,
        },
        settings.allowed,
    );
    match verdict {
        Err(e) => (Check::from_error(NAME, &e), None),
        Ok(verdict) => {
            let mut detail = match &stored {
                Some(s) if s.created.is_some() => format!(
                    "{table} remembers slot {:?}: last delivered position {}, outbox last found \
                     intact at {}",
                    settings.slot,
                    s.last_delivered(),
                    s.last_verified()
                ),
                _ => format!(
                    "{table} has no record of slot {:?}: a first start",
                    settings.slot
                ),
            };
            if state.primary().is_some() {
                detail.push_str(" (on the primary, --pg-primary-url)");
            }
            for change in &verdict.accepted {
                detail.push_str(&format!("; accepted by a flag: {change}"));
            }
            if let Some(plan) = &settings.snapshot {
                let record = match table.peek_snapshot(client, &settings.slot).await {
                    Ok(record) => record,
                    Err(e) => return (Check::from_error(NAME, &e), None),
                };
                let step = snapshot::step(record.as_ref(), observed.slot_exists);
                if matches!(step, Step::Take | Step::Redo(_)) {
                    if let Err(e) = snapshot::check_rows(client, settings, plan).await {
                        return (Check::from_error(NAME, &e), None);
                    }
                }
                match step {
                    Step::Refuse => {
                        let refusal = snapshot::slot_exists_error(settings, plan);
                        return (
                            Check::fail(NAME, refusal.to_string(), "follow the steps above"),
                            None,
                        );
                    }
                    Step::Take => detail.push_str(
                        "; the first start publishes the rows --snapshot-where selects, then \
                         streams",
                    ),
                    Step::Redo(at) => {
                        // Under way on another replica, or abandoned: only
                        // the lock's holder tells them apart, as for run.
                        match snapshot_lock::holder(client, &settings.slot).await {
                            Ok(Some(holder)) => detail.push_str(&format!(
                                "; the snapshot begun at {at} is being taken now by {holder}: \
                                 run waits as a standby until it is done"
                            )),
                            Ok(None) => detail.push_str(&format!(
                                "; the snapshot begun at {at} was not finished and nothing \
                                 takes it now: run publishes the rows --snapshot-where \
                                 selects again before it streams"
                            )),
                            Err(e) => return (Check::from_error(NAME, &e), None),
                        }
                    }
                    Step::Done => detail.push_str(
                        "; the slot's snapshot was taken when it was created (--snapshot-where \
                         has nothing more to do)",
                    ),
                }
            }
            (Check::pass(NAME, detail), Some(verdict.slot))
        }
    }
}

/// Why this role cannot use the state table, if it cannot.
async fn usable(
    client: &Client,
    settings: &Settings,
) -> Result<Option<String>, crate::error::Error> {
    let table = &settings.state_table.0;
    let row = client
        .query_one(
            "SELECT to_regclass($1) IS NOT NULL, \
                    CASE WHEN to_regclass($1) IS NOT NULL THEN \
                      has_table_privilege($1, 'SELECT') AND has_table_privilege($1, 'INSERT') \
                      AND has_table_privilege($1, 'UPDATE') END, \
                    EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $2 \
                            AND has_schema_privilege(oid, 'CREATE'))",
            &[&table.quoted(), &table.schema],
        )
        .await
        .map_err(|e| crate::postgres::sql_error("cannot read the state table's privileges", e))?;
    let (exists, rights, can_create): (bool, Option<bool>, bool) =
        (row.get(0), row.get(1), row.get(2));
    Ok(match (exists, rights) {
        (true, Some(true)) => None,
        (true, _) => Some(format!(
            "the state table {table} exists, but this role may not read and write it"
        )),
        (false, _) if can_create => None,
        (false, _) => Some(format!(
            "the state table {table} does not exist and this role may not create it; without \
             it walrelay cannot tell a lost slot from a first start, so run refuses to start"
        )),
    })
}

struct Seen {
    outbox: Vec<OutboxIdentity>,
    slot_exists: bool,
    wal_now: crate::postgres::lsn::Lsn,
}

/// The outbox tables, the slot and the WAL position, as `run` reads them.
async fn observe(client: &Client, settings: &Settings) -> Result<Seen, crate::error::Error> {
    let wal_now = setup::current_wal_lsn(client).await?;
    let mut outbox = Vec::new();
    if settings.source == Source::Table {
        for table in &settings.tables {
            let binding = publication::inspect(client, &settings.publication, table).await?;
            // A table run would refuse is reported by the publication check.
            outbox.extend(binding.identity(table));
        }
    }
    let slot_exists = crate::postgres::slot::read(client, &settings.slot)
        .await?
        .is_some();
    Ok(Seen {
        outbox,
        slot_exists,
        wal_now,
    })
}
