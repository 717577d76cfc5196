//! A producer whose delivery reports are served by a thread of its own, as
//! rust-rdkafka's `ThreadedProducer` does, but in long waits.
//!
//! `ThreadedProducer` polls in calls of 100 ms, and each call spins through
//! its last millisecond: rust-rdkafka hands librdkafka the time left in
//! whole milliseconds, so the polls in that last millisecond return at once.
//! Measured on an idle walrelay, that thread alone took 0.9 % of a core
//! (docs/benchmarks.md, issue 21). Here a call waits up to a second; a
//! delivery report still wakes it at once.

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::config::{ClientConfig, FromClientConfigAndContext};
use rdkafka::error::KafkaResult;
use rdkafka::producer::{BaseProducer, ProducerContext};

/// How long one poll may wait for a delivery report.
const POLL_WAIT: Duration = Duration::from_secs(1);

/// A `BaseProducer` polled by a thread of its own. Clones share both; the
/// thread stops within `POLL_WAIT` of the last clone's drop, and the
/// librdkafka handle is destroyed when it does.
pub struct Polled<C: ProducerContext + 'static> {
    producer: Arc<BaseProducer<C>>,
    _poller: Arc<Poller>,
}

impl<C: ProducerContext + 'static> Clone for Polled<C> {
    fn clone(&self) -> Self {
        Polled {
            producer: self.producer.clone(),
            _poller: self._poller.clone(),
        }
    }
}

/// Tells the polling thread to stop once no handle is left.
struct Poller(Arc<AtomicBool>);

impl Drop for Poller {
    fn drop(&mut self) {
        // Not joined: the thread may be inside a wait of up to POLL_WAIT,
        // and a drop must not block the async runtime that long.
        self.0.store(true, Ordering::Relaxed);
    }
}

impl<C: ProducerContext + 'static> Deref for Polled<C> {
    type Target = BaseProducer<C>;

    fn deref(&self) -> &BaseProducer<C> {
        &self.producer
    }
}

/// A producer of `config` with `context`, and the thread that polls it.
pub fn create<C: ProducerContext + 'static>(
    config: &ClientConfig,
    context: C,
) -> KafkaResult<Polled<C>> {
    let producer = Arc::new(BaseProducer::from_config_and_context(config, context)?);
    let stop = Arc::new(AtomicBool::new(false));
    let (polled, stopping) = (producer.clone(), stop.clone());
    std::thread::Builder::new()
        .name("producer polling".into())
        .spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                polled.poll(POLL_WAIT);
            }
        })
        .map_err(|e| {
            rdkafka::error::KafkaError::ClientCreation(format!(
                "cannot start the producer's polling thread: {e}"
            ))
        })?;
    Ok(Polled {
        producer,
        _poller: Arc::new(Poller(stop)),
    })
}
