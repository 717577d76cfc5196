//! The dead-letter record's format, read and written here alone: `run`
//! (`poison`) writes it, `redrive` reads it and writes it back, `audit`
//! reads the event id from it. The copy is the event whole (key, value, its
//! own headers) followed by walrelay's headers, each named with the
//! `walrelay.` prefix that no header of an event's own carries.

use std::borrow::Cow;

use bytes::Bytes;

use crate::postgres::lsn::Lsn;
use crate::sink::Header;

/// Every header walrelay adds starts so; the event's own never do.
pub const OWN_PREFIX: &str = "walrelay.";
/// Why the event was dead-lettered: the newest reason.
pub const REASON: &str = "walrelay.reason";
/// The event id (the outbox's id column), when the event had one.
pub const EVENT_ID: &str = "walrelay.event-id";
/// The commit LSN of the transaction that wrote the event.
pub const COMMIT_LSN: &str = "walrelay.commit-lsn";
/// The topic the event was routed to; absent when routing itself failed.
pub const ORIGINAL_TOPIC: &str = "walrelay.original-topic";
/// The record's first timestamp, kept when redrive puts it back with the
/// time of putting it back (so the topic's retention counts from then).
pub const ORIGINAL_TIMESTAMP: &str = "walrelay.original-timestamp";

/// Whether a header is one of walrelay's rather than the event's own.
pub fn is_own(name: &str) -> bool {
    name.starts_with(OWN_PREFIX)
}

/// walrelay's headers on a dead-letter copy, in the order `run` writes
/// them: why, which event, which transaction, where it was going.
pub fn own_headers(
    reason: &str,
    event_id: Option<&Bytes>,
    commit_lsn: Lsn,
    original_topic: &str,
) -> Vec<Header> {
    let mut headers = vec![
        header(REASON, reason),
        (Cow::Borrowed(EVENT_ID), event_id.cloned()),
        header(COMMIT_LSN, &commit_lsn.to_string()),
    ];
    if !original_topic.is_empty() {
        headers.push(header(ORIGINAL_TOPIC, original_topic));
    }
    headers
}

fn header(name: &'static str, value: &str) -> Header {
    (Cow::Borrowed(name), Some(Bytes::from(value.to_string())))
}
