//! `--delivery exactly-once` at the level of sessions: before the first
//! session creates anything, the broker is probed for transactions (and
//! the position topic made); each session, once it holds the slot, makes
//! its producer transactional (fencing every older one of the slot) and
//! reads back the position the last committed Kafka transaction recorded.
//! The apply loop reads past every Postgres transaction below it
//! (`publish::transaction`).
//!
//! A recorded position is used only on the server history it was written
//! on (system identifier and timeline: a promoted standby's WAL reuses
//! positions the old primary wrote) and never past the server's WAL flush
//! position; otherwise the session starts from the slot, and what it sends
//! again may be in Kafka twice (docs/delivery-guarantees.md).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::time::Instant;
use tracing::{info, warn};

use super::publish::transaction::{Memory, Run, TransactionMetrics};
use crate::config::{ExactlyOnce, Settings};
use crate::error::Result;
use crate::kafka::position::Position;
use crate::kafka::producer::KafkaSink;
use crate::kafka::transaction;
use crate::metrics::Metrics;
use crate::postgres::lsn::Lsn;
use crate::postgres::replication::SystemInfo;
use crate::relay::progress::Ticket;

/// What outlives sessions.
pub struct Shared {
    probed: AtomicBool,
    memory: Arc<Memory>,
    metrics: TransactionMetrics,
}

impl Shared {
    /// Registers the metrics of exactly-once delivery.
    pub fn new(metrics: &Metrics) -> Self {
        Shared {
            probed: AtomicBool::new(false),
            memory: Arc::default(),
            metrics: TransactionMetrics::register(metrics),
        }
    }
}

/// Before the first session creates anything: the broker must run
/// transactions. Once per process.
pub async fn probe(settings: &Settings, eos: &ExactlyOnce, shared: &Shared) -> Result<()> {
    if shared.probed.load(Ordering::Relaxed) {
        return Ok(());
    }
    let deadline = Instant::now() + settings.timeouts.setup;
    transaction::probe(
        &settings.kafka,
        &eos.position_topic,
        settings.topics.replication_factor,
        &settings.slot,
        deadline,
    )
    .await?;
    shared.probed.store(true, Ordering::Relaxed);
    Ok(())
}

/// Once the session holds the slot: the transactional producer, and where
/// to read past to.
pub async fn start(
    settings: &Settings,
    eos: &ExactlyOnce,
    shared: &Shared,
    sink: &mut KafkaSink<'_, Ticket>,
    system: &SystemInfo,
) -> Result<Run> {
    let deadline = Instant::now() + settings.timeouts.setup;
    let stored = sink
        .exactly_once(
            &eos.position_topic,
            &settings.slot,
            &system.server,
            deadline,
        )
        .await?;
    Ok(Run {
        skip_below: skip_below(stored, system),
        memory: shared.memory.clone(),
        metrics: shared.metrics.clone(),
    })
}

/// The recorded position, if it belongs to this server history and its WAL.
fn skip_below(stored: Option<Position>, system: &SystemInfo) -> Option<Lsn> {
    let position = stored?;
    if position.server() != system.server {
        info!(
            recorded = %position.lsn,
            timeline = position.timeline,
            "the position topic's record is of another timeline (a promoted standby): not \
             used; starting from the slot"
        );
        return None;
    }
    if position.lsn > system.flushed {
        warn!(
            recorded = %position.lsn,
            flushed = %system.flushed,
            "the position topic's record lies past the server's WAL (restored from a backup \
             on the same timeline?): not used; starting from the slot, and what is sent again \
             may reach Kafka twice"
        );
        return None;
    }
    Some(position.lsn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::state::ServerId;

    fn system(timeline: u32, flushed: u64) -> SystemInfo {
        SystemInfo {
            server: ServerId {
                system_id: "7412".into(),
                timeline,
            },
            flushed: Lsn(flushed),
        }
    }

    fn recorded(timeline: u32, lsn: u64) -> Option<Position> {
        Some(Position {
            slot: "walrelay".into(),
            system_id: "7412".into(),
            timeline,
            lsn: Lsn(lsn),
        })
    }

    #[test]
    fn a_position_is_read_past_only_on_its_own_timeline_and_within_the_servers_wal() {
        assert_eq!(
            skip_below(recorded(1, 500), &system(1, 900)),
            Some(Lsn(500))
        );
        assert_eq!(
            skip_below(recorded(1, 500), &system(2, 900)),
            None,
            "a promoted standby reuses positions"
        );
        assert_eq!(skip_below(recorded(1, 500), &system(1, 400)), None);
        assert_eq!(skip_below(None, &system(1, 900)), None);
    }
}
