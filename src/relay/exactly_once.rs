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
//!
//! Kafka can lose a transaction it reported committed: a broker that
//! restarts uncleanly may complete a commit without writing its markers to
//! the partitions it finds without a leader (the coordinator takes them
//! for deleted), and the next abort by the same producer id then aborts
//! those records. The position read back is then older than one walrelay
//! committed: this process (its memory), or any process before it on the
//! slot, a restart or a replica that took over (the state table's
//! `kafka_committed`, `postgres::state::committed`). When the slot has
//! moved past it, those events can no longer be read again: walrelay
//! stops, naming them, rather than go on without them (`lost_in_kafka`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::time::Instant;
use tracing::{info, warn};

use crate::config::{ExactlyOnce, Settings};
use crate::delivery::progress::Ticket;
use crate::delivery::publish::transaction::{Memory, Run, TransactionMetrics};
use crate::error::{Error, Result, StopCause};
use crate::kafka::position::Position;
use crate::kafka::producer::KafkaSink;
use crate::kafka::transaction;
use crate::metrics::Metrics;
use crate::postgres::lsn::Lsn;
use crate::postgres::replication::SystemInfo;
use crate::postgres::state::ServerId;

/// What outlives sessions.
pub struct Shared {
    probed: AtomicBool,
    memory: Arc<Memory>,
    metrics: TransactionMetrics,
    /// One transactional producer of the slot at a time in this process.
    lane: transaction::Lane,
}

impl Shared {
    /// Registers the metrics of exactly-once delivery.
    pub fn new(metrics: &Metrics) -> Self {
        Shared {
            probed: AtomicBool::new(false),
            memory: Arc::default(),
            metrics: TransactionMetrics::register(metrics),
            lane: transaction::Lane::default(),
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

/// Once the session holds the slot, reading from `start`: the
/// transactional producer, and where to read past to.
pub async fn start(
    settings: &Settings,
    eos: &ExactlyOnce,
    shared: &Shared,
    sink: &mut KafkaSink<'_, Ticket>,
    system: &SystemInfo,
    start: Lsn,
    recorded: Option<(ServerId, Lsn)>,
) -> Result<Run> {
    let deadline = Instant::now() + settings.timeouts.setup;
    let stored = sink
        .exactly_once(
            &eos.position_topic,
            &settings.slot,
            &system.server,
            &shared.lane,
            deadline,
        )
        .await?;
    let committed = newest_on(&system.server, shared.memory.last_committed(), recorded);
    if let Some((from, to)) =
        lost_in_kafka(committed.clone(), stored.as_ref(), &system.server, start)
    {
        return Err(kafka_lost(&settings.slot, &eos.position_topic, from, to));
    }
    let of_this_history = stored.as_ref().filter(|p| p.server() == system.server);
    match (committed, of_this_history) {
        (Some((_, lsn)), None) => warn!(
            committed = %lsn,
            position_topic = %eos.position_topic,
            resume = %start,
            "the position topic holds no position of this server history, though walrelay \
             committed up to the one named (was the topic deleted or replaced?); starting from \
             the slot, and taking what came before it as in Kafka"
        ),
        (Some((_, lsn)), Some(p)) if p.lsn < lsn => warn!(
            committed = %lsn,
            recorded = %p.lsn,
            "the position topic holds less than walrelay committed to it; the slot is before \
             that, so what Kafka lost is read again and sent"
        ),
        _ => {}
    }
    Ok(Run {
        skip_below: skip_below(stored, system),
        server: system.server.clone(),
        memory: shared.memory.clone(),
        metrics: shared.metrics.clone(),
    })
}

/// The newer of two committed positions on `server`'s history; one of
/// another history says nothing about this one.
fn newest_on(
    server: &ServerId,
    a: Option<(ServerId, Lsn)>,
    b: Option<(ServerId, Lsn)>,
) -> Option<(ServerId, Lsn)> {
    [a, b]
        .into_iter()
        .flatten()
        .filter(|(on, _)| on == server)
        .max_by_key(|(_, lsn)| *lsn)
}

/// The WAL range whose events Kafka lost after reporting their transaction
/// committed, if the slot has moved past them: this process committed the
/// position `committed` on `server`, and the position topic now records
/// less (`stored`), while the session reads from `start`.
fn lost_in_kafka(
    committed: Option<(ServerId, Lsn)>,
    stored: Option<&Position>,
    server: &ServerId,
    start: Lsn,
) -> Option<(Lsn, Lsn)> {
    let (on, committed) = committed.filter(|(on, _)| on == server)?;
    // No record of this history at all: a topic deleted or replaced by an
    // operator, not a commit lost; the slot decides (warned above).
    let stored = stored.filter(|p| p.server() == on)?;
    (stored.lsn < committed && start > stored.lsn).then(|| (stored.lsn, committed.min(start)))
}

fn kafka_lost(slot: &str, position_topic: &str, from: Lsn, to: Lsn) -> Error {
    Error::permanent(format!(
        "Kafka lost transactions it had reported committed: walrelay committed positions of \
         slot {slot} up to {to}, and the position topic {position_topic} now records only \
         {from}. Events of the Postgres transactions that committed between {from} and {to} \
         are not seen by read_committed consumers, and the slot has moved past them, so \
         walrelay stopped rather than go on without them. A broker that restarted uncleanly \
         does this when it completes a commit without writing its markers to partitions it \
         finds without a leader. Find the missing events with walrelay audit --since (a \
         window covering the last minutes before the broker restarted), publish them again \
         with walrelay replay --where \"id IN (…)\", check for hanging transactions \
         (kafka-transactions.sh find-hanging), then start walrelay again"
    ))
    .with_cause(StopCause::KafkaLostCommit)
    .with_at_risk(from.0, Some(to.0))
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
    fn a_commit_kafka_lost_stops_walrelay_only_when_the_slot_moved_past_it() {
        let on = system(1, 900).server;
        let committed = Some((on.clone(), Lsn(700)));
        let stored = recorded(1, 500);
        // The slot moved past the lost commit: its events cannot be read again.
        assert_eq!(
            lost_in_kafka(committed.clone(), stored.as_ref(), &on, Lsn(700)),
            Some((Lsn(500), Lsn(700)))
        );
        assert_eq!(
            lost_in_kafka(committed.clone(), stored.as_ref(), &on, Lsn(600)),
            Some((Lsn(500), Lsn(600)))
        );
        // The slot is before it: the session reads them again and sends them.
        assert_eq!(
            lost_in_kafka(committed.clone(), stored.as_ref(), &on, Lsn(500)),
            None
        );
        // Kafka holds all that was committed.
        assert_eq!(
            lost_in_kafka(committed.clone(), recorded(1, 700).as_ref(), &on, Lsn(700)),
            None
        );
        // Another server history, nothing committed here, or no record at all.
        assert_eq!(
            lost_in_kafka(
                committed.clone(),
                stored.as_ref(),
                &system(2, 900).server,
                Lsn(700)
            ),
            None
        );
        assert_eq!(lost_in_kafka(None, stored.as_ref(), &on, Lsn(700)), None);
        assert_eq!(lost_in_kafka(committed, None, &on, Lsn(700)), None);
    }

    #[test]
    fn what_another_process_committed_counts_as_much_as_what_this_one_did() {
        let on = system(1, 900).server;
        let other = system(2, 900).server;
        // A restart or a takeover: nothing in memory, the state table's record.
        assert_eq!(
            newest_on(&on, None, Some((on.clone(), Lsn(700)))),
            Some((on.clone(), Lsn(700)))
        );
        assert_eq!(
            newest_on(
                &on,
                Some((on.clone(), Lsn(800))),
                Some((on.clone(), Lsn(700)))
            ),
            Some((on.clone(), Lsn(800)))
        );
        // Another server history's record says nothing about this one.
        assert_eq!(newest_on(&on, None, Some((other.clone(), Lsn(700)))), None);
        assert_eq!(
            newest_on(&on, Some((other, Lsn(900))), Some((on.clone(), Lsn(700)))),
            Some((on, Lsn(700)))
        );
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

    #[test]
    fn a_commit_kafka_lost_is_its_own_stop_cause_and_names_the_range() {
        let error = kafka_lost("walrelay", "walrelay.positions", Lsn(500), Lsn(700));
        assert_eq!(error.stop_cause(), Some(StopCause::KafkaLostCommit));
        let text = error.to_string();
        assert!(text.contains("between 0/1F4 and 0/2BC"), "{text}");
        let risk = error.at_risk().expect("a range at risk");
        assert_eq!((risk.after, risk.through), (500, Some(700)));
    }
}
