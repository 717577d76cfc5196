//! Which LSN is safe to confirm to Postgres.
//!
//! Transactions are tracked in commit order. A transaction becomes
//! confirmable once its Commit has been seen and Kafka has acknowledged every
//! one of its events; the confirmed LSN is the end LSN of the newest
//! transaction such that it and every earlier one are confirmable. Only
//! commit LSNs are ever confirmed: a multi-row INSERT or a COPY puts many
//! events in one transaction, and confirming a row's LSN could skip the rest
//! on restart.

use std::collections::VecDeque;

use crate::postgres::lsn::Lsn;

/// Identifies a transaction for as long as it is tracked.
pub type TxnSeq = u64;

#[derive(Debug)]
struct Txn {
    pending: u64,
    /// Any event was sent for it.
    had_events: bool,
    /// Known once the Commit message arrives.
    end_lsn: Option<Lsn>,
}

#[derive(Debug)]
pub struct Checkpoint {
    txns: VecDeque<Txn>,
    /// Sequence number of `txns[0]`.
    first_seq: TxnSeq,
    confirmed: Lsn,
    /// The end LSN of the newest confirmed transaction that had events:
    /// what is worth remembering across a crash of Postgres.
    delivered: Lsn,
}

impl Checkpoint {
    /// Starts from the slot's confirmed position.
    pub fn new(confirmed: Lsn) -> Self {
        Checkpoint {
            txns: VecDeque::new(),
            first_seq: 0,
            confirmed,
            delivered: confirmed,
        }
    }

    pub fn confirmed(&self) -> Lsn {
        self.confirmed
    }

    /// The end LSN of the newest confirmed transaction that had events.
    pub fn delivered(&self) -> Lsn {
        self.delivered
    }

    /// Transactions read but not yet confirmed.
    pub fn pending(&self) -> usize {
        self.txns.len()
    }

    /// True when nothing is open or waiting for Kafka.
    pub fn is_idle(&self) -> bool {
        self.txns.is_empty()
    }

    /// Opens a transaction at its Begin message.
    pub fn begin(&mut self) -> TxnSeq {
        self.txns.push_back(Txn {
            pending: 0,
            had_events: false,
            end_lsn: None,
        });
        self.first_seq + self.txns.len() as u64 - 1
    }

    /// Records an event produced for `seq`, not yet acknowledged.
    pub fn event_sent(&mut self, seq: TxnSeq) {
        let txn = self.txn_mut(seq);
        txn.pending += 1;
        txn.had_events = true;
    }

    /// Records that Kafka acknowledged one event of `seq`.
    pub fn event_acked(&mut self, seq: TxnSeq) {
        let txn = self.txn_mut(seq);
        txn.pending = txn
            .pending
            .checked_sub(1)
            .expect("more acknowledgements than events sent for a transaction");
    }

    /// Seals `seq` at its Commit message.
    pub fn commit(&mut self, seq: TxnSeq, end_lsn: Lsn) {
        self.txn_mut(seq).end_lsn = Some(end_lsn);
    }

    /// Moves the confirmed LSN past every finished transaction at the front.
    /// Returns true if it moved.
    pub fn advance(&mut self) -> bool {
        let before = self.confirmed;
        while let Some(front) = self.txns.front() {
            match front.end_lsn {
                Some(end) if front.pending == 0 => {
                    self.confirmed = self.confirmed.max(end);
                    if front.had_events {
                        self.delivered = self.confirmed;
                    }
                    self.txns.pop_front();
                    self.first_seq += 1;
                }
                _ => break,
            }
        }
        self.confirmed > before
    }

    /// With nothing in flight, the server's WAL end from a keepalive is safe
    /// to confirm: every transaction that committed before it has been
    /// delivered or held nothing published. This keeps an idle outbox on a
    /// busy database from pinning WAL.
    ///
    /// The premise: a keepalive's WAL end is the walsender's `sentPtr`, the
    /// position up to which it has decoded WAL and sent the result
    /// (`WalSndKeepalive` in PostgreSQL's src/backend/replication/walsender.c
    /// writes `sentPtr`), and the keepalive travels on the same connection
    /// behind what it sent. So when walrelay reads it, every transaction
    /// that committed below it has already been read here: published and
    /// settled (nothing is idle otherwise), or skipped by pgoutput for
    /// touching nothing published. A position that ran ahead of what was
    /// sent (the server's flush position, say) would not be safe.
    pub fn observe_wal_end(&mut self, wal_end: Lsn) -> bool {
        if self.is_idle() && wal_end > self.confirmed {
            self.confirmed = wal_end;
            return true;
        }
        false
    }

    fn txn_mut(&mut self, seq: TxnSeq) -> &mut Txn {
        let index = seq
            .checked_sub(self.first_seq)
            .expect("transaction was already confirmed");
        self.txns
            .get_mut(index as usize)
            .expect("transaction is not tracked")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_confirmed_until_every_event_of_the_transaction_is_acked() {
        let mut cp = Checkpoint::new(Lsn(10));
        let t = cp.begin();
        cp.event_sent(t);
        cp.event_sent(t);
        cp.commit(t, Lsn(100));
        cp.event_acked(t);
        assert!(!cp.advance());
        assert_eq!(cp.confirmed(), Lsn(10));
        cp.event_acked(t);
        assert!(cp.advance());
        assert_eq!(cp.confirmed(), Lsn(100));
    }

    #[test]
    fn a_later_transaction_acked_first_waits_for_the_earlier_one() {
        let mut cp = Checkpoint::new(Lsn(0));
        let a = cp.begin();
        cp.event_sent(a);
        cp.commit(a, Lsn(100));
        let b = cp.begin();
        cp.event_sent(b);
        cp.commit(b, Lsn(200));
        cp.event_acked(b);
        assert!(!cp.advance());
        assert_eq!(cp.confirmed(), Lsn(0));
        cp.event_acked(a);
        cp.advance();
        assert_eq!(cp.confirmed(), Lsn(200));
        assert_eq!(cp.delivered(), Lsn(200));
        assert!(cp.is_idle());
    }

    #[test]
    fn an_open_transaction_is_not_confirmed_even_when_its_events_are_acked() {
        let mut cp = Checkpoint::new(Lsn(0));
        let t = cp.begin();
        cp.event_sent(t);
        cp.event_acked(t);
        assert!(!cp.advance());
        assert!(!cp.observe_wal_end(Lsn(500)));
        assert_eq!(cp.confirmed(), Lsn(0));
    }

    #[test]
    fn keepalive_wal_end_is_confirmed_only_when_idle() {
        let mut cp = Checkpoint::new(Lsn(50));
        assert!(cp.observe_wal_end(Lsn(80)));
        assert_eq!(cp.confirmed(), Lsn(80));
        assert!(!cp.observe_wal_end(Lsn(70)), "never moves backwards");
        let t = cp.begin();
        cp.event_sent(t);
        cp.commit(t, Lsn(90));
        assert!(!cp.observe_wal_end(Lsn(1000)));
        cp.event_acked(t);
        cp.advance();
        assert_eq!(cp.confirmed(), Lsn(90));
    }

    #[test]
    fn empty_transactions_confirm_at_once() {
        let mut cp = Checkpoint::new(Lsn(0));
        let t = cp.begin();
        cp.commit(t, Lsn(42));
        assert!(cp.advance());
        assert_eq!(cp.confirmed(), Lsn(42));
        assert_eq!(cp.delivered(), Lsn(0), "nothing was delivered");
        assert!(cp.observe_wal_end(Lsn(90)));
        assert_eq!(cp.delivered(), Lsn(0), "nor by a keepalive");
    }
}
