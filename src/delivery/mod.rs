//! The per-event path, below every caller that sends events: the relay's
//! apply loop, the snapshot, replay and redrive's neighbours. It maps an
//! event's delivery into the order Postgres may be told about it:
//!
//! - `publish` hands mapped events to the `Sink` (one Kafka transaction at a
//!   time under `--exactly-once`, `publish::transaction`; records too large
//!   for the topic, `publish::oversized`);
//! - `progress` tracks what is in flight and what may be confirmed;
//! - `checkpoint` decides which commit LSN is safe to confirm;
//! - `poison` sends what cannot be published to the dead-letter topic, or
//!   stops with the fix; `dead_letter` is that record's format, which
//!   `redrive` and `audit` read.
//!
//! It knows nothing of sessions, slots or reconnects (`relay`), nor of
//! snapshots and replays (`lifecycle`): both sit above it.

pub mod checkpoint;
pub mod dead_letter;
pub(crate) mod poison;
pub mod progress;
pub mod publish;

pub use progress::{Ticket, TxnRef};
