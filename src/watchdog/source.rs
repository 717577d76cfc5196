//! The watchdog's second job: noticing that what feeds the slot has changed
//! under a running relay. A dropped, recreated or renamed outbox table, or
//! one removed from the publication (even if added back since), publishes
//! nothing in between, and the relay would go on confirming keepalives over
//! events it can no longer see. Another instance that recorded other
//! settings for the slot takes it over. A slot that existed and is gone is
//! reported too.

use std::time::Duration;

use serde_json::json;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_postgres::Client;
use tracing::{debug, error, info, warn};

use super::Webhook;
use crate::error::{Error, Result, StopCause};
use crate::metrics::Metrics;
use crate::postgres::lsn::Lsn;
use crate::postgres::names::TableName;
use crate::postgres::state::decide::differences;
use crate::postgres::state::recovery::missing_slot_error;
use crate::postgres::state::{Accepted, StateRoute, StateTable};
use crate::postgres::{publication, setup, PgTarget};

/// How often the state table records that the outbox was found intact: a
/// write, so not at every check. A change is dated from the last record.
const VERIFIED_REFRESH: Duration = Duration::from_secs(60);

/// What the watchdog watches.
pub struct Watched {
    pub pg: PgTarget,
    pub slot: String,
    pub publication: String,
    pub state_table: StateTable,
    /// Where the state table is read and written (the primary, when
    /// `pg` is a standby).
    pub state: StateRoute,
    /// This instance's `Settings::published`.
    pub settings: serde_json::Value,
    /// The outbox tables (none for the table-less outbox).
    pub tables: Vec<TableName>,
    /// The tables as the current session accepted them, in order.
    pub outbox: watch::Receiver<Accepted>,
}

/// State kept between checks.
#[derive(Default)]
pub struct SourceWatch {
    slot_missing: bool,
    /// The WAL position of the last check that found the outbox intact.
    verified: Option<Lsn>,
    verified_written: Option<Instant>,
}

impl SourceWatch {
    /// Checks the publication and the slot's recorded settings; an error is
    /// fatal: the relay must stop.
    pub async fn check_source(
        &mut self,
        client: &Client,
        watched: &Watched,
        metrics: &Metrics,
        webhook: Option<&Webhook>,
    ) -> Result<()> {
        // Read first: every change committed before it shows in what follows.
        let wal_now = setup::current_wal_lsn(client).await?;
        let accepted = watched.outbox.borrow().clone();
        let mut found = None;
        // Before the first session accepted the tables there is nothing to compare.
        for (table, identity) in watched.tables.iter().zip(&accepted.outbox) {
            let binding = publication::inspect(client, &watched.publication, table).await?;
            if let Some(problem) = binding.problem(&watched.publication, table, Some(identity)) {
                found = Some((table, problem));
                break;
            }
        }
        if let Some((table, problem)) = found {
            metrics.set_publication_broken(true);
            let from = self.verified.unwrap_or(Lsn::ZERO).max(accepted.intact_at);
            error!(
                publication = %watched.publication,
                table = %table,
                level = "critical",
                cause = "publication_changed",
                "{problem}"
            );
            post(webhook, "publication_changed", &problem.to_string()).await;
            return Err(Error::permanent(format!(
                "walrelay stopped because the outbox is no longer published as it was: {problem}. \
                 Events committed between LSN {from} and {wal_now} may be missing from Kafka: \
                 publish them again (same event ids; docs/operations.md, \"Publishing events \
                 again\"), then restart walrelay (with --accept-outbox-change if the table is \
                 published again)"
            ))
            .with_fix(format!(
                "{}; publish the events committed between LSN {from} and {wal_now} again, then \
                 restart walrelay (with --accept-outbox-change if the table is published again)",
                problem.fix
            ))
            .with_cause(StopCause::OutboxChanged)
            .with_at_risk(from.0, Some(wal_now.0)));
        }
        metrics.set_publication_broken(false);
        if !accepted.outbox.is_empty() {
            self.verified(client, watched, wal_now).await;
            metrics.set_outbox_verified(wal_now.0);
        }
        self.check_settings(client, watched).await
    }

    /// Dates the intact outbox in the state table now and then.
    async fn verified(&mut self, client: &Client, watched: &Watched, wal_now: Lsn) {
        self.verified = Some(wal_now);
        if self
            .verified_written
            .is_some_and(|at| at.elapsed() < VERIFIED_REFRESH)
        {
            return;
        }
        let recorded = match watched.state.client(client).await {
            Ok(state) => watched
                .state_table
                .record_verified(&state, &watched.slot, wal_now)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.report()),
        };
        if let Err(e) = recorded {
            debug!(error = %e, "watchdog cannot record the verified position");
        }
        self.verified_written = Some(Instant::now());
    }

    /// Another instance recorded other settings for the slot (a deliberate
    /// change with --accept-config-change): it reads the slot from now on.
    async fn check_settings(&self, client: &Client, watched: &Watched) -> Result<()> {
        let reader = match watched.state.client(client).await {
            Ok(reader) => reader,
            // A primary (--pg-primary-url) out of reach records no other
            // settings either.
            Err(e) if e.is_transient() => {
                debug!(error = %e.report(), "watchdog cannot reach the state table");
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let state = watched
            .state_table
            .peek(&reader, &watched.publication, &watched.slot)
            .await?;
        let Some(recorded) = state.and_then(|s| s.settings) else {
            return Ok(());
        };
        let differences = differences(&recorded, &watched.settings);
        if differences.is_empty() {
            return Ok(());
        }
        Err(Error::permanent(format!(
            "another walrelay recorded other settings for slot {:?} ({}): it reads the slot from \
             now on, so this one stopped rather than confirm past events only the other \
             publishes",
            watched.slot,
            differences.join("; ")
        ))
        .with_cause(StopCause::SettingsChanged))
    }

    /// Called when the slot does not exist: an error if it existed before.
    pub async fn slot_absent(
        &mut self,
        client: &Client,
        watched: &Watched,
        metrics: &Metrics,
        webhook: Option<&Webhook>,
    ) {
        let read = async {
            let state = watched.state.client(client).await?;
            watched
                .state_table
                .peek(&state, &watched.publication, &watched.slot)
                .await
        };
        let state = match read.await {
            Ok(state) => state,
            Err(e) => {
                debug!(error = %e.report(), "watchdog cannot read the slot's state");
                return;
            }
        };
        let Some(state) = state.filter(|s| s.created.is_some()) else {
            debug!(slot = %watched.slot, "watchdog: slot does not exist yet");
            return;
        };
        metrics.set_slot_missing(true);
        // The log says critical: so does the level the alerts read.
        metrics.set_alert_level(crate::watchdog::Level::Critical as i64);
        if !self.slot_missing {
            let problem = missing_slot_error(&watched.slot, &state).to_string();
            error!(slot = %watched.slot, level = "critical", cause = "slot_missing", "{problem}");
            post(webhook, "slot_missing", &problem).await;
        }
        self.slot_missing = true;
    }

    /// Called when the slot exists.
    pub fn slot_present(&mut self, watched: &Watched, metrics: &Metrics) {
        metrics.set_slot_missing(false);
        if self.slot_missing {
            info!(slot = %watched.slot, "replication slot exists again");
        }
        self.slot_missing = false;
    }
}

async fn post(webhook: Option<&Webhook>, cause: &str, problem: &str) {
    if let Some(webhook) = webhook {
        let body = json!({ "level": "critical", "cause": cause, "hint": problem });
        if let Err(e) = webhook.post(&body).await {
            warn!(error = %e.report(), "alert webhook failed");
        }
    }
}
