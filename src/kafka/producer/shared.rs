//! Handing librdkafka a large value without a copy.
//!
//! rust-rdkafka's `send` always asks librdkafka to copy the value
//! (`RD_KAFKA_MSG_F_COPY`) into the message it allocates. librdkafka can
//! instead keep a pointer to it until the record's delivery report, and
//! copies it only once, into the produce request (not even that above
//! `message.copy.max.size`). A value of at least `SHARED_VALUE_MIN` bytes
//! goes that way: the record's `InFlight` holds a reference to it, a slice
//! of the replication buffer it was read in, so between the socket and the
//! request nothing copies it. A smaller value is copied as before: a copy
//! that small costs less than keeping alive the whole buffer it came in.

use std::ffi::{c_char, c_void, CString};

use bytes::Bytes;
use rdkafka::bindings as rdsys;
use rdkafka::bindings::rd_kafka_vtype_t::*;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::IntoOpaque;

use crate::sink::Record;

/// The smallest value handed over without a copy.
pub(super) const SHARED_VALUE_MIN: usize = 4096;

/// `record`, whose value is `value`, handed to librdkafka without copying
/// `value`; `opaque` must keep `value` alive until the delivery report.
/// On a refusal librdkafka took nothing, and `opaque` comes back.
pub(super) fn produce<C, O>(
    producer: &BaseProducer<C>,
    record: &Record<'_>,
    value: &Bytes,
    opaque: O,
) -> Result<(), (KafkaError, O)>
where
    C: ProducerContext<DeliveryOpaque = O>,
    O: IntoOpaque,
{
    let topic = match CString::new(record.topic) {
        Ok(topic) => topic,
        Err(e) => return Err((KafkaError::from(e), opaque)),
    };
    let headers = headers(record);
    let (key_ptr, key_len) = record
        .key
        .map_or((std::ptr::null(), 0), |k| (k.as_ptr(), k.len()));
    let opaque = opaque.into_ptr();
    // SAFETY: the same call as rust-rdkafka's `BaseProducer::send`, but
    // with no message flags: librdkafka keeps `value`'s pointer, which
    // the opaque keeps valid until the report. The topic and key are
    // copied during the call; the headers are librdkafka's once it
    // succeeds.
    let err = unsafe {
        rdsys::rd_kafka_producev(
            producer.client().native_ptr(),
            RD_KAFKA_VTYPE_TOPIC,
            topic.as_ptr(),
            RD_KAFKA_VTYPE_PARTITION,
            record.partition.unwrap_or(-1),
            RD_KAFKA_VTYPE_MSGFLAGS,
            0,
            RD_KAFKA_VTYPE_VALUE,
            value.as_ptr() as *mut c_void,
            value.len(),
            RD_KAFKA_VTYPE_KEY,
            key_ptr as *mut c_void,
            key_len,
            RD_KAFKA_VTYPE_OPAQUE,
            opaque,
            RD_KAFKA_VTYPE_TIMESTAMP,
            record.timestamp_ms,
            RD_KAFKA_VTYPE_HEADERS,
            headers,
            RD_KAFKA_VTYPE_END,
        )
    };
    if err == rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        return Ok(());
    }
    // SAFETY: refused, so both are still ours: the opaque made above, once.
    unsafe { rdsys::rd_kafka_headers_destroy(headers) };
    let opaque = unsafe { O::from_ptr(opaque) };
    Err((
        KafkaError::MessageProduction(RDKafkaErrorCode::from(err)),
        opaque,
    ))
}

/// librdkafka's copy of `record`'s headers.
fn headers(record: &Record<'_>) -> *mut rdsys::rd_kafka_headers_t {
    // SAFETY: a new list, filled with copies of what the record lends.
    unsafe {
        let headers = rdsys::rd_kafka_headers_new(record.headers.len());
        for (name, value) in record.headers {
            let (value_ptr, value_len) = value
                .as_ref()
                .map_or((std::ptr::null(), 0), |v| (v.as_ptr(), v.len()));
            // Fails only on a read-only list, which a new one is not.
            rdsys::rd_kafka_header_add(
                headers,
                name.as_ptr() as *const c_char,
                name.len() as isize,
                value_ptr as *const c_void,
                value_len as isize,
            );
        }
        headers
    }
}
