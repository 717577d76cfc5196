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
    auto_ack: bool,
    /// Topics that refuse records, with the reason.
    closed_topics: HashMap<String, String>,
    partitions: HashMap<String, usize>,
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
            auto_ack: false,
            closed_topics: HashMap::new(),
            partitions: HashMap::new(),
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

    /// A sink that acknowledges every record as soon as it is sent.
    pub fn acking() -> (Self, MemoryHandle<T>) {
        let (sink, handle) = Self::new();
        handle.lock().auto_ack = true;
        (sink, handle)
    }
}

impl<T> MemoryHandle<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every record sent so far, in order.
    pub fn records(&self) -> Vec<OwnedRecord> {
        self.lock().sent.clone()
    }

    /// Indexes of the records still waiting for an outcome.
    pub fn waiting(&self) -> Vec<usize> {
        self.lock().waiting.keys().copied().collect()
    }

    /// Acknowledges record `index`.
    pub fn ack(&self, index: usize) {
        self.finish(index, Ok(()));
    }

    /// Acknowledges every waiting record, oldest first.
    pub fn ack_all(&self) {
        for index in self.waiting() {
            self.ack(index);
        }
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

    pub fn set_partitions(&self, topic: &str, count: usize) {
        self.lock().partitions.insert(topic.to_string(), count);
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
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        Ok(match state.closed_topics.get(topic) {
            Some(reason) => TopicAccess::Closed(reason.clone()),
            None => TopicAccess::Open(TopicInfo::default()),
        })
    }

    async fn open_dead_letter_topic(&mut self) -> Result<TopicInfo> {
        Ok(TopicInfo::default())
    }

    async fn partition_count(&mut self, topic: &str) -> Result<Option<usize>> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        Ok(state.partitions.get(topic).copied())
    }

    fn send(&mut self, record: &Record<'_>, ticket: T) -> std::result::Result<(), SendError<T>> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.waiting.len() >= state.capacity {
            return Err(SendError::Full(ticket));
        }
        let index = state.sent.len();
        state.sent.push(record.to_owned());
        if state.auto_ack {
            let _ = state.deliveries.send(Delivery {
                ticket,
                took: std::time::Duration::ZERO,
                result: Ok(()),
            });
        } else {
            state.waiting.insert(index, (ticket, Instant::now()));
        }
        Ok(())
    }

    async fn delivery(&mut self) -> Option<Delivery<T>> {
        self.deliveries.recv().await
    }
}
