//! A start refused because the slot walrelay streamed from is missing or
//! lost (`StopCause`). An exit would take `/metrics` with it, so
//! `walrelay_slot_missing` and `walrelay_slot_wal_status{status="lost"}`
//! (and WalrelaySlotMissing and WalrelaySlotWalUnreserved on them) could
//! never show the main cases of a lost slot: walrelay instead stays up, creates nothing, answers `/readyz`
//! with 503, repeats the error once a minute, and exits non-zero when
//! stopped. The watchdog meanwhile reports the missing slot (log, webhook)
//! as it does for a slot that vanishes under a running relay.

use std::time::Duration;

use tokio::sync::watch;
use tracing::error;

use crate::error::{Error, Result};

/// How often the refusal is repeated in the log.
const REPEAT: Duration = Duration::from_secs(60);

/// Holds walrelay until it is stopped, then returns the refusal.
pub(super) async fn hold(refusal: Error, shutdown: &mut watch::Receiver<bool>) -> Result<()> {
    let report = refusal.report();
    error!(
        "walrelay does not start, and waits to be stopped so that /metrics keeps reporting \
         the slot's state: {report}"
    );
    loop {
        tokio::select! {
            _ = tokio::time::sleep(REPEAT) => error!("walrelay still does not start: {report}"),
            _ = shutdown.wait_for(|stop| *stop) => return Err(refusal),
        }
    }
}
