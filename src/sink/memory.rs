//! A sink in memory, for tests of the apply path: records wait until the
//! test acknowledges or refuses them, in any order, through a `MemoryHandle`.
//! A transactional one (`MemorySink::transactional`) numbers its
//! transactions, and each commit waits for the test's word too.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::mpsc;

use super::{
    Closing, Delivery, Failure, OwnedRecord, Record, Refusal, SendError, Sink, TopicAccess,
    TopicInfo,
};
use crate::error::Result;
use crate::postgres::lsn::Lsn;

struct State<T> {
    /// Every record sent, in order; a record's index is its place here.
    sent: Vec<OwnedRecord>,
    /// Records not yet acknowledged or refused, by index.
    waiting: BTreeMap<usize, (T, Instant)>,
    /// Most records waiting at once before `send` says the queue is full.
    capacity: usize,
    /// Topics that refuse records, with the reason.
    closed_topics: HashMap<String, String>,
    /// What the sink says of topics, when not the default.
    topic_infos: HashMap<String, TopicInfo>,
    dead_letter_info: TopicInfo,
    deliveries: mpsc::UnboundedSender<Delivery<T>>,
    /// Transactions, when the sink writes in them.
    transactions: Option<Transactions>,
}

/// What a transactional memory sink has been asked to do.
#[derive(Default)]
struct Transactions {
    /// The transaction of each record sent, by the record's index.
    of_record: Vec<usize>,
    /// The transaction records go to now (0, 1, …).
    current: usize,
    /// Each commit asked for, with its position, and its outcome's sender
    /// until the test tells it.
    commits: Vec<(Lsn, Option<tokio::sync::oneshot::Sender<Result<()>>>)>,
    /// Transactions aborted.
    aborted: Vec<usize>,
    /// A commit waits for the test: nothing may be sent meanwhile.
    closing: bool,
}

pub struct MemorySink<T> {
    state: Arc<Mutex<State<T>>>,
    deliveries: mpsc::UnboundedReceiver<Delivery<T>>,
}

/// The test's side of a `MemorySink`.
pub struct MemoryHandle<T> {
    state: Arc<Mutex<State<T>>>,
}

impl<T> Clone for MemoryHandle<T> {
    fn clone(&self) -> Self {
        MemoryHandle {
            state: self.state.clone(),
        }
    }
}

impl<T> MemorySink<T> {
    /// A sink whose records wait for the test's word.
    pub fn new() -> (Self, MemoryHandle<T>) {
        Self::build(None)
    }

    /// A sink that writes in transactions, whose commits wait for the
    /// test's word too.
    pub fn transactional() -> (Self, MemoryHandle<T>) {
        Self::build(Some(Transactions::default()))
    }

    fn build(transactions: Option<Transactions>) -> (Self, MemoryHandle<T>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let state = Arc::new(Mutex::new(State {
            sent: Vec::new(),
            waiting: BTreeMap::new(),
            capacity: usize::MAX,
            closed_topics: HashMap::new(),
            topic_infos: HashMap::new(),
            dead_letter_info: TopicInfo::default(),
            deliveries: tx,
            transactions,
        }));
        let handle = MemoryHandle {
            state: state.clone(),
        };
        (
            MemorySink {
                state,
                deliveries: rx,
            },
            handle,
        )
    }
}

/// The state, even after a test panicked while holding it.
fn lock<T>(state: &Mutex<State<T>>) -> MutexGuard<'_, State<T>> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl<T> MemoryHandle<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        lock(&self.state)
    }

    /// Every record sent so far, in order.
    pub fn records(&self) -> Vec<OwnedRecord> {
        self.lock().sent.clone()
    }

    /// The tickets of the records not yet acknowledged or refused.
    pub fn waiting_tickets(&self) -> Vec<T>
    where
        T: Clone,
    {
        self.lock()
            .waiting
            .values()
            .map(|(t, _)| t.clone())
            .collect()
    }

    /// Acknowledges record `index`.
    pub fn ack(&self, index: usize) {
        self.finish(index, Ok(()));
    }

    /// Refuses record `index` after the fact, as a broker would.
    pub fn refuse(&self, index: usize, refusal: Refusal) {
        let record = self.lock().sent[index].clone();
        self.finish(index, Err(Box::new(Failure { refusal, record })));
    }

    /// Most records waiting at once; `send` says the queue is full beyond it.
    pub fn set_capacity(&self, capacity: usize) {
        self.lock().capacity = capacity;
    }

    /// Records for `topic` are poison for `reason` (a topic walrelay may not use).
    pub fn close_topic(&self, topic: &str, reason: &str) {
        self.lock()
            .closed_topics
            .insert(topic.to_string(), reason.to_string());
    }

    /// What the sink says of `topic` (its limit, whether records to it
    /// travel alone).
    pub fn set_topic_info(&self, topic: &str, info: TopicInfo) {
        self.lock().topic_infos.insert(topic.to_string(), info);
    }

    /// What the sink says of the dead-letter topic.
    pub fn set_dead_letter_info(&self, info: TopicInfo) {
        self.lock().dead_letter_info = info;
    }

    /// The position of each commit asked for so far, in order.
    pub fn commits(&self) -> Vec<Lsn> {
        let state = self.lock();
        let transactions = state.transactions.as_ref().expect("a transactional sink");
        transactions.commits.iter().map(|(lsn, _)| *lsn).collect()
    }

    /// Tells commit `index` its outcome.
    pub fn settle_commit(&self, index: usize, outcome: Result<()>) {
        let mut state = self.lock();
        let transactions = state.transactions.as_mut().expect("a transactional sink");
        let tx = transactions.commits[index]
            .1
            .take()
            .unwrap_or_else(|| panic!("commit {index} was settled already"));
        transactions.closing = false;
        transactions.current += 1;
        let _ = tx.send(outcome);
    }

    /// Acknowledges every record still waiting.
    pub fn ack_waiting(&self) {
        let waiting: Vec<usize> = self.lock().waiting.keys().copied().collect();
        for index in waiting {
            self.ack(index);
        }
    }

    /// Lets every commit still waiting succeed.
    pub fn settle_open_commits(&self) {
        let open: Vec<usize> = match &self.lock().transactions {
            Some(t) => (0..t.commits.len())
                .filter(|&i| t.commits[i].1.is_some())
                .collect(),
            None => Vec::new(),
        };
        for index in open {
            self.settle_commit(index, Ok(()));
        }
    }

    /// The transaction each record went in (0, 1, …), by record index.
    pub fn transaction_of_records(&self) -> Vec<usize> {
        let state = self.lock();
        let transactions = state.transactions.as_ref().expect("a transactional sink");
        transactions.of_record.clone()
    }

    /// The transactions aborted so far.
    pub fn aborted(&self) -> Vec<usize> {
        let state = self.lock();
        let transactions = state.transactions.as_ref().expect("a transactional sink");
        transactions.aborted.clone()
    }

    fn finish(&self, index: usize, result: std::result::Result<(), Box<Failure>>) {
        let mut state = self.lock();
        let (ticket, sent_at) = state
            .waiting
            .remove(&index)
            .unwrap_or_else(|| panic!("record {index} is not waiting for an outcome"));
        let at = Instant::now();
        let _ = state.deliveries.send(Delivery {
            ticket,
            took: at.saturating_duration_since(sent_at),
            at,
            result,
        });
    }
}

impl<T> Sink<T> for MemorySink<T> {
    async fn open_topic(&mut self, topic: &str) -> Result<TopicAccess> {
        let state = lock(&self.state);
        Ok(match state.closed_topics.get(topic) {
            Some(reason) => TopicAccess::Closed(reason.clone()),
            None => TopicAccess::Open(state.topic_infos.get(topic).copied().unwrap_or_default()),
        })
    }

    async fn open_dead_letter_topic(&mut self) -> Result<TopicInfo> {
        Ok(lock(&self.state).dead_letter_info)
    }

    /// Tests name no topic with a partition count: as if none existed.
    async fn partition_count(&mut self, _topic: &str) -> Result<Option<usize>> {
        Ok(None)
    }

    fn send(
        &mut self,
        record: &Record<'_>,
        ticket: T,
        now: Instant,
    ) -> std::result::Result<(), SendError<T>> {
        let mut state = lock(&self.state);
        if state.waiting.len() >= state.capacity {
            return Err(SendError::Full(ticket));
        }
        let index = state.sent.len();
        if let Some(transactions) = &mut state.transactions {
            assert!(
                !transactions.closing,
                "a record was sent while the transaction was being committed"
            );
            let current = transactions.current;
            transactions.of_record.push(current);
        }
        state.sent.push(record.to_owned());
        state.waiting.insert(index, (ticket, now));
        Ok(())
    }

    async fn delivery(&mut self) -> Option<Delivery<T>> {
        self.deliveries.recv().await
    }

    fn try_delivery(&mut self) -> Option<Delivery<T>> {
        self.deliveries.try_recv().ok()
    }

    fn transactional(&self) -> bool {
        lock(&self.state).transactions.is_some()
    }

    fn commit(&mut self, position: Lsn) -> Closing {
        let mut state = lock(&self.state);
        let transactions = state.transactions.as_mut().expect("a transactional sink");
        assert!(!transactions.closing, "a commit while one is pending");
        let (tx, closing) = Closing::pending();
        transactions.closing = true;
        transactions.commits.push((position, Some(tx)));
        closing
    }

    fn abort(&mut self) -> Closing {
        let mut state = lock(&self.state);
        let transactions = state.transactions.as_mut().expect("a transactional sink");
        let current = transactions.current;
        transactions.aborted.push(current);
        transactions.current += 1;
        Closing::ready(Ok(()))
    }
}
