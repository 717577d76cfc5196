//! `KafkaSink`'s transactional side, for `--delivery exactly-once`: the
//! producer made transactional once a session holds the slot, a Kafka
//! transaction opened at a record, and each commit closed with the
//! position record (`kafka::position`). The transaction calls themselves
//! and what their errors mean are `kafka::transaction`'s.

use std::sync::Arc;

use rdkafka::producer::{BaseRecord, Producer};
use tokio::time::Instant;

use super::{own_record, InFlight, KafkaSink, TopicHandles};
use crate::error::{Error, Result};
use crate::kafka::position::{self, Position};
use crate::kafka::transaction::{
    abort, abort_then_commit, blocking, commit, failed, init, transactional_id, Lane,
    TransactionalId,
};
use crate::postgres::lsn::Lsn;
use crate::postgres::state::ServerId;
use crate::sink::{Closing, Refusal, Rejection};

/// A session's transactions, once its producer is transactional.
pub struct Transactional {
    id: Arc<TransactionalId>,
    topic: String,
    /// The position record's key and what it says besides the LSN.
    key: String,
    position: Position,
    /// A transaction is open (begun, not yet committed or aborted).
    open: bool,
}

impl<T: Send + Sync + 'static> KafkaSink<'_, T> {
    /// Exactly once, once the session holds the slot: a transactional
    /// producer of the slot's `transactional.id` (which fences every older
    /// one and aborts what it left open), once the one an earlier session
    /// of this process made is gone (`lane`), and the position the last
    /// committed Kafka transaction recorded for the slot, read back with
    /// read_committed (`kafka::position`). By `deadline`.
    pub async fn exactly_once(
        &mut self,
        position_topic: &str,
        slot: &str,
        server: &ServerId,
        lane: &Lane,
        deadline: Instant,
    ) -> Result<Option<Position>> {
        let id = TransactionalId::new(
            transactional_id(&server.system_id, slot),
            &self.parts.config,
        );
        let permit = lane.take(deadline).await?;
        let producer = self.parts.producer(Some((&id, permit)))?;
        // The former producer's topic handles go before it can.
        self.handles = TopicHandles::new(producer.clone());
        self.producer = producer.clone();
        let sync_key = position::sync_key(&server.system_id, slot);
        let sync = format!("{}-{}", std::process::id(), crate::clock::unix_now_us());
        let (record_id, record_key, record_value) = (id.clone(), sync_key.clone(), sync.clone());
        let topic = position_topic.to_string();
        blocking(move || {
            init(&producer, &record_id, deadline)?;
            // What an older producer left open on the partition is aborted
            // before the sync record's commit could commit it.
            let record = |value| position_record(&topic, &record_key, value);
            abort_then_commit(&producer, &record_id, record, record_value.as_bytes())
        })
        .await?;
        let key = position::key(&server.system_id, slot);
        let config = position::reader_config(&self.parts.config);
        let (topic, read_key) = (position_topic.to_string(), key.clone());
        let stored = blocking(move || {
            position::read(
                &config,
                &topic,
                &read_key,
                &sync_key,
                sync.as_bytes(),
                deadline,
            )
        })
        .await?;
        self.transaction = Some(Transactional {
            id,
            topic: position_topic.to_string(),
            key,
            position: Position {
                slot: slot.to_string(),
                system_id: server.system_id.clone(),
                timeline: server.timeline,
                lsn: Lsn::ZERO,
            },
            open: false,
        });
        Ok(stored)
    }

    /// Opens a transaction for the next record, if none is open.
    pub(super) fn begin(&mut self) -> std::result::Result<(), Refusal> {
        let Some(t) = &mut self.transaction else {
            return Ok(());
        };
        if t.open {
            return Ok(());
        }
        self.producer.begin_transaction().map_err(|e| Refusal {
            rejection: Rejection::Retriable,
            message: failed(&self.producer, "opening a transaction", &t.id)(e).report(),
        })?;
        t.id.begun();
        t.open = true;
        Ok(())
    }

    /// Sink::commit: the position record last, then the commit off the
    /// async runtime.
    pub(super) fn commit_transaction(&mut self, lsn: Lsn) -> Closing {
        if let Err(refusal) = self.begin() {
            return Closing::ready(Err(Error::transient(refusal.message)));
        }
        let Some(t) = &mut self.transaction else {
            return Closing::ready(Err(Error::permanent("this producer is not transactional")));
        };
        t.position.lsn = lsn;
        let value = t.position.encode();
        let record = position_record(&t.topic, &t.key, &value);
        // Last in the transaction, so it commits with every record before it.
        if let Err((e, _)) = self.producer.send(record) {
            let error = failed(&self.producer, "recording the position", &t.id)(e);
            return Closing::ready(Err(error));
        }
        t.open = false;
        let (producer, id) = (self.producer.clone(), t.id.clone());
        // Given up once the session ends: the next one's producer waits for
        // this one to be gone.
        off_thread(move || commit(&producer, &id, || producer.context().is_retired()))
    }

    /// Sink::abort.
    pub(super) fn abort_transaction(&mut self) -> Closing {
        match &mut self.transaction {
            Some(t) if t.open => {
                t.open = false;
                let (producer, id) = (self.producer.clone(), t.id.clone());
                off_thread(move || abort(&producer, &id))
            }
            _ => Closing::ready(Ok(())),
        }
    }
}

/// A record of walrelay's own on the position topic's partition.
fn position_record<'a, T: Send + Sync>(
    topic: &'a str,
    key: &'a str,
    value: &'a [u8],
) -> BaseRecord<'a, [u8], [u8], Box<InFlight<T>>> {
    BaseRecord::with_opaque_to(topic, own_record())
        .partition(position::PARTITION)
        .key(key.as_bytes())
        .payload(value)
}

/// Runs a blocking commit or abort, its outcome told through a `Closing`.
fn off_thread(call: impl FnOnce() -> Result<()> + Send + 'static) -> Closing {
    let (tx, closing) = Closing::pending();
    tokio::task::spawn_blocking(move || {
        let _ = tx.send(call());
    });
    closing
}
