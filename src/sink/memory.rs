//! A sink in memory, for tests of the apply path: records wait until the
//! test acknowledges or refuses them, in any order, through a `MemoryHandle`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::mpsc;

use super::{
    Delivery, Failure, OwnedRecord, Record, Refusal, SendError, Sink, TopicAccess, TopicInfo,
};
use crate::error::Result;

struct State<T> {
    /// Every record sent, in order; a record's index is its place here.
    sent: Vec<OwnedRecord>,
    /// Records not yet acknowledged or refused, by index.
    waiting: BTreeMap<usize, (T, Instant)>,
    /// Most records waiting at once before `send` says the queue is full.
    capacity: usize,
    /// Topics that refuse records, with the reason.
    closed_topics: HashMap<String, String>,
    deliveries: mpsc::UnboundedSender<Delivery<T>>,
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
        let (tx, rx) = mpsc::unbounded_channel();
        let state = Arc::new(Mutex::new(State {
            sent: Vec::new(),
            waiting: BTreeMap::new(),
            capacity: usize::MAX,
            closed_topics: HashMap::new(),
            deliveries: tx,
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

    fn finish(&self, index: usize, result: std::result::Result<(), Box<Failure>>) {
        let mut state = self.lock();
        let (ticket, sent_at) = state
            .waiting
            .remove(&index)
            .unwrap_or_else(|| panic!("record {index} is not waiting for an outcome"));
        let _ = state.deliveries.send(Delivery {
            ticket,
            took: sent_at.elapsed(),
            result,
        });
    }
}

impl<T> Sink<T> for MemorySink<T> {
    async fn open_topic(&mut self, topic: &str) -> Result<TopicAccess> {
        let state = lock(&self.state);
        Ok(match state.closed_topics.get(topic) {
            Some(reason) => TopicAccess::Closed(reason.clone()),
            None => TopicAccess::Open(TopicInfo::default()),
        })
    }

    async fn open_dead_letter_topic(&mut self) -> Result<TopicInfo> {
        Ok(TopicInfo::default())
    }

    /// Tests name no topic with a partition count: as if none existed.
    async fn partition_count(&mut self, _topic: &str) -> Result<Option<usize>> {
        Ok(None)
    }

    fn send(&mut self, record: &Record<'_>, ticket: T) -> std::result::Result<(), SendError<T>> {
        let mut state = lock(&self.state);
        if state.waiting.len() >= state.capacity {
            return Err(SendError::Full(ticket));
        }
        let index = state.sent.len();
        state.sent.push(record.to_owned());
        state.waiting.insert(index, (ticket, Instant::now()));
        Ok(())
    }

    async fn delivery(&mut self) -> Option<Delivery<T>> {
        self.deliveries.recv().await
    }
}
