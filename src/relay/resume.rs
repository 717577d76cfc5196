//! Where the next session starts.
//!
//! A logical slot's confirmed position reaches disk only at checkpoints, so
//! after a Postgres crash the slot falls back minutes, and a relay that
//! starts from it sends those minutes again. walrelay remembers what it
//! confirmed itself: in memory across sessions (a crash of Postgres alone),
//! and, for the positions that followed delivered events, in the state
//! table at most once a second (a restart of walrelay after such a crash).
//!
//! Why starting later than the slot is safe: `START_REPLICATION … LOGICAL
//! lsn` with an LSN past the slot's `confirmed_flush_lsn` makes the
//! walsender skip every transaction whose commit record lies before it
//! (PostgreSQL's `SnapBuildXactNeedsSkip`, the same mechanism a subscriber
//! uses with its replication origin), and a position walrelay confirmed
//! had everything before it acknowledged by Kafka. A position is used only
//! on the server history it was confirmed on, keyed by `IDENTIFY_SYSTEM`'s
//! system identifier and timeline (a promoted standby's WAL reuses
//! positions the old primary had used), and never past the server's WAL
//! flush position.
//!
//! On a standby (decoding there is PostgreSQL 16+) a session goes on through
//! the standby's promotion: the walsender keeps streaming, so positions
//! confirmed after it lie on the new timeline but carry the one the session
//! started on. They are never used on the promoted server, which reports
//! the new timeline from its next session on (that session starts from the
//! slot's own position: events may be sent again, none is skipped), nor on
//! its standbys, which follow that timeline. The state table rows with them
//! are written on the promoted server itself (`postgres::state::route`), so
//! the old primary never reads them; and a position remembered in memory
//! from a session on a standby is not used by a session on a primary
//! (`relay::open`), so a walrelay given the old primary too (several hosts
//! in `--pg-url`) cannot skip the old primary's own events there.

use std::time::Duration;

use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::config::Settings;
use crate::postgres::lsn::Lsn;
use crate::postgres::replication::SystemInfo;
use crate::postgres::setup;
use crate::postgres::state::ServerId;

/// Recorded in the state table at most this often.
const PERSIST_EVERY: Duration = Duration::from_secs(1);

/// What the relay has confirmed on one server history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confirmed {
    pub server: ServerId,
    /// Everything before it is delivered (keepalive positions included).
    pub lsn: Lsn,
    /// The end of the newest transaction with events among them.
    pub delivered: Lsn,
}

/// The position shared by every session of one walrelay.
pub type Position = watch::Sender<Option<Confirmed>>;

/// Where a session on `system` starts: the slot's own position, or a later
/// one walrelay remembers for the same server history.
pub fn start_point(
    slot_confirmed: Lsn,
    system: &SystemInfo,
    remembered: impl IntoIterator<Item = (ServerId, Lsn)>,
) -> Lsn {
    let mut start = slot_confirmed;
    for (server, lsn) in remembered {
        if server != system.server {
            debug!(
                remembered = %lsn,
                "a remembered position of another server history is not used"
            );
            continue;
        }
        if lsn > system.flushed {
            warn!(
                remembered = %lsn,
                flushed = %system.flushed,
                "a remembered position lies past the server's WAL; starting from the slot"
            );
            continue;
        }
        start = start.max(lsn);
    }
    if start > slot_confirmed {
        info!(
            slot_confirmed = %slot_confirmed,
            resume = %start,
            "the slot is behind what walrelay confirmed (Postgres restarted before saving it); \
             starting from the confirmed position, so Kafka does not get those events again"
        );
    }
    start
}

/// Records the delivered position in the state table, at most once a
/// second and only when events moved it (a write of its own must not
/// trigger the next one). Runs until the relay stops; failures are logged
/// once and retried.
pub async fn persist(settings: &Settings, mut position: watch::Receiver<Option<Confirmed>>) {
    let mut written: Option<Confirmed> = None;
    let mut warned = false;
    let mut client = None;
    let route = settings.state_route();
    loop {
        if position.changed().await.is_err() {
            return;
        }
        let Some(now) = position.borrow_and_update().clone() else {
            continue;
        };
        let moved = written
            .as_ref()
            .is_none_or(|w| w.server != now.server || w.delivered < now.delivered);
        if !moved {
            continue;
        }
        if client.is_none() {
            client = setup::connect(&settings.pg).await.ok();
        }
        let Some(c) = &client else {
            tokio::time::sleep(PERSIST_EVERY).await;
            continue;
        };
        let recorded = match route.client(c).await {
            Ok(state) => settings
                .state_table
                .record_delivered(
                    &state,
                    &settings.slot,
                    now.delivered,
                    &now.server,
                    settings.exactly_once.is_some(),
                )
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.report()),
        };
        match recorded {
            Ok(()) => {
                written = Some(now);
                warned = false;
            }
            Err(e) => {
                if !warned {
                    warn!(error = %e, "cannot record the delivered position in the state table; \
                          a restart after a Postgres crash may send more events again");
                    warned = true;
                }
                client = None;
            }
        }
        tokio::time::sleep(PERSIST_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn system(timeline: u32, flushed: u64) -> SystemInfo {
        SystemInfo {
            server: server(timeline),
            flushed: Lsn(flushed),
        }
    }

    fn server(timeline: u32) -> ServerId {
        ServerId {
            system_id: "7412".into(),
            timeline,
        }
    }

    #[test]
    fn a_session_starts_from_what_walrelay_confirmed_when_the_slot_fell_back() {
        let start = start_point(Lsn(100), &system(1, 900), [(server(1), Lsn(500))]);
        assert_eq!(start, Lsn(500));
        // Never earlier than the slot.
        let start = start_point(Lsn(600), &system(1, 900), [(server(1), Lsn(500))]);
        assert_eq!(start, Lsn(600));
    }

    #[test]
    fn a_position_of_another_timeline_or_past_the_servers_wal_is_not_used() {
        let promoted = start_point(Lsn(100), &system(2, 900), [(server(1), Lsn(500))]);
        assert_eq!(promoted, Lsn(100), "a promoted standby reuses positions");
        let past = start_point(Lsn(100), &system(1, 400), [(server(1), Lsn(500))]);
        assert_eq!(past, Lsn(100));
    }
}
