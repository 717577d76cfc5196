//! The apply loop's other seam: where replication messages come from,
//! where status updates go, and who places a relation the stream names.
//! `PgUpstream` is the real one; tests replay captured messages instead.
//!
//! `Liveness` tells a quiet server from a dead one on the same connection.

use std::time::Duration;

use tokio::time::Instant;
use tracing::warn;

use crate::error::{Error, Result};
use crate::postgres::lsn::Lsn;
use crate::postgres::pgoutput::{Relation, BEGIN_TAG, COMMIT_TAG};
use crate::postgres::placement::{RelationResolver, RelationRole};
use crate::postgres::replication::{ReplicationMessage, ReplicationStream, StatusSender};

/// Walrelay calls upstreams through generics only, so the `async fn`s here
/// need no `Send` bound.
#[allow(async_fn_in_trait)]
pub trait Upstream {
    /// The next replication message. Cancel-safe.
    async fn next(&mut self) -> Result<ReplicationMessage>;

    /// A standby status update: `confirmed` is where the slot may move.
    /// `reply_requested` asks the server for a keepalive at once.
    async fn report(&mut self, received: Lsn, confirmed: Lsn, reply_requested: bool) -> Result<()>;

    /// Where a relation named for the first time in this session belongs.
    async fn place(&mut self, relation: &Relation) -> Result<RelationRole>;

    /// Ends the stream politely.
    async fn close(self);
}

/// The replication connection of one session, with the catalog connection
/// that places relations (None for `--source messages`, which has no table).
pub struct PgUpstream {
    pub stream: ReplicationStream,
    pub status: StatusSender,
    pub resolver: Option<RelationResolver>,
    /// The longest a catalog query may take (the replication read timeout).
    pub query_timeout: Duration,
    pub batching: ReadBatching,
}

/// Reads in batches at the rate services write: once the socket is empty,
/// the next look is `window` later instead of at the next byte, so the
/// transactions that commit meanwhile cost one wake-up, not one each (over
/// TCP the socket's own wake-ups are held back meanwhile: `ReadHold`).
/// Idle, the stream is waited on as usual (no timer ticks); in a backlog
/// the socket is never empty, so a drain never pauses. Nor does a
/// transaction whose rest the walsender is still decoding: pausing inside
/// it would hold back all of its events and save no wake-up worth having.
#[derive(Debug, Default)]
pub struct ReadBatching {
    window: Duration,
    /// Kept across calls: `next` may be dropped mid-pause (it is cancel-safe).
    pause_until: Option<Instant>,
    /// Between a Begin and its Commit.
    in_transaction: bool,
}

impl ReadBatching {
    pub fn new(window: Duration) -> Self {
        ReadBatching {
            window,
            pause_until: None,
            in_transaction: false,
        }
    }

    /// Whether an empty socket starts a pause now.
    fn may_pause(&self) -> bool {
        !self.window.is_zero() && !self.in_transaction
    }

    /// Follows transaction boundaries in what the stream returned.
    fn saw(&mut self, message: &ReplicationMessage) {
        if let ReplicationMessage::XLogData { data, .. } = message {
            match data.first() {
                Some(&BEGIN_TAG) => self.in_transaction = true,
                Some(&COMMIT_TAG) => self.in_transaction = false,
                _ => {}
            }
        }
    }
}

impl Upstream for PgUpstream {
    async fn next(&mut self) -> Result<ReplicationMessage> {
        let message = self.next_batched().await?;
        self.batching.saw(&message);
        Ok(message)
    }

    async fn report(&mut self, received: Lsn, confirmed: Lsn, reply_requested: bool) -> Result<()> {
        self.status.send(received, confirmed, reply_requested).await
    }

    async fn place(&mut self, relation: &Relation) -> Result<RelationRole> {
        match &self.resolver {
            // The loop reads nothing while it waits, so a frozen backend
            // must end the session rather than hold it.
            Some(resolver) => tokio::time::timeout(self.query_timeout, resolver.role(relation))
                .await
                .map_err(|_| {
                    Error::transient(format!(
                        "Postgres did not answer the catalog query that places table {}.{} \
                         within {:?}; reconnecting",
                        relation.namespace, relation.name, self.query_timeout
                    ))
                })?,
            None => {
                warn!(
                    table = %format!("{}.{}", relation.namespace, relation.name),
                    "the publication publishes a table, but events come from messages \
                     (--source messages); its changes are ignored"
                );
                Ok(RelationRole::Other)
            }
        }
    }

    async fn close(self) {
        self.status.close().await;
    }
}

impl PgUpstream {
    /// The next message, after a `ReadBatching` pause if the socket is empty.
    async fn next_batched(&mut self) -> Result<ReplicationMessage> {
        use futures_util::FutureExt;
        if self.batching.pause_until.is_none() {
            if !self.batching.may_pause() {
                return self.stream.next().await;
            }
            // ReplicationStream::next is cancel-safe: a look that finds
            // nothing loses nothing.
            if let Some(message) = self.stream.next().now_or_never() {
                return message;
            }
            self.batching.pause_until = Some(Instant::now() + self.batching.window);
            self.stream.hold_reads();
        }
        if let Some(until) = self.batching.pause_until {
            tokio::time::sleep_until(until).await;
            self.batching.pause_until = None;
            self.stream.release_reads()?;
        }
        // What came in the window, or the next byte after a quiet one.
        self.stream.next().await
    }
}

/// Silence on the replication connection: a quiet server is asked for a
/// keepalive at half the timeout, so silence past the whole timeout means it
/// is gone, not idle.
pub struct Liveness {
    timeout: Duration,
    /// When the server last sent anything (or reading last resumed).
    last_heard: Instant,
    asked: bool,
}

impl Liveness {
    pub fn new(timeout: Duration) -> Self {
        Liveness {
            timeout,
            last_heard: Instant::now(),
            asked: false,
        }
    }

    /// The server sent something.
    pub fn heard(&mut self) {
        self.last_heard = Instant::now();
        self.asked = false;
    }

    /// Walrelay is not reading (its window is full): that is not the server's silence.
    pub fn not_reading(&mut self) {
        self.last_heard = Instant::now();
    }

    /// When the last message arrived.
    pub fn heard_at(&self) -> Instant {
        self.last_heard
    }

    /// When to ask for a keepalive; None once asked.
    pub fn ask_at(&self) -> Option<Instant> {
        (!self.asked).then_some(self.last_heard + self.timeout / 2)
    }

    pub fn asked(&mut self) {
        self.asked = true;
    }

    /// When silence means the server is gone.
    pub fn dead_at(&self) -> Instant {
        self.last_heard + self.timeout
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(tag: u8) -> ReplicationMessage {
        ReplicationMessage::XLogData {
            wal_start: Lsn(0),
            wal_end: Lsn(0),
            data: bytes::Bytes::copy_from_slice(&[tag]),
        }
    }

    #[test]
    fn reads_pause_between_transactions_and_never_inside_one() {
        let mut batching = ReadBatching::new(Duration::from_millis(4));
        assert!(batching.may_pause(), "nothing read yet");
        batching.saw(&data(b'B'));
        assert!(!batching.may_pause(), "after Begin");
        batching.saw(&data(b'I'));
        batching.saw(&ReplicationMessage::Keepalive {
            wal_end: Lsn(0),
            reply_requested: false,
        });
        assert!(!batching.may_pause(), "a keepalive inside a transaction");
        batching.saw(&data(b'C'));
        assert!(batching.may_pause(), "after Commit");
        batching.saw(&data(b'M'));
        assert!(batching.may_pause(), "a message outside any transaction");
    }

    #[test]
    fn a_zero_window_never_pauses() {
        let mut batching = ReadBatching::new(Duration::ZERO);
        batching.saw(&data(b'C'));
        assert!(!batching.may_pause());
    }
}
