//! One oversized record must not take its neighbours with it. A broker
//! judges `max.message.bytes` per batch and refuses the whole batch for one
//! record over it; librdkafka reports every record of the batch with the
//! same error and does not split it. So a record refused for size is only
//! a suspect: it is sent again *alone*, with nothing else in flight, which
//! puts it in a batch of its own, and only a refusal then makes it poison.
//!
//! Most such refusals never happen: a record over its topic's known limit
//! is poison before it is sent, one that may fit (compressed, or against a
//! limit assumed because the topic's could not be read) is sent alone from
//! the start, and so is every record to a topic whose limit is below the
//! producer's batches (`TopicManager::fit_batches`: librdkafka's
//! `batch.size` is one for all topics, and shrinking it for one small
//! topic would slow all the others). What is left is a limit that changed
//! under a running relay. Then records produced after
//! the refused batch may reach the partition before the suspects sent
//! again: the one case where walrelay's first deliveries leave commit order
//! (docs/delivery-guarantees.md).

use tracing::warn;

use super::{transaction, Publisher};
use crate::delivery::poison::{text, Poisoned};
use crate::delivery::progress::{Progress, Ticket};
use crate::error::{Error, Result};
use crate::sink::{Failure, Rejection, SendError, Sink};

/// A record whose batch was refused for size, still counted in flight.
pub struct Suspect {
    pub ticket: Ticket,
    pub failure: Failure,
}

impl<S: Sink<Ticket>> Publisher<'_, S> {
    /// Takes deliveries until the only records in flight are the ones this
    /// publisher holds itself (suspects, and refused records waiting for the
    /// policy): the next record sent travels alone.
    pub(super) async fn until_only_held_in_flight(
        &mut self,
        progress: &mut Progress,
    ) -> Result<()> {
        self.until_in_flight_at_most(progress, 0).await
    }

    /// Takes deliveries until the only records in flight are the ones this
    /// publisher holds itself, and `others` more it knows of.
    pub(super) async fn until_in_flight_at_most(
        &mut self,
        progress: &mut Progress,
        others: usize,
    ) -> Result<()> {
        while progress.inflight_events() > self.held_in_flight() + others {
            self.take_delivery(progress).await?;
        }
        Ok(())
    }

    /// Records in flight that this publisher holds itself: suspects, and
    /// refused records waiting for the policy.
    fn held_in_flight(&self) -> usize {
        self.suspects.len()
            + self
                .rejected
                .iter()
                .filter(|p| p.inflight_bytes.is_some())
                .count()
    }

    /// Whether the loop may read and send more: not while a record must
    /// travel alone, or travels alone now, nor while the sink's
    /// transaction is being closed.
    pub fn ready_for_more(&self) -> bool {
        !self.alone_in_flight
            && self.suspects.is_empty()
            && !self
                .transactions
                .as_ref()
                .is_some_and(transaction::Transactions::is_closing)
    }

    /// Sends the first suspect again, alone, once nothing else is in
    /// flight; its outcome comes back as any delivery does (the loop keeps
    /// reporting meanwhile): an acknowledgement, or a refusal that is now
    /// its own and makes it poison.
    pub(super) fn send_suspect_alone(&mut self, progress: &mut Progress) -> Result<()> {
        if self.alone_in_flight || progress.inflight_events() > self.held_in_flight() {
            return Ok(());
        }
        let Some(Suspect {
            mut ticket,
            failure,
        }) = self.suspects.pop_front()
        else {
            return Ok(());
        };
        // Said once for the records refused together, not once each.
        if !self.probing {
            warn!(
                records = self.suspects.len() + 1,
                first_event_id = %text(ticket.event_id.as_ref()),
                topic = %failure.record.topic,
                refusal = %failure.refusal,
                "Kafka refused a batch for its size; sending its records again one by one to \
                 find the one that is too large"
            );
        }
        self.probing = !self.suspects.is_empty();
        ticket.alone = true;
        let Failure {
            record,
            refusal: first,
        } = failure;
        // Still counted in flight from its first send: not booked again.
        match self.sink.send(
            &record.as_record(ticket.timestamp_ms),
            ticket.clone(),
            std::time::Instant::now(),
        ) {
            Ok(()) => self.alone_in_flight = true,
            // Nothing else is in flight, so a full queue cannot last: later.
            Err(SendError::Full(_)) => {
                ticket.alone = false;
                let failure = Failure {
                    refusal: first,
                    record,
                };
                self.suspects.push_front(Suspect { ticket, failure });
            }
            Err(SendError::Refused(refusal)) if refusal.rejection == Rejection::Retriable => {
                return Err(
                    Error::transient("cannot hand a record to the Kafka producer again")
                        .with_source(refusal),
                )
            }
            // Refused before it left, alone: as if the broker had.
            Err(SendError::Refused(refusal)) => {
                let failure = Failure { refusal, record };
                self.rejected
                    .push_back(Poisoned::undelivered(ticket, failure));
            }
        }
        Ok(())
    }
}
