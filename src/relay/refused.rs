//! A stop that loses events unless an operator acts: the slot walrelay
//! streamed from is missing or lost, or the outbox it read was replaced or
//! left the publication (`StopCause`). An exit would take `/metrics` with
//! it, so `walrelay_slot_missing`, `walrelay_slot_wal_status{status="lost"}`
//! and `walrelay_publication_broken` (and the alerts on them) could never
//! show these stops: walrelay instead stays up, streams nothing, answers
//! `/readyz` with 503, repeats the error once a minute, and exits non-zero
//! when stopped. The watchdog meanwhile reports a missing slot (log,
//! webhook) as it does for a slot that vanishes under a running relay.

use std::time::Duration;

use tokio::sync::watch;
use tracing::error;

use crate::error::{Error, Result};
use crate::metrics::Metrics;

/// How often the refusal is repeated in the log.
const REPEAT: Duration = Duration::from_secs(60);

/// Holds walrelay until it is stopped, then returns the refusal.
pub(super) async fn hold(
    refusal: Error,
    metrics: &Metrics,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<()> {
    // A stop found while streaming ends the session without its own
    // goodbye: /readyz, the role and the cause's gauge are the cause's now.
    if let Some(cause) = refusal.stop_cause() {
        metrics.hold(cause);
    }
    let report = refusal.report();
    error!(
        "walrelay does not stream, and waits to be stopped so that /metrics keeps reporting \
         why: {report}"
    );
    loop {
        tokio::select! {
            _ = tokio::time::sleep(REPEAT) => error!("walrelay still does not stream: {report}"),
            _ = shutdown.wait_for(|stop| *stop) => return Err(refusal),
        }
    }
}
