//! The relay's lifecycle: start-up checks, one streaming session at a time,
//! and reconnects with capped exponential backoff after transient errors.
//! Each session resumes from the slot's confirmed position, so anything not
//! yet confirmed is simply read and sent again (at-least-once).

mod apply;
mod poison;

use std::time::Duration;

use rdkafka::config::ClientConfig;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::config::{OnPoison, OnUpdate, RunArgs, Source, TableName};
use crate::error::{Error, Kind, Result};
use crate::kafka::producer::Producer;
use crate::kafka::topics::{TopicManager, TopicPolicy};
use crate::metrics::{self, Metrics};
use crate::outbox::mapping::MappingConfig;
use crate::outbox::routing::Router;
use crate::postgres::lsn::Lsn;
use crate::postgres::publication::{self, RelationResolver};
use crate::postgres::setup::SlotOptions;
use crate::postgres::slot_history;
use crate::postgres::{describe_target, replication, setup, PgTarget};
use crate::watchdog::{self, WatchdogSettings, Webhook};

use apply::{ApplyLoop, SessionParts};

/// A session that streamed this long before failing resets the backoff.
const HEALTHY_SESSION: Duration = Duration::from_secs(30);
const INITIAL_BACKOFF: Duration = Duration::from_millis(500);

/// Everything a session needs, derived once from the flags.
pub struct Settings {
    pub pg: PgTarget,
    pub kafka: ClientConfig,
    pub table: TableName,
    pub slot: String,
    pub publication: String,
    pub mapping: MappingConfig,
    pub source: Source,
    pub message_prefix: String,
    pub router: Router,
    pub status_interval: Duration,
    pub shutdown_timeout: Duration,
    pub max_inflight_events: usize,
    pub max_inflight_bytes: usize,
    pub topics: TopicPolicy,
    pub on_poison: OnPoison,
    pub on_update: OnUpdate,
    pub dead_letter_topic: String,
    pub recreate_missing_slot: bool,
    pub failover_slot: bool,
    pub replication_timeout: Option<Duration>,
    pub setup_timeout: Duration,
    pub max_pending_transactions: usize,
}

/// Extra time past --shutdown-timeout before a stuck shutdown is cut short.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// The read timeout when the server's wal_sender_timeout is 0 (disabled).
const DEFAULT_REPLICATION_TIMEOUT: Duration = Duration::from_secs(60);

pub async fn run(args: RunArgs, mut shutdown: watch::Receiver<bool>) -> Result<()> {
    let pg = args.validate()?;
    let settings = Settings {
        pg,
        kafka: Producer::client_config(
            &args.kafka_brokers,
            &args.kafka_properties,
            args.dead_letter_max_message_bytes,
        ),
        table: args.table.clone(),
        slot: args.conn.slot.clone(),
        publication: args.conn.publication.clone(),
        mapping: args.mapping(),
        source: args.source,
        message_prefix: args.message_prefix.clone(),
        router: Router::new(&args.topic_regex, &args.topic_replacement)
            .map_err(Error::permanent)?,
        on_update: args.on_update,
        status_interval: args.status_interval,
        shutdown_timeout: args.shutdown_timeout,
        max_inflight_events: args.max_inflight_events,
        max_inflight_bytes: args.max_inflight_bytes,
        topics: args.topic_policy()?,
        on_poison: args.on_poison,
        dead_letter_topic: args.dead_letter_topic.clone(),
        recreate_missing_slot: args.recreate_missing_slot,
        failover_slot: args.failover_slot,
        replication_timeout: args.replication_timeout,
        setup_timeout: args.setup_timeout,
        max_pending_transactions: args.max_pending_transactions,
    };
    let watchdog_settings = WatchdogSettings {
        interval: args.watchdog_interval,
        lag_warn_bytes: args.lag_warn_bytes,
        lag_critical_bytes: args.lag_critical_bytes,
        safe_wal_warn_ratio: args.safe_wal_warn_ratio,
        stall_timeout: args.stall_timeout,
        webhook: args
            .alert_webhook
            .as_deref()
            .map(Webhook::parse)
            .transpose()
            .map_err(Error::permanent)?,
    };
    let metrics = Metrics::new();
    metrics::serve(args.metrics_addr, metrics.clone()).await?;
    let (fatal_tx, mut fatal_rx) = mpsc::channel(1);
    let (outbox_oid_tx, outbox_oid_rx) = watch::channel(None);
    let watchdog = tokio::spawn(watchdog::run(
        watchdog::Watched {
            pg: settings.pg.clone(),
            slot: settings.slot.clone(),
            publication: settings.publication.clone(),
            table: (settings.source == Source::Table).then(|| settings.table.clone()),
            outbox_oid: outbox_oid_rx,
        },
        watchdog_settings,
        metrics.clone(),
        fatal_tx,
    ));
    let mut stop = shutdown.clone();
    let mut cut_short = false;
    let result = tokio::select! {
        result = supervise(&settings, &args, &metrics, &mut shutdown, &outbox_oid_tx) => result,
        Some(fatal) = fatal_rx.recv() => Err(fatal),
        // Whatever a session is stuck in (a silent server, a broker that
        // never answers), a stop request ends walrelay within the timeout.
        () = async {
            let _ = stop.wait_for(|stop| *stop).await;
            tokio::time::sleep(settings.shutdown_timeout + SHUTDOWN_GRACE).await;
        } => {
            warn!(
                timeout = ?settings.shutdown_timeout,
                "shutdown did not finish within --shutdown-timeout; stopping anyway; \
                 unconfirmed events will be sent again on restart"
            );
            cut_short = true;
            Ok(())
        }
    };
    watchdog.abort();
    if result.is_ok() && !cut_short {
        record_history(&settings).await;
    }
    result
}

/// On a clean stop, the slot's history records where it stopped, for the
/// day the slot is lost. Best effort and bounded: the stop matters more.
async fn record_history(settings: &Settings) {
    let record = async {
        let client = setup::connect(&settings.pg).await?;
        slot_history::record_confirmed(&client, &settings.publication, &settings.slot).await
    };
    match tokio::time::timeout(SHUTDOWN_GRACE, record).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => warn!(error = %e.report(), "cannot record the slot's confirmed LSN"),
        Err(_) => warn!("cannot record the slot's confirmed LSN: Postgres did not answer"),
    }
}

/// Runs sessions one after another until shutdown or a permanent error.
async fn supervise(
    settings: &Settings,
    args: &RunArgs,
    metrics: &Metrics,
    shutdown: &mut watch::Receiver<bool>,
    outbox_oid: &watch::Sender<Option<u32>>,
) -> Result<()> {
    info!(
        postgres = %describe_target(&settings.pg.config),
        kafka = %args.kafka_brokers,
        table = %settings.table,
        slot = %settings.slot,
        "walrelay starting"
    );

    let started = Instant::now();
    let mut ever_connected = false;
    let mut backoff = INITIAL_BACKOFF;
    let mut standby = false;
    loop {
        if *shutdown.borrow() {
            return Ok(());
        }
        let session_start = Instant::now();
        let result = session(settings, metrics, shutdown, &mut ever_connected, outbox_oid).await;
        metrics.set_streaming(false);
        let err = match result {
            Ok(()) => return Ok(()),
            Err(e) if !e.is_transient() => return Err(e),
            Err(e) => e,
        };
        if err.kind() == Kind::Standby {
            // Active/passive: another walrelay streams from the slot. Poll at
            // a steady pace so this one takes over soon after it goes away.
            if !standby {
                info!(error = %err.report(), poll = ?args.standby_poll_interval, "the slot is held by another process; waiting as a standby");
                standby = true;
            }
            tokio::select! {
                _ = tokio::time::sleep(args.standby_poll_interval) => {}
                _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
            }
            continue;
        }
        standby = false;
        // Before the first successful connection a transient error is most
        // likely a wrong host or port: give up after --startup-timeout.
        if !ever_connected && started.elapsed() >= args.startup_timeout {
            return Err(Error::permanent(format!(
                "could not start within --startup-timeout ({:?}); check that Postgres at {} is \
                 reachable",
                args.startup_timeout,
                describe_target(&settings.pg.config)
            ))
            .with_source(err));
        }
        if session_start.elapsed() >= HEALTHY_SESSION {
            backoff = INITIAL_BACKOFF;
        }
        warn!(error = %err.report(), retry_in = ?backoff, "session ended; reconnecting");
        metrics.record_reconnect("postgres");
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
        }
        backoff = (backoff * 2).min(args.reconnect_max_backoff);
    }
}

/// One session: check, connect, stream until shutdown or an error.
async fn session(
    settings: &Settings,
    metrics: &Metrics,
    shutdown: &mut watch::Receiver<bool>,
    ever_connected: &mut bool,
    outbox_oid: &watch::Sender<Option<u32>>,
) -> Result<()> {
    // A server that accepts the connection and then says nothing must not
    // hold the session, or a stop request, forever.
    let opening = tokio::time::timeout(
        settings.setup_timeout,
        open(settings, metrics, ever_connected, outbox_oid),
    );
    let parts = tokio::select! {
        opened = opening => opened.map_err(|_| Error::transient(format!(
            "the session did not start within --setup-timeout ({:?}): Postgres did not answer \
             in time (an unresponsive server, or slot creation waiting for long-running \
             transactions: see pg_stat_activity)",
            settings.setup_timeout
        )))??,
        _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
    };
    // Per session, so a topic deleted under a running relay is created again.
    let topics = TopicManager::new(&settings.kafka, &settings.topics, metrics.clone())?;
    metrics.set_streaming(true);
    ApplyLoop::new(settings, topics, metrics.clone(), parts)
        .run(shutdown)
        .await
}

/// Checks the database, makes sure the publication and the slot exist, and
/// starts streaming.
async fn open(
    settings: &Settings,
    metrics: &Metrics,
    ever_connected: &mut bool,
    outbox_oid: &watch::Sender<Option<u32>>,
) -> Result<SessionParts> {
    let client = setup::connect(&settings.pg).await?;
    *ever_connected = true;
    setup::check_wal_level(&client).await?;
    let resolver_table = match settings.source {
        Source::Table => {
            setup::check_table(&client, &settings.table, &settings.mapping.column_names()).await?;
            let oid =
                publication::ensure(&client, &settings.publication, Some(&settings.table)).await?;
            outbox_oid.send_replace(oid);
            if settings.on_update != OnUpdate::Warn
                && !publication::publishes_updates(&client, &settings.publication, &settings.table)
                    .await?
            {
                warn!(
                    publication = %settings.publication,
                    "--on-update has no effect: the publication does not publish UPDATEs; \
                     run ALTER PUBLICATION … SET (publish = 'insert, update') to enforce it"
                );
            }
            Some(settings.table.clone())
        }
        Source::Messages => {
            setup::check_messages_supported(&client).await?;
            publication::ensure(&client, &settings.publication, None).await?;
            None
        }
    };
    let slot = setup::ensure_slot(
        &client,
        &SlotOptions {
            slot: &settings.slot,
            publication: &settings.publication,
            recreate_missing: settings.recreate_missing_slot,
            failover: settings.failover_slot,
        },
    )
    .await?;
    let read_timeout = match settings.replication_timeout {
        Some(timeout) => timeout,
        None => setup::wal_sender_timeout(&client)
            .await?
            .unwrap_or(DEFAULT_REPLICATION_TIMEOUT),
    };

    // 0/0 lets the server start from the slot's confirmed_flush_lsn; we log
    // the value we read so the resume point is visible.
    let (stream, status) = replication::start(
        &settings.pg,
        &settings.slot,
        &settings.publication,
        settings.source == Source::Messages,
        Lsn::ZERO,
    )
    .await?;
    info!(slot = %settings.slot, resume_lsn = %slot.confirmed_flush, "streaming started");
    let (producer, deliveries) = Producer::new(&settings.kafka, metrics.clone())?;
    Ok(SessionParts {
        stream,
        status,
        producer,
        deliveries,
        resolver: resolver_table.map(|table| RelationResolver {
            client,
            publication: settings.publication.clone(),
            table,
        }),
        confirmed: slot.confirmed_flush,
        read_timeout,
    })
}
