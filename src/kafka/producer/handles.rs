//! Records handed to librdkafka on a topic handle made once per topic.
//!
//! rust-rdkafka's `BaseProducer::send` names the topic by string, which
//! librdkafka looks up for every record under its client-wide write lock,
//! the lock its broker threads take to read: here each topic's handle is
//! made once, and the record goes by handle. librdkafka still copies the
//! key, the value and the headers into the record (`RD_KAFKA_MSG_F_COPY`):
//! a record in flight holds no slice of the replication stream, whose read
//! buffer it would keep whole for as long as Kafka takes
//! (docs/architecture.md, "Backpressure and memory").

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::ptr::NonNull;

use rdkafka::bindings as rdsys;
use rdkafka::error::KafkaError;
use rdkafka::producer::{Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::IntoOpaque;

use super::polled::Polled;
use crate::sink::Record;

/// The topic handles of one producer. They are destroyed before the
/// producer they belong to can be (librdkafka's rule): the field order
/// drops `handles` first, and `producer` keeps the client alive till then.
pub(super) struct TopicHandles<C: ProducerContext + 'static> {
    handles: HashMap<String, TopicHandle>,
    /// The topic of the last record and its handle: most records go where
    /// the one before went.
    last: Option<(String, Borrowed)>,
    producer: Polled<C>,
}

struct TopicHandle(NonNull<rdsys::rd_kafka_topic_t>);

/// One of `handles`' handles, used, never destroyed, through this.
#[derive(Clone, Copy)]
struct Borrowed(NonNull<rdsys::rd_kafka_topic_t>);

// librdkafka's topic handles may be used from any thread.
unsafe impl Send for TopicHandle {}
unsafe impl Send for Borrowed {}

impl Drop for TopicHandle {
    fn drop(&mut self) {
        // SAFETY: made by rd_kafka_topic_new, destroyed once, here, while
        // its client lives (see TopicHandles).
        unsafe { rdsys::rd_kafka_topic_destroy(self.0.as_ptr()) };
    }
}

/// Headers being built for one record; librdkafka owns them once the
/// record is queued.
struct NativeHeaders(NonNull<rdsys::rd_kafka_headers_t>);

impl Drop for NativeHeaders {
    fn drop(&mut self) {
        // SAFETY: not handed to librdkafka (see `produce`).
        unsafe { rdsys::rd_kafka_headers_destroy(self.0.as_ptr()) };
    }
}

impl<C: ProducerContext + 'static> TopicHandles<C> {
    pub(super) fn new(producer: Polled<C>) -> Self {
        TopicHandles {
            handles: HashMap::new(),
            last: None,
            producer,
        }
    }

    fn handle(&mut self, topic: &str) -> Result<*mut rdsys::rd_kafka_topic_t, KafkaError> {
        if let Some((name, handle)) = &self.last {
            if name == topic {
                return Ok(handle.0.as_ptr());
            }
        }
        let handle = self.made(topic)?;
        self.last = Some((topic.to_string(), handle));
        Ok(handle.0.as_ptr())
    }

    fn made(&mut self, topic: &str) -> Result<Borrowed, KafkaError> {
        if let Some(handle) = self.handles.get(topic) {
            return Ok(Borrowed(handle.0));
        }
        let name = CString::new(topic).map_err(KafkaError::from)?;
        // SAFETY: a live client and a NUL-terminated name; NULL for the
        // client's default topic configuration, as a record named by
        // string gets.
        let made = unsafe {
            rdsys::rd_kafka_topic_new(
                self.producer.client().native_ptr(),
                name.as_ptr(),
                std::ptr::null_mut(),
            )
        };
        let Some(made) = NonNull::new(made) else {
            // SAFETY: reads the calling thread's last librdkafka error.
            let code = unsafe { rdsys::rd_kafka_last_error() };
            return Err(KafkaError::MessageProduction(code.into()));
        };
        self.handles.insert(topic.to_string(), TopicHandle(made));
        Ok(Borrowed(made))
    }

    /// Queues a copy of `record` with `opaque` for its delivery report. On
    /// an error the opaque comes back.
    pub(super) fn produce<O: IntoOpaque>(
        &mut self,
        record: &Record<'_>,
        opaque: O,
    ) -> Result<(), (KafkaError, O)> {
        let topic = match self.handle(record.topic) {
            Ok(topic) => topic,
            Err(e) => return Err((e, opaque)),
        };
        let headers = match native_headers(record) {
            Ok(headers) => headers,
            Err(code) => return Err((KafkaError::MessageProduction(code), opaque)),
        };
        let (value, value_len) = record.value.map_or((std::ptr::null_mut(), 0), |v| {
            (v.as_ptr() as *mut c_void, v.len())
        });
        let (key, key_len) = record.key.map_or((std::ptr::null_mut(), 0), |k| {
            (k.as_ptr() as *mut c_void, k.len())
        });
        let opaque = opaque.into_ptr();
        use rdsys::rd_kafka_vtype_t::*;
        // SAFETY: the client and topic handle live (TopicHandles).
        // librdkafka copies the key, the value (RD_KAFKA_MSG_F_COPY) and
        // the header names and values now, and reads none of them after;
        // on success it owns the headers.
        let error = unsafe {
            rdsys::rd_kafka_producev(
                self.producer.client().native_ptr(),
                RD_KAFKA_VTYPE_RKT,
                topic,
                RD_KAFKA_VTYPE_PARTITION,
                record
                    .partition
                    .unwrap_or(-1 /* RD_KAFKA_PARTITION_UA: by the partitioner */),
                RD_KAFKA_VTYPE_MSGFLAGS,
                rdsys::RD_KAFKA_MSG_F_COPY,
                RD_KAFKA_VTYPE_VALUE,
                value,
                value_len,
                RD_KAFKA_VTYPE_KEY,
                key,
                key_len,
                RD_KAFKA_VTYPE_OPAQUE,
                opaque,
                RD_KAFKA_VTYPE_TIMESTAMP,
                record.timestamp_ms,
                RD_KAFKA_VTYPE_HEADERS,
                headers.0.as_ptr(),
                RD_KAFKA_VTYPE_END,
            )
        };
        if error == rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            std::mem::forget(headers);
            Ok(())
        } else {
            // SAFETY: librdkafka did not take the record, so the opaque is
            // still the one made above, and only here.
            let opaque = unsafe { O::from_ptr(opaque) };
            Err((KafkaError::MessageProduction(error.into()), opaque))
        }
    }
}

/// The record's headers as librdkafka's (each name and value copied).
fn native_headers(record: &Record<'_>) -> Result<NativeHeaders, RDKafkaErrorCode> {
    // SAFETY: a fresh list, destroyed by NativeHeaders unless librdkafka
    // takes it.
    let made = unsafe { rdsys::rd_kafka_headers_new(record.headers.len()) };
    let headers = NativeHeaders(NonNull::new(made).ok_or(RDKafkaErrorCode::Fail)?);
    for (name, value) in record.headers {
        let (value, value_len) = value.as_ref().map_or((std::ptr::null(), 0), |v| {
            (v.as_ptr() as *const c_void, v.len() as isize)
        });
        // SAFETY: lengths given, so neither needs a terminating NUL.
        let error = unsafe {
            rdsys::rd_kafka_header_add(
                headers.0.as_ptr(),
                name.as_ptr() as *const std::ffi::c_char,
                name.len() as isize,
                value,
                value_len,
            )
        };
        if error != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Err(error.into());
        }
    }
    Ok(headers)
}
