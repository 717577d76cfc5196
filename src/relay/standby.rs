//! Active/passive: while another process streams from the slot, or takes
//! its first start's snapshot (`postgres::snapshot_lock`), a standby
//! watches the slot over one SQL connection instead of opening a session
//! every poll, and logs one line per change of state (waiting, Postgres out
//! of reach, Postgres back, the slot free), not one per poll.

use tokio::sync::watch;
use tokio_postgres::Client;
use tracing::{info, warn};

use crate::config::Settings;
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::postgres::{setup, slot, snapshot_lock};

/// How a standby's wait ended.
pub(super) enum Wait {
    /// The slot is not held (or is gone): time for a session.
    SlotFree,
    Stopped,
}

/// What the last poll found.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Seen {
    Held,
    Unreachable,
}

/// Waits while another process holds the slot. `held` is the error that
/// made this walrelay a standby (it names the process).
pub(super) async fn wait(
    settings: &Settings,
    metrics: &Metrics,
    shutdown: &mut watch::Receiver<bool>,
    held: &Error,
) -> Wait {
    let interval = settings.timeouts.standby_poll_interval;
    info!(
        error = %held.report(),
        poll = ?interval,
        "the slot is held by another process; waiting as a standby"
    );
    metrics.set_standby(true);
    let mut seen = Seen::Held;
    let mut client: Option<Client> = None;
    let ended = loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.wait_for(|stop| *stop) => break Wait::Stopped,
        }
        match poll(settings, &mut client).await {
            Ok(true) => {
                if seen == Seen::Unreachable {
                    info!("the standby reaches Postgres again; the slot is still held, waiting");
                }
                metrics.set_standby(true);
                seen = Seen::Held;
            }
            Ok(false) => {
                info!(slot = %settings.slot, "the slot is free; taking over");
                break Wait::SlotFree;
            }
            Err(e) => {
                client = None;
                metrics.set_standby(false);
                if seen == Seen::Held {
                    warn!(
                        error = %e.report(),
                        "the standby cannot reach Postgres; it cannot take over until it \
                         does, and polls every --standby-poll-interval"
                    );
                }
                seen = Seen::Unreachable;
            }
        }
    };
    metrics.set_standby(false);
    ended
}

/// Whether some process streams from the slot now, or takes its snapshot
/// (the slot is inactive meanwhile: `snapshot_lock`). A silent server
/// counts as out of reach after --setup-timeout.
async fn poll(settings: &Settings, client: &mut Option<Client>) -> Result<bool> {
    let read = async {
        if client.as_ref().is_none_or(Client::is_closed) {
            *client = Some(setup::connect(&settings.pg).await?);
        }
        let c = client.as_ref().expect("connected above");
        if slot::read(c, &settings.slot)
            .await?
            .is_some_and(|r| r.active)
        {
            return Ok(true);
        }
        Ok(snapshot_lock::holder(c, &settings.slot).await?.is_some())
    };
    tokio::time::timeout(settings.timeouts.setup, read)
        .await
        .map_err(|_| Error::transient("Postgres did not answer within --setup-timeout"))?
}
