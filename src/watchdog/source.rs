//! The watchdog's second job: noticing that what feeds the slot has changed
//! under a running relay. A dropped, recreated or renamed outbox table, or
//! one removed from the publication, publishes nothing, and the relay would
//! go on confirming keepalives over events it can no longer see. A slot that
//! existed and is gone is reported too, and the slot's history in the
//! database keeps the last confirmed LSN for the day it is lost.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::watch;
use tokio_postgres::Client;
use tracing::{debug, error, info};

use super::Webhook;
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::postgres::names::TableName;
use crate::postgres::slot_history;
use crate::postgres::{publication, PgTarget};

/// How often the slot's history records the confirmed LSN: a catalog write,
/// so not at every check.
const HISTORY_REFRESH: Duration = Duration::from_secs(60);

/// What the watchdog watches.
pub struct Watched {
    pub pg: PgTarget,
    pub slot: String,
    pub publication: String,
    /// The outbox tables (none for the table-less outbox).
    pub tables: Vec<TableName>,
    /// The tables' oids, in order, when the current session checked them.
    pub outbox_oids: watch::Receiver<Vec<u32>>,
}

/// State kept between checks.
#[derive(Default)]
pub struct SourceWatch {
    slot_missing: bool,
    history_written: Option<Instant>,
}

impl SourceWatch {
    /// Checks the publication; an error is fatal: the relay must stop.
    pub async fn check_publication(
        &mut self,
        client: &Client,
        watched: &Watched,
        metrics: &Metrics,
        webhook: Option<&Webhook>,
    ) -> Result<()> {
        let expected = watched.outbox_oids.borrow().clone();
        let mut found = None;
        // Before the first session checked the tables there is nothing to compare.
        for (table, oid) in watched.tables.iter().zip(expected) {
            let binding = publication::inspect(client, &watched.publication, table).await?;
            if let Some(problem) = binding.problem(&watched.publication, table, Some(oid)) {
                found = Some((table, problem));
                break;
            }
        }
        let Some((table, problem)) = found else {
            metrics.set_publication_broken(false);
            return Ok(());
        };
        metrics.set_publication_broken(true);
        error!(
            publication = %watched.publication,
            table = %table,
            level = "critical",
            cause = "publication_changed",
            "{problem}"
        );
        post(webhook, "publication_changed", &problem).await;
        Err(Error::permanent(format!(
            "walrelay stopped because the outbox is no longer published: {problem}"
        )))
    }

    /// Called when the slot does not exist: an error if it existed before.
    pub async fn slot_absent(
        &mut self,
        client: &Client,
        watched: &Watched,
        metrics: &Metrics,
        webhook: Option<&Webhook>,
    ) {
        let history = match slot_history::read(client, &watched.publication, &watched.slot).await {
            Ok(history) => history,
            Err(e) => {
                debug!(error = %e.report(), "watchdog cannot read the slot's history");
                return;
            }
        };
        let Some(history) = history else {
            debug!(slot = %watched.slot, "watchdog: slot does not exist yet");
            return;
        };
        metrics.set_slot_missing(true);
        if !self.slot_missing {
            let problem = slot_history::missing_slot_error(&watched.slot, &history).to_string();
            error!(slot = %watched.slot, level = "critical", cause = "slot_missing", "{problem}");
            post(webhook, "slot_missing", &problem).await;
        }
        self.slot_missing = true;
    }

    /// Called when the slot exists: records its confirmed LSN now and then.
    pub async fn slot_present(&mut self, client: &Client, watched: &Watched, metrics: &Metrics) {
        metrics.set_slot_missing(false);
        if self.slot_missing {
            info!(slot = %watched.slot, "replication slot exists again");
        }
        self.slot_missing = false;
        if self
            .history_written
            .is_some_and(|at| at.elapsed() < HISTORY_REFRESH)
        {
            return;
        }
        if let Err(e) =
            slot_history::record_confirmed(client, &watched.publication, &watched.slot).await
        {
            debug!(error = %e.report(), "watchdog cannot update the slot's history");
        }
        self.history_written = Some(Instant::now());
    }
}

async fn post(webhook: Option<&Webhook>, cause: &str, problem: &str) {
    if let Some(webhook) = webhook {
        let body = json!({ "level": "critical", "cause": cause, "hint": problem });
        if let Err(e) = webhook.post(&body).await {
            tracing::warn!(error = %e.report(), "alert webhook failed");
        }
    }
}
