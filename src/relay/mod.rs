//! The relay's lifecycle: start-up checks, one streaming session at a time,
//! and reconnects with capped exponential backoff after transient errors.
//! Each session resumes from the slot's confirmed position (or a later one
//! walrelay confirmed itself, `resume`), so anything not yet confirmed is
//! simply read and sent again (at-least-once).

mod apply;
mod exactly_once;
mod refused;
mod resume;
mod standby;
mod upstream;

#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::config::{OnUpdate, RunArgs, Settings, Source};
use crate::error::{Error, Kind, Result, StopCause};
use crate::kafka::producer::KafkaSink;
use crate::lifecycle::snapshot;
use crate::metrics::{self, Metrics};
use crate::postgres::guard;
use crate::postgres::lsn::Lsn;
use crate::postgres::placement::RelationResolver;
use crate::postgres::publication;
use crate::postgres::setup::SlotOptions;
use crate::postgres::snapshot_lock;
use crate::postgres::standby::Standby;
use crate::postgres::state::decide::{decide, settings_verdict, Observed, SlotPlan, Verdict};
use crate::postgres::state::recovery::unpublished_since;
use crate::postgres::state::route::StateClient;
use crate::postgres::state::{carry_history, Accepted, OutboxIdentity, ServerId, SlotState};
use crate::postgres::{describe_target, replication, setup};
use crate::watchdog;
use resume::Confirmed;

pub use crate::delivery::{Ticket, TxnRef};
pub use apply::ApplyLoop;
pub use upstream::{PgUpstream, Upstream};

/// A session that streamed this long before failing resets the backoff.
const HEALTHY_SESSION: Duration = Duration::from_secs(30);
const INITIAL_BACKOFF: Duration = Duration::from_millis(500);

/// Extra time past --shutdown-timeout before a stuck shutdown is cut short.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// The read timeout when the server's wal_sender_timeout is 0 (disabled).
const DEFAULT_REPLICATION_TIMEOUT: Duration = Duration::from_secs(60);

pub async fn run(args: RunArgs, mut shutdown: watch::Receiver<bool>) -> Result<()> {
    let settings = Settings::from_args(&args)?;
    let metrics = Metrics::new();
    metrics::serve(settings.metrics_addr, metrics.clone()).await?;
    let (fatal_tx, mut fatal_rx) = mpsc::channel(1);
    let kafka_fatal = fatal_tx.clone();
    let (outbox_tx, outbox_rx) = watch::channel(Accepted::default());
    let watchdog = tokio::spawn(watchdog::run(
        watchdog::Watched {
            pg: settings.pg.clone(),
            slot: settings.slot.clone(),
            publication: settings.publication.clone(),
            state_table: settings.state_table.clone(),
            state: settings.state_route(),
            settings: settings.published(),
            tables: match settings.source {
                Source::Table => settings.tables.clone(),
                Source::Messages => Vec::new(),
            },
            outbox: outbox_rx,
        },
        settings.watchdog.clone(),
        metrics.clone(),
        fatal_tx,
    ));
    // Off the per-event path: a task with its own connection.
    let retention = settings.retention.clone().map(|retention| {
        tokio::spawn(crate::retention::run(
            crate::retention::Retained {
                pg: settings.pg.clone(),
                slot: settings.slot.clone(),
                publication: settings.publication.clone(),
                state_table: settings.state_table.clone(),
                tables: settings.tables.clone(),
            },
            retention,
            metrics.clone(),
            kafka_fatal.clone(),
        ))
    });
    let (position, persisted) = watch::channel(None);
    let mut stop = shutdown.clone();
    let mut cut_short = false;
    let shared = Shared {
        outbox: outbox_tx,
        position,
        fatal: kafka_fatal,
        change_accepted: AtomicBool::new(false),
        guard_told: AtomicBool::new(false),
        on_standby: AtomicBool::new(false),
        exactly_once: settings
            .exactly_once
            .as_ref()
            .map(|_| exactly_once::Shared::new(&metrics)),
    };
    let result = tokio::select! {
        result = supervise(&settings, &metrics, &mut shutdown, &shared) => result,
        Some(fatal) = fatal_rx.recv() => Err(fatal),
        // Never ends while the position has a sender: `shared` holds it.
        () = resume::persist(&settings, persisted.clone()) => Ok(()),
        // Whatever a session is stuck in (a silent server, a broker that
        // never answers), a stop request ends walrelay within the timeout.
        () = async {
            let _ = stop.wait_for(|stop| *stop).await;
            tokio::time::sleep(settings.timeouts.shutdown + SHUTDOWN_GRACE).await;
        } => {
            warn!(
                timeout = ?settings.timeouts.shutdown,
                "shutdown did not finish within --shutdown-timeout; stopping anyway; \
                 unconfirmed events will be sent again on restart"
            );
            cut_short = true;
            Ok(())
        }
    };
    // Nothing is deleted once the stream has stopped, held or not: a held
    // stop means rows may be the only copy of events Kafka lacks.
    if let Some(retention) = retention {
        retention.abort();
    }
    // A stop whose slot is missing or lost, or whose outbox changed, keeps
    // /metrics up, so that the alert on it can fire (`refused`).
    let result = match result {
        Err(e)
            if !cut_short && !e.is_transient() && e.stop_cause().is_some_and(StopCause::holds) =>
        {
            refused::hold(e, &metrics, &mut shutdown).await
        }
        result => result,
    };
    watchdog.abort();
    if !cut_short {
        record_delivered(&settings, &persisted).await;
    }
    result
}

/// What outlives one session: the outbox tables it accepted (for the
/// watchdog) and the position confirmed so far (for the next session).
struct Shared {
    outbox: watch::Sender<Accepted>,
    position: resume::Position,
    /// For the Kafka client: a refused login stops walrelay at once.
    fatal: mpsc::Sender<Error>,
    /// --accept-outbox-change was recorded by this process.
    change_accepted: AtomicBool,
    /// Whether the guard is installed was said.
    guard_told: AtomicBool,
    /// The last session started on a standby (`resume`: its positions are
    /// not used on a primary).
    on_standby: AtomicBool,
    /// With --delivery exactly-once.
    exactly_once: Option<exactly_once::Shared>,
}

/// On a stop, the state table records the last delivered position, for a
/// restart after a Postgres crash. Best effort and bounded: the stop
/// matters more.
async fn record_delivered(settings: &Settings, position: &watch::Receiver<Option<Confirmed>>) {
    let Some(confirmed) = position.borrow().clone() else {
        return;
    };
    let record = async {
        let client = setup::connect(&settings.pg).await?;
        let state = settings.state_route().client(&client).await?;
        settings
            .state_table
            .record_delivered(
                &state,
                &settings.slot,
                confirmed.delivered,
                &confirmed.server,
                settings.exactly_once.is_some(),
            )
            .await
            .map_err(|e| crate::postgres::sql_error("cannot write the state table", e))
    };
    match tokio::time::timeout(SHUTDOWN_GRACE, record).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => warn!(error = %e.report(), "cannot record the delivered position"),
        Err(_) => warn!("cannot record the delivered position: Postgres did not answer"),
    }
}

/// Runs sessions one after another until shutdown or a permanent error.
async fn supervise(
    settings: &Settings,
    metrics: &Metrics,
    shutdown: &mut watch::Receiver<bool>,
    shared: &Shared,
) -> Result<()> {
    info!(
        postgres = %describe_target(&settings.pg.config),
        kafka = %settings.kafka_brokers,
        tables = %settings.tables_text(),
        slot = %settings.slot,
        "walrelay starting"
    );

    let started = Instant::now();
    let mut ever_connected = false;
    let mut backoff = INITIAL_BACKOFF;
    loop {
        if *shutdown.borrow() {
            return Ok(());
        }
        let session_start = Instant::now();
        let result = session(settings, metrics, shutdown, &mut ever_connected, shared).await;
        metrics.set_streaming(false);
        metrics.session_ended();
        let err = match result {
            Ok(()) => return Ok(()),
            Err(e) if !e.is_transient() => return Err(e),
            Err(e) => e,
        };
        if err.kind() == Kind::Standby {
            // Active/passive: another walrelay streams from the slot. Poll at
            // a steady pace so this one takes over soon after it goes away.
            // Kafka is probed meanwhile too: a standby that could not reach
            // it could not take over, and must not look like one that can.
            let _probe = crate::kafka::factory::admin_client(&settings.kafka).map(|admin| {
                crate::kafka::reachability::watch(
                    admin,
                    settings.kafka_brokers.clone(),
                    metrics.clone(),
                )
            });
            match standby::wait(settings, metrics, shutdown, &err).await {
                standby::Wait::SlotFree => continue,
                standby::Wait::Stopped => return Ok(()),
            }
        }
        // Before the first successful connection a transient error is most
        // likely a wrong host or port: give up after --startup-timeout.
        if !ever_connected && started.elapsed() >= settings.timeouts.startup {
            return Err(Error::permanent(format!(
                "could not start within --startup-timeout ({:?}); check that Postgres at {} is \
                 reachable",
                settings.timeouts.startup,
                describe_target(&settings.pg.config)
            ))
            .with_source(err));
        }
        if session_start.elapsed() >= HEALTHY_SESSION {
            backoff = INITIAL_BACKOFF;
        }
        if ever_connected {
            warn!(error = %err.report(), retry_in = ?backoff, "session ended; reconnecting");
        } else {
            warn!(
                error = %err.report(),
                retry_in = ?backoff,
                give_up_after = ?settings.timeouts.startup,
                "cannot connect to Postgres yet; retrying until --startup-timeout"
            );
        }
        metrics.record_reconnect(reconnect_target(&err, metrics));
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
        }
        backoff = (backoff * 2).min(settings.timeouts.reconnect_max_backoff);
    }
}

/// Which side ended a session, for `walrelay_reconnects_total`: Kafka when
/// a Kafka client error caused it, or when no broker answers and Postgres
/// raised nothing (a metadata lookup that timed out, say); Postgres
/// otherwise. A broker that never answers must not read as Postgres
/// reconnecting every 30 s.
fn reconnect_target(err: &Error, metrics: &Metrics) -> &'static str {
    let mut from_kafka = false;
    let mut from_postgres = false;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cause {
        from_kafka |= e.is::<rdkafka::error::KafkaError>();
        from_postgres |= e.is::<tokio_postgres::Error>();
        cause = e.source();
    }
    if from_kafka || (!from_postgres && !metrics.is_kafka_reachable()) {
        "kafka"
    } else {
        "postgres"
    }
}

/// One session: check, connect, stream until shutdown or an error.
async fn session(
    settings: &Settings,
    metrics: &Metrics,
    shutdown: &mut watch::Receiver<bool>,
    ever_connected: &mut bool,
    shared: &Shared,
) -> Result<()> {
    let new_sink = || {
        KafkaSink::new(
            &settings.kafka,
            &settings.topics,
            metrics.clone(),
            shared.fatal.clone(),
        )
    };
    // The producer first: a -X property librdkafka refuses must stop
    // walrelay before it creates a publication or a slot.
    let sink = new_sink()?;
    let eos = settings
        .exactly_once
        .as_ref()
        .zip(shared.exactly_once.as_ref());
    // A broker without transactions must stop walrelay before it creates a
    // publication or a slot, too.
    if let Some((eos, eos_shared)) = eos {
        tokio::select! {
            probed = exactly_once::probe(settings, eos, eos_shared) => probed?,
            _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
        }
    }
    let opened = match open_in_time(settings, ever_connected, shared, metrics, shutdown).await? {
        None => return Ok(()),
        Some(Opening::Stream(opened)) => (*opened, sink),
        // The first start's snapshot: published whole before anything
        // streams (at-least-once, with exactly once too: its producer is
        // not transactional).
        Some(Opening::Snapshot(job)) => {
            let plan = settings
                .snapshot
                .as_ref()
                .expect("a snapshot was asked for");
            let Some(lock) =
                snapshot::publish(settings, plan, metrics, *job, sink, shutdown).await?
            else {
                return Ok(());
            };
            let sink = new_sink()?;
            // The snapshot lock is let go once this start holds the slot: a
            // replica waiting for the snapshot then finds the slot active,
            // and stays a standby.
            let reopened = open_in_time(settings, ever_connected, shared, metrics, shutdown).await;
            lock.release().await;
            match reopened? {
                None => return Ok(()),
                Some(Opening::Stream(opened)) => (*opened, sink),
                Some(Opening::Snapshot(_)) => {
                    return Err(Error::permanent(
                        "the snapshot was published, yet the state table still asks for it: \
                         is another walrelay with --snapshot-where starting on this slot?",
                    ))
                }
            }
        }
    };
    let (opened, mut sink) = opened;
    // Exactly once: only now, holding the slot, may this session fence the
    // producers of the instances that held it before.
    let run = match eos {
        Some((eos, eos_shared)) => {
            let starting = exactly_once::start(
                settings,
                eos,
                eos_shared,
                &mut sink,
                &opened.system,
                opened.start,
                opened.kafka_committed.clone(),
            );
            Some(tokio::select! {
                run = starting => run?,
                _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
            })
        }
        None => None,
    };
    metrics.set_streaming(true);
    let announce = tokio::spawn(announce_streaming(
        metrics.clone(),
        settings.slot.clone(),
        opened.start,
    ));
    let mut apply = ApplyLoop::new(
        settings,
        opened.upstream,
        sink,
        opened.start,
        opened.read_timeout,
        metrics.clone(),
    )
    .remembering(opened.system.server, &shared.position)
    .guarded(opened.guard);
    if let Some((run, eos)) = run.zip(settings.exactly_once.clone()) {
        apply = apply.exactly_once(eos, run);
    }
    let result = apply.run(shutdown).await;
    announce.abort();
    result
}

/// `open`, bounded by --setup-timeout; None when a stop request came first.
/// A start that fails undoes what it did: a slot must not outlive a start
/// that never streamed from it.
async fn open_in_time(
    settings: &Settings,
    ever_connected: &mut bool,
    shared: &Shared,
    metrics: &Metrics,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<Option<Opening>> {
    let mut started = Started::default();
    // A server that accepts the connection and then says nothing must not
    // hold the session, or a stop request, forever.
    let opening = tokio::time::timeout(
        settings.timeouts.setup,
        open(settings, ever_connected, shared, metrics, &mut started),
    );
    let opened = tokio::select! {
        opened = opening => opened.unwrap_or_else(|_| Err(Error::transient(format!(
            "the session did not start within --setup-timeout ({:?}): Postgres did not answer \
             in time (an unresponsive server, or slot creation waiting for long-running \
             transactions: see pg_stat_activity)",
            settings.timeouts.setup
        )))),
        _ = shutdown.wait_for(|stop| *stop) => Err(Error::transient("stopped while starting")),
    };
    match opened {
        Ok(opening) => Ok(Some(opening)),
        Err(e) => {
            // Abandoned while the server creates the slot: it would finish
            // after walrelay gave up, and leave a slot nobody reads.
            if let Some(creation) = started.creating.take() {
                setup::cancel(&settings.pg, creation).await;
            }
            // Held by another process: someone streams from it, it is not
            // left behind.
            if started.created && e.kind() != Kind::Standby {
                setup::drop_created_slot(&settings.pg, &settings.slot).await;
            }
            if *shutdown.borrow() {
                Ok(None)
            } else {
                Err(e)
            }
        }
    }
}

/// What a start leads to.
enum Opening {
    Stream(Box<Opened>),
    /// The first start's snapshot, to publish before streaming.
    Snapshot(Box<snapshot::Job>),
}

/// "streaming started" means both ends work: it waits for a broker to
/// answer (kafka::reachability warns while none does).
async fn announce_streaming(metrics: Metrics, slot: String, start: Lsn) {
    while !metrics.is_kafka_reachable() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    info!(slot = %slot, resume_lsn = %start, "streaming started");
}

/// Checks the database, makes sure the publication and the slot exist, and
/// starts streaming.
async fn open(
    settings: &Settings,
    ever_connected: &mut bool,
    shared: &Shared,
    metrics: &Metrics,
    started: &mut Started,
) -> Result<Opening> {
    let client = setup::connect(&settings.pg).await?;
    *ever_connected = true;
    let standby = verify_preconditions(&client, settings).await?;
    // The replication connection before anything is created: a server out
    // of WAL senders must not leave a new slot behind.
    let mut replication = replication::connect(&settings.pg).await?;
    let system = replication.identify_system().await?;
    // Read before the catalog: every change committed before this position
    // shows in the checks below.
    let wal_now = setup::current_wal_lsn(&client).await?;
    // On a standby, the primary's: before anything is created.
    let state = settings.state_route().client(&client).await?;
    let (stored, kafka_committed) = read_state(&state, settings).await?;
    let mut outbox = ensure_publication(&client, settings, stored.as_ref(), wal_now).await?;
    let existing = setup::existing_slot(&client, &settings.slot).await?;
    let verdict = record_start(
        &state,
        settings,
        shared,
        metrics,
        stored.as_ref(),
        &mut outbox,
        (existing, wal_now),
    )
    .await?;
    let snapshot = snapshot_if_asked(&client, &mut replication, settings, &verdict, existing);
    if let Some(job) = snapshot.await? {
        // The slot stays where it is, confirmed by nobody, until the
        // snapshot's rows are all in Kafka.
        replication.close().await;
        shared.outbox.send_replace(Accepted {
            outbox: outbox.clone(),
            intact_at: wal_now,
        });
        return Ok(Opening::Snapshot(job));
    }
    let slot = SlotOptions {
        slot: &settings.slot,
        plan: &verdict.slot,
        existing,
        failover: settings.failover_slot,
        primary: state.primary(),
    };
    let ready = create_slot(&client, &slot, started, metrics).await?;
    shared.outbox.send_replace(Accepted {
        outbox: outbox.clone(),
        intact_at: wal_now,
    });
    let guard = match settings.source {
        Source::Table => guarded(&client, settings, &outbox, shared).await?,
        Source::Messages => None,
    };
    let read_timeout = match settings.timeouts.replication {
        Some(timeout) => timeout,
        None => setup::wal_sender_timeout(&client)
            .await?
            .unwrap_or(DEFAULT_REPLICATION_TIMEOUT),
    };
    let remembered = remembered_positions(shared, standby.is_some(), stored.as_ref(), &ready);
    // pgoutput takes `messages` from PostgreSQL 14 (13 refuses the option,
    // and has no messages to count).
    let source_block_messages = settings.mapping.writes_source_block()
        && crate::postgres::server_version(&client).await? >= 140000;
    let start = resume::start_point(ready.confirmed, &system, remembered);
    // 0/0 lets the server start from the slot's confirmed_flush_lsn; a later
    // position makes it skip what walrelay already confirmed.
    let (stream, status) = replication
        .start(
            &settings.slot,
            &settings.publication,
            settings.source == Source::Messages
                || guard.is_some()
                // Debezium counts a message's commit in the source block's
                // lastCommitLsn: walrelay must see them to count them too.
                || source_block_messages,
            if start > ready.confirmed {
                start
            } else {
                Lsn::ZERO
            },
        )
        .await?;
    // Remembered only once streaming started: a start that fails before
    // drops the slot it created, which must not then count as missing.
    if ready.created || stored.as_ref().is_none_or(|s| s.created.is_none()) {
        settings
            .state_table
            .record_created(&state, &settings.slot, ready.confirmed)
            .await?;
    }
    drop(state);
    let resolver = (settings.source == Source::Table).then(|| RelationResolver {
        client,
        publication: settings.publication.clone(),
        tables: settings.tables.clone(),
        accepted: outbox.iter().flat_map(|o| o.oids()).collect(),
        intact_at: wal_now,
    });
    Ok(Opening::Stream(Box::new(Opened {
        upstream: PgUpstream {
            stream,
            status,
            resolver,
            query_timeout: read_timeout,
            batching: upstream::ReadBatching::new(settings.flow.read_batch_window),
        },
        start,
        system,
        read_timeout,
        guard,
        kafka_committed,
    })))
}

/// The server walrelay can stream from: logical WAL, whether it is a
/// standby (announced), and the preconditions `walrelay check` reads too.
async fn verify_preconditions(
    client: &tokio_postgres::Client,
    settings: &Settings,
) -> Result<Option<Standby>> {
    setup::check_wal_level(client).await?;
    let standby = Standby::read(client).await?;
    if let Some(standby) = &standby {
        standby.announce();
    }
    preconditions(client, settings, standby.is_some()).await?;
    Ok(standby)
}

/// The slot's row of the state table, and under exactly-once what Kafka
/// committed, as recorded by whichever process committed it
/// (`relay::exactly_once` holds the position topic to it). New settings
/// accepted by --accept-config-change are recorded here: before the tables
/// and the publication, since new settings may need a table added to the
/// publication, which must wait until the instances with the old ones have
/// stopped (docs/operations.md, "Changing what walrelay publishes").
async fn read_state(
    state: &StateClient<'_>,
    settings: &Settings,
) -> Result<(Option<SlotState>, Option<(ServerId, Lsn)>)> {
    let state_table = &settings.state_table;
    let published = settings.published();
    let stored = state_table
        .load(state, &settings.publication, &settings.slot)
        .await?;
    let kafka_committed = match settings.exactly_once {
        Some(_) => {
            state_table.ensure_kafka_committed_column(state).await?;
            state_table.kafka_committed(state, &settings.slot).await?
        }
        None => None,
    };
    let allowed = settings.allowed;
    if let Some(change) = settings_verdict(&settings.slot, stored.as_ref(), &published, allowed)? {
        state_table
            .record_settings(state, &settings.slot, &published)
            .await?;
        warn!(
            slot = %settings.slot,
            "recorded this instance's settings for the slot, as --accept-config-change asks \
             ({change}); instances with the old ones stop"
        );
    }
    Ok((stored, kafka_committed))
}

/// The publication, created or completed; the outbox tables it publishes
/// (none for `--source messages`).
async fn ensure_publication(
    client: &tokio_postgres::Client,
    settings: &Settings,
    stored: Option<&SlotState>,
    wal_now: Lsn,
) -> Result<Vec<OutboxIdentity>> {
    match settings.source {
        Source::Table => {
            let updates = settings.on_update != OnUpdate::Warn;
            let outbox =
                publication::ensure(client, &settings.publication, &settings.tables, updates)
                    .await
                    .map_err(|e| unpublished_since(e, stored, wal_now))?;
            if updates {
                let published = publication::publishes_updates(
                    client,
                    &settings.publication,
                    &settings.tables[0],
                )
                .await?;
                if let Some(problem) =
                    publication::updates_problem(&settings.publication, published)
                {
                    return Err(problem.into_error());
                }
            }
            Ok(outbox)
        }
        Source::Messages => {
            publication::ensure(client, &settings.publication, &[], false).await?;
            Ok(Vec::new())
        }
    }
}

/// Decides what the start does with the slot (`decide`), from the state
/// table, the outbox as it is and whether the slot exists (`at`: the slot's
/// confirmed position if it does, and the WAL position the catalog was read
/// at), and records the start in the state table.
async fn record_start(
    state: &StateClient<'_>,
    settings: &Settings,
    shared: &Shared,
    metrics: &Metrics,
    stored: Option<&SlotState>,
    outbox: &mut Vec<OutboxIdentity>,
    (existing, wal_now): (Option<Lsn>, Lsn),
) -> Result<Verdict> {
    let published = settings.published();
    let allowed = settings.allowed;
    // A fact, whatever the verdict: the slot walrelay streamed from is gone.
    metrics.set_slot_missing(existing.is_none() && stored.is_some_and(|s| s.created.is_some()));
    let verdict = decide(
        &Observed {
            slot: &settings.slot,
            stored,
            outbox,
            settings: &published,
            slot_exists: existing.is_some(),
            wal_now,
        },
        allowed,
    )?;
    for change in &verdict.accepted {
        warn!(slot = %settings.slot, "accepted at start-up, as the flags ask: {change}");
    }
    if let Some(stored) = stored {
        carry_history(outbox, &stored.outbox);
    }
    // The flag accepts every change committed so far, the guard's messages
    // about them included; once per process, so that a standby polling with
    // the flag still set does not write every second.
    let accepting = allowed.outbox_change && !shared.change_accepted.load(Ordering::Relaxed);
    if accepting {
        for table in outbox.iter_mut() {
            table.accepted_through = Some(wal_now);
        }
    }
    // Unchanged, nothing is written: a standby polls this every second.
    let unchanged =
        stored.is_some_and(|s| s.outbox == *outbox && s.settings.as_ref() == Some(&published));
    if !unchanged {
        settings
            .state_table
            .record_start(state, &settings.slot, outbox, &published, wal_now)
            .await?;
    }
    if accepting {
        // Rows written while the outbox was not published are the only
        // copy of their events until they are published again, which
        // nothing here can see: retention keeps every row from before now.
        if stored.is_some() {
            settings
                .state_table
                .record_outbox_accepted(state, &settings.slot)
                .await?;
        }
        shared.change_accepted.store(true, Ordering::Relaxed);
    }
    Ok(verdict)
}

/// The first start's snapshot when --snapshot-where asks for one and it is
/// still to take; otherwise waits while another walrelay takes one, since
/// nothing streams before it.
async fn snapshot_if_asked(
    client: &tokio_postgres::Client,
    replication: &mut replication::ReplicationConnection,
    settings: &Settings,
    verdict: &Verdict,
    existing: Option<Lsn>,
) -> Result<Option<Box<snapshot::Job>>> {
    let Some(plan) = &settings.snapshot else {
        snapshot_lock::wait_while_held(client, &settings.slot).await?;
        return Ok(None);
    };
    let gap_from = match &verdict.slot {
        SlotPlan::CreateReplacing { gap_from } => Some(gap_from.as_str()),
        _ => None,
    };
    let job = snapshot::prepare(
        client,
        replication,
        settings,
        plan,
        existing.is_some(),
        gap_from,
    )
    .await?;
    Ok(job.map(Box::new))
}

/// Creates or takes the slot as the verdict says, leaving in `started` how
/// to undo it if the start is abandoned.
async fn create_slot(
    client: &tokio_postgres::Client,
    slot: &SlotOptions<'_>,
    started: &mut Started,
    metrics: &Metrics,
) -> Result<setup::SlotReady> {
    started.creating = Some(client.cancel_token());
    let ready = setup::ensure_slot(client, slot).await;
    // Still set only if the start is abandoned while the slot is created.
    started.creating = None;
    let ready = ready?;
    started.created = ready.created;
    if ready.created {
        metrics.set_slot_missing(false);
    }
    Ok(ready)
}

/// The positions walrelay itself confirmed, which may lie past the slot's
/// (`resume`): this process's last one, and the state table's.
fn remembered_positions(
    shared: &Shared,
    on_standby: bool,
    stored: Option<&SlotState>,
    ready: &setup::SlotReady,
) -> Vec<(ServerId, Lsn)> {
    let mut remembered: Vec<(ServerId, Lsn)> = Vec::new();
    // A session on a standby outlives its promotion, so what it confirmed
    // may lie on the new timeline under the old one's name: a primary that
    // still reports the old one (the old primary) must not start there.
    let was_on_standby = shared.on_standby.swap(on_standby, Ordering::Relaxed);
    if let Some(c) = shared.position.borrow().as_ref() {
        if on_standby || !was_on_standby {
            remembered.push((c.server.clone(), c.lsn));
        }
    }
    if let (Some(state), false) = (stored, ready.created) {
        remembered.extend(
            state
                .delivered
                .as_ref()
                .and_then(|d| Some((d.server.clone()?, d.lsn))),
        );
    }
    remembered
}

/// What must hold before a start creates anything (the state table, the
/// publication, the slot): a start refused later would leave them behind.
/// `walrelay check` reads the same decisions.
async fn preconditions(
    client: &tokio_postgres::Client,
    settings: &Settings,
    on_standby: bool,
) -> Result<()> {
    let tables: &[crate::postgres::names::TableName] = match settings.source {
        Source::Table => {
            for table in &settings.tables {
                setup::check_table(client, table, &settings.mapping.column_names()).await?;
            }
            &settings.tables
        }
        Source::Messages => {
            setup::check_messages_supported(client).await?;
            &[]
        }
    };
    // A standby cannot create it at all: `publication::ensure` says so.
    if !on_standby {
        let updates = settings.on_update != OnUpdate::Warn;
        let refusal =
            publication::creation_refusal(client, &settings.publication, tables, updates).await?;
        if let Some((problem, fix)) = refusal {
            return Err(Error::refusal(problem, fix));
        }
    }
    // Retention deletes the recovery source: refused when it could delete
    // rows whose events never reached Kafka (no guard), judge times in the
    // wrong zone (`retention`, "The time column is a timestamptz"), or
    // lacks a right or a partition's ownership (all named at once).
    if let Some(retention) = &settings.retention {
        let books = crate::retention::Books {
            publication: &settings.publication,
            slot: &settings.slot,
            state_table: &settings.state_table,
        };
        crate::retention::check_before_start(client, &settings.tables, &books, retention).await?;
    }
    Ok(())
}

/// What the guard (sql/walrelay_guard.sql) watches in this session, if it
/// is installed; said once per process either way.
async fn guarded(
    client: &tokio_postgres::Client,
    settings: &Settings,
    outbox: &[OutboxIdentity],
    shared: &Shared,
) -> Result<Option<guard::Watch>> {
    let installed = guard::installed(client).await?;
    if !shared.guard_told.swap(true, Ordering::Relaxed) {
        if installed {
            info!("the guard is installed: a change to the outbox's publication stops walrelay at its exact WAL position");
        } else {
            info!(
                "the guard is not installed (sql/walrelay_guard.sql, run once by a superuser): \
                 changes to the outbox's publication are found by the checks at start-up and \
                 every --watchdog-interval, with a wider range at risk"
            );
        }
    }
    if !installed {
        return Ok(None);
    }
    let partitioned = guard::partitioned(client, outbox).await?;
    let accepted_through = outbox.iter().filter_map(|o| o.accepted_through).max();
    Ok(Some(guard::Watch::new(
        &settings.publication,
        outbox,
        &partitioned,
        accepted_through,
    )))
}

/// What a start has done that a failed start must undo: a slot must not
/// outlive a start that never streamed from it.
#[derive(Default)]
struct Started {
    /// Set while the server may be creating the slot: how to stop it.
    creating: Option<tokio_postgres::CancelToken>,
    /// This start created the slot.
    created: bool,
}

/// What `open` hands the apply loop.
struct Opened {
    upstream: PgUpstream,
    /// Where the session starts: the slot's position or a later confirmed one.
    start: Lsn,
    /// The server history the session reads, and its WAL flush position.
    system: replication::SystemInfo,
    /// Silence on the replication connection longer than this means it is dead.
    read_timeout: Duration,
    /// What the guard's messages are judged against, when it is installed.
    guard: Option<guard::Watch>,
    /// Exactly once: the last position the state table records as
    /// committed in Kafka, by this process or another.
    kafka_committed: Option<(ServerId, Lsn)>,
}
