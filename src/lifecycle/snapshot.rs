//! The first start's snapshot (`run --snapshot-where SQL`): the outbox rows
//! that predate the slot, published before anything is streamed, with
//! neither a gap nor an overlap between the two.
//!
//! The start that creates the slot creates it on the replication
//! connection with an exported snapshot. Every transaction committed
//! before the slot's consistent point is visible in that snapshot, every
//! later one comes through the slot. A second SQL session imports the
//! snapshot (`SET TRANSACTION SNAPSHOT`) before the replication connection
//! runs anything else, and the replication connection closes: the slot
//! stays at its consistent point, confirmed by nobody, while the session
//! reads the matching rows through `rows` and publishes them through the
//! relay's publisher (`sender`). Only once Kafka has acknowledged every
//! one does the relay open a streaming session, from the consistent point:
//! each key's snapshot rows are in Kafka before its first streamed event.
//!
//! The state table records the snapshot as `taking` before the slot is
//! created and `done` at the end. A start that finds the slot with a
//! snapshot still `taking` (walrelay stopped or crashed part-way) cannot
//! import that snapshot again: it publishes the rows the predicate selects
//! now, then streams from the consistent point, which nothing confirmed.
//!
//! While the snapshot is published the slot is inactive, so `taking` alone
//! cannot tell a snapshot under way from one abandoned: one walrelay at a
//! time takes or redoes it, holding the slot's snapshot lock
//! (`postgres::snapshot_lock`) until its stream has started. Another that
//! starts meanwhile waits as a standby, and decides again, from the record
//! and the slot as they are then, once it holds the lock.

use tokio::sync::watch;
use tokio_postgres::Client;
use tracing::{error, info, warn};

use super::order;
use super::plan::Plan;
use super::rows::{self, mapped_tables, RowCursor};
use super::sender::RowSender;
use crate::config::{Settings, SnapshotPlan};
use crate::delivery::progress::Ticket;
use crate::error::{Error, Kind, Result};
use crate::kafka::producer::KafkaSink;
use crate::metrics::meter::Meter;
use crate::metrics::Metrics;
use crate::postgres::lsn::Lsn;
use crate::postgres::replication::ReplicationConnection;
use crate::postgres::snapshot_lock::SnapshotLock;
use crate::postgres::state::snapshot::{SnapshotRecord, SnapshotState};
use crate::postgres::{server_version, setup};

/// A snapshot to publish before streaming.
pub struct Job {
    /// The SQL session whose transaction holds the rows to publish.
    reader: Client,
    /// Where the slot stands: streaming starts here.
    consistent_point: Lsn,
    /// The exported snapshot was lost with an interrupted start: the rows
    /// are read as they are now.
    redo: bool,
    /// The state table's record as this start last read or wrote it.
    record: SnapshotRecord,
    /// One snapshot per slot at a time: held until the stream has started.
    lock: SnapshotLock,
}

/// What `--snapshot-where` asks of this start, decided once the start-up
/// checks passed: a snapshot to publish (the slot created here with it, or
/// one an earlier start left unfinished), or nothing (taken long ago).
/// `slot_exists` is what start-up found; `gap_from` is set when the slot
/// replaces a lost one (`--recreate-missing-slot`). Creates the slot when
/// it does not exist, on `replication`, which the caller then closes unused.
/// While another walrelay holds the slot's snapshot lock the error is a
/// standby's (`Kind::Standby`).
pub async fn prepare(
    client: &Client,
    replication: &mut ReplicationConnection,
    settings: &Settings,
    plan: &SnapshotPlan,
    slot_exists: bool,
    gap_from: Option<&str>,
) -> Result<Option<Job>> {
    let (state, slot) = (&settings.state_table, settings.slot.as_str());
    // On a standby, the primary's (postgres::state::route).
    let writer = settings.state_route().client(client).await?;
    state.ensure_snapshot_column(&writer).await?;
    let record = state.read_snapshot(&writer, slot).await?;
    if !decided(
        step(record.as_ref(), slot_exists),
        record.as_ref(),
        settings,
        plan,
    )? {
        return Ok(None);
    }
    // A snapshot to take or to redo: one walrelay at a time. A replica
    // that started alongside, or a moment before, waits as a standby.
    let lock = SnapshotLock::take(&settings.pg, slot).await?;
    // Read again under the lock: the holder that let go may have finished
    // the snapshot, or created the slot, since.
    let record = state.read_snapshot(&writer, slot).await?;
    if setup::existing_slot(client, slot).await?.is_some() != slot_exists {
        lock.release().await;
        return Err(Error::new(
            Kind::Standby,
            format!(
                "slot {slot:?} was created or dropped while this one was starting (by \
                 another walrelay, with its snapshot?): this one starts again from what the \
                 state table and the slot say then"
            ),
        ));
    }
    let next = step(record.as_ref(), slot_exists);
    if !decided(next, record.as_ref(), settings, plan)? {
        lock.release().await;
        return Ok(None);
    }
    if let Step::Redo(consistent_point) = next {
        warn!(
            slot,
            consistent_point = %consistent_point,
            published_before = record.as_ref().map_or(0, |r| r.published),
            "the snapshot an earlier start took was not finished, and the slot has \
             confirmed nothing since: publishing the rows --snapshot-where selects now, \
             then streaming from the slot's consistent point (rows sent before are \
             sent again; consumers dedupe by id)"
        );
        let reader = setup::connect(&settings.pg).await?;
        rows::begin(&reader, None).await?;
        return Ok(Some(Job {
            reader,
            consistent_point,
            redo: true,
            record: record.expect("a snapshot to redo was recorded"),
            lock,
        }));
    }
    check_rows(client, settings, plan).await?;
    // Recorded before the slot exists: a start interrupted from here on
    // finds the slot with a snapshot still to publish. Over the record of
    // a lost slot's snapshot, if any: this one is the new slot's.
    let taking = SnapshotRecord {
        state: SnapshotState::Taking,
        predicate: plan.predicate.clone(),
        consistent_point: None,
        rows: 0,
        published: 0,
    };
    write(&writer, settings, &taking, record.as_ref(), true).await?;
    let version = server_version(client).await?;
    let (consistent_point, snapshot) = replication
        .create_slot_exporting(slot, version, settings.failover_slot)
        .await?;
    let reader = setup::connect(&settings.pg).await?;
    rows::begin(&reader, Some(&snapshot)).await?;
    state
        .record_created(&writer, slot, consistent_point)
        .await?;
    let created = SnapshotRecord {
        consistent_point: Some(consistent_point.to_string()),
        ..taking.clone()
    };
    write(&writer, settings, &created, Some(&taking), false).await?;
    match gap_from {
        Some(gap_from) => error!(
            slot,
            gap_from = %gap_from,
            gap_to = %consistent_point,
            "created a new replication slot, with an exported snapshot, in place of a missing \
             one, as --recreate-missing-slot asks: events committed between these LSNs are \
             published only if --snapshot-where selects their rows; check with walrelay audit \
             (docs/outbox-lifecycle.md)"
        ),
        None => info!(
            slot,
            consistent_point = %consistent_point,
            snapshot = %snapshot,
            "created replication slot with an exported snapshot"
        ),
    }
    Ok(Some(Job {
        reader,
        consistent_point,
        redo: false,
        record: created,
        lock,
    }))
}

/// Whether `step` leaves a snapshot to take or redo; says so when it is
/// done, and refuses a slot created without one.
fn decided(
    step: Step,
    record: Option<&SnapshotRecord>,
    settings: &Settings,
    plan: &SnapshotPlan,
) -> Result<bool> {
    match step {
        Step::Take | Step::Redo(_) => Ok(true),
        Step::Refuse => Err(slot_exists_error(settings, plan)),
        Step::Done => {
            info!(
                slot = %settings.slot,
                rows = record.map_or(0, |r| r.published),
                "the slot's snapshot was published when the slot was created; \
                 --snapshot-where has nothing more to do"
            );
            Ok(false)
        }
    }
}

/// Writes the snapshot's record over `seen`, the one this start last read
/// or wrote (`StateTable::record_snapshot`). Finding another means a
/// walrelay that does not take the snapshot lock (an older version) wrote
/// it meanwhile: the start ends, and the next decides from what it wrote.
async fn write(
    writer: &Client,
    settings: &Settings,
    record: &SnapshotRecord,
    seen: Option<&SnapshotRecord>,
    anew: bool,
) -> Result<()> {
    let (state, slot) = (&settings.state_table, settings.slot.as_str());
    if state
        .record_snapshot(writer, slot, record, seen, anew)
        .await?
    {
        return Ok(());
    }
    let found = state.read_snapshot(writer, slot).await?;
    Err(Error::transient(format!(
        "the snapshot record of slot {slot:?} in {state} changed under this walrelay (it found \
         {:?}, expected {:?}): another walrelay wrote it without the snapshot lock (an older \
         version?); starting again from what it recorded",
        found.map(|r| r.state),
        seen.map(|r| r.state.clone())
    )))
}

/// What `--snapshot-where` means for a start: one decision for `run` and
/// `walrelay check`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Create the slot with an exported snapshot and publish it.
    Take,
    /// A snapshot begun with the slot, at this consistent point, was never
    /// finished: publish the rows as they are now, then stream.
    Redo(Lsn),
    /// Taken when the slot was created: nothing to do.
    Done,
    /// The slot exists without a snapshot: the flag cannot be honoured.
    Refuse,
}

/// The step for a slot that exists or not, and the state table's record.
pub fn step(record: Option<&SnapshotRecord>, slot_exists: bool) -> Step {
    match (slot_exists, record) {
        (false, _) => Step::Take,
        (true, None) => Step::Refuse,
        (true, Some(r)) if r.state == SnapshotState::Done => Step::Done,
        (true, Some(r)) => Step::Redo(
            r.consistent_point
                .as_deref()
                .and_then(|p| p.parse().ok())
                .unwrap_or(Lsn::ZERO),
        ),
    }
}

/// Runs the snapshot's query once, reading nothing, before the slot
/// exists: a mistyped condition or column stops walrelay without a slot
/// left behind to pin WAL (and fails `walrelay check`).
pub async fn check_rows(client: &Client, settings: &Settings, plan: &SnapshotPlan) -> Result<()> {
    for (table, _) in mapped_tables(client, settings).await? {
        let key = &settings.mapping.key;
        let order = order::order_by(
            client,
            &table,
            plan.order_by.as_deref(),
            key,
            "--snapshot-order-by",
        )
        .await?;
        let sql = format!(
            "SELECT 1 FROM {} WHERE ({}) ORDER BY {order} LIMIT 0",
            table.table.quoted(),
            plan.predicate
        );
        // One statement (the extended protocol takes no more).
        client.query(&sql, &[]).await.map_err(|e| {
            Error::permanent(format!(
                "--snapshot-where {:?} --snapshot-order-by {order:?} is not a query Postgres \
                 runs on {}: fix it (no slot was created)",
                plan.predicate, table.table
            ))
            .with_source(e)
        })?;
    }
    Ok(())
}

/// The error for `--snapshot-where` on a slot that exists without a snapshot.
pub fn slot_exists_error(settings: &Settings, plan: &SnapshotPlan) -> Error {
    Error::permanent(format!(
        "--snapshot-where publishes the outbox's rows on the start that creates the slot, and \
         replication slot {:?} exists already (created without a snapshot): rows written before \
         it was created may predate it. Publish them with walrelay replay --where {:?} (same \
         flags), and start walrelay without --snapshot-where",
        settings.slot, plan.predicate
    ))
}

/// Publishes the snapshot's rows and waits until Kafka has acknowledged
/// every one, then records the snapshot done. Returns the snapshot lock,
/// for the caller to release once the stream has started, or None when a
/// stop request came first (the record stays `taking`, the lock goes with
/// the connection: the next start, or a standby, redoes it).
pub async fn publish(
    settings: &Settings,
    plan: &SnapshotPlan,
    metrics: &Metrics,
    job: Job,
    sink: KafkaSink<'_, Ticket>,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<Option<SnapshotLock>> {
    let reader = &job.reader;
    let tables = mapped_tables(reader, settings).await?;
    let mut order_by = Vec::with_capacity(tables.len());
    for (table, _) in &tables {
        let key = &settings.mapping.key;
        order_by.push(
            order::order_by(
                reader,
                table,
                plan.order_by.as_deref(),
                key,
                "--snapshot-order-by",
            )
            .await?,
        );
    }
    let list: Vec<_> = tables.iter().map(|(t, _)| t.clone()).collect();
    let counted = Plan::count(reader, settings, &list, &plan.predicate).await?;
    let what = if job.redo {
        "the snapshot (again, as the rows are now) publishes"
    } else {
        "the snapshot publishes"
    };
    info!(
        consistent_point = %job.consistent_point,
        "{} (where {}; ordered by {})",
        counted.text(what),
        plan.predicate,
        order_by.join("; ")
    );
    let total = counted.rows();
    let here = setup::connect(&settings.pg).await?;
    let control = settings.state_route().client(&here).await?;
    let record = SnapshotRecord {
        state: SnapshotState::Taking,
        predicate: plan.predicate.clone(),
        consistent_point: Some(job.consistent_point.to_string()),
        rows: total,
        published: 0,
    };
    write(&control, settings, &record, Some(&job.record), false).await?;
    let mut meter = Meter::logging("snapshot", "rows", total);
    metrics.set_snapshot(true, &meter.rate(0));
    // Its own books and registry: the relay's confirmed position and
    // in-flight gauges stay the slot's.
    let mut sender = RowSender::new(settings, sink, Metrics::new(), job.consistent_point, None);
    let sending = async {
        let mut show = |done| metrics.set_snapshot(true, &meter.update(done));
        for ((table, schema), order) in tables.iter().zip(&order_by) {
            let mut cursor = RowCursor::open(reader, table, &plan.predicate, order).await?;
            sender.send_all(&mut cursor, schema, &mut show).await?;
        }
        sender.drain(show).await
    };
    let finished = tokio::select! {
        result = sending => {
            result?;
            true
        }
        _ = async { drop(shutdown.wait_for(|stop| *stop).await) } => false,
    };
    let rate = meter.finish(sender.done());
    metrics.set_snapshot(false, &rate);
    if !finished {
        warn!(
            published = rate.done,
            rows = total,
            "stopped during the snapshot; the slot confirmed nothing, and the next start \
             publishes the snapshot's rows again before it streams"
        );
        return Ok(None);
    }
    let _ = reader.batch_execute("COMMIT").await;
    // Still the one taker: a lock lost with its connection may be held by
    // another walrelay by now, redoing the snapshot.
    job.lock.check().await?;
    let done = SnapshotRecord {
        state: SnapshotState::Done,
        published: rate.done,
        ..record.clone()
    };
    write(&control, settings, &done, Some(&record), false).await?;
    info!(
        rows = rate.done,
        consistent_point = %job.consistent_point,
        "snapshot published: Kafka acknowledged every row; streaming from the slot's \
         consistent point"
    );
    Ok(Some(job.lock))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(state: SnapshotState) -> SnapshotRecord {
        SnapshotRecord {
            state,
            predicate: "published_at IS NULL".into(),
            consistent_point: Some("0/16B3748".into()),
            rows: 10,
            published: 4,
        }
    }

    #[test]
    fn the_flag_takes_a_snapshot_only_with_the_slot_and_redoes_an_unfinished_one() {
        assert_eq!(step(None, false), Step::Take);
        // A lost slot recreated with --recreate-missing-slot: a new snapshot.
        assert_eq!(step(Some(&record(SnapshotState::Done)), false), Step::Take);
        assert_eq!(step(None, true), Step::Refuse);
        assert_eq!(step(Some(&record(SnapshotState::Done)), true), Step::Done);
        assert_eq!(
            step(Some(&record(SnapshotState::Taking)), true),
            Step::Redo(Lsn(0x16B3748))
        );
    }
}
