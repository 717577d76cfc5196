//! Debezium 3's extended headers (`extended.headers.enabled`, true unless
//! set, since 3.2.1): four `__debezium.context.*` headers that name the
//! connector and its run, on every record before the router's own
//! (`--extended-headers`).
//!
//! Sources, debezium/debezium v3.6.1.Final:
//! - debezium-connector-common/.../connector/common/DebeziumHeaderProducer.java
//!   `contextHeaders`: connectorLogicalName, taskId, connectorName, runId, in
//!   that order, each with Schema.STRING_SCHEMA, so the worker's default
//!   SimpleHeaderConverter writes the string's UTF-8 bytes.
//! - .../pipeline/EventDispatcher.java `getExtendedHeaders`: they are the
//!   change record's headers, which EventRouterDelegate.apply keeps
//!   (`r.headers()`) and appends `id` and the placed headers to.
//! - .../connector/common/CdcSourceTaskContext.java: the logical name is
//!   CommonConnectorConfig.getLogicalName (`topic.prefix`); the connector name
//!   is `getConnectorPluginName`, PostgresConnectorConfig.getConnectorName,
//!   which is Module.name(), "postgresql" (not the Connect connector's
//!   `name`); the task id is "0" (the three-argument constructor
//!   PostgresTaskContext uses); the run id is `UUIDUtils.generateNewUUID()`,
//!   made once when the task starts.
//! - .../connector/common/UUIDUtils.java: a UUIDv7 (`msb = (epochMillis << 16)
//!   | (random & 0x0fff) | 0x7000`, `lsb = (random & 0x3fff…) | 0x8000…`),
//!   written by java.util.UUID.toString (lower-case 8-4-4-4-12 hex).
//!
//! walrelay's run is one process: its run id is made once at start-up, as a
//! task's is when Connect starts it, so it differs from Debezium's and from
//! the previous walrelay's.

use std::borrow::Cow;

use bytes::Bytes;

use crate::sink::Header;

/// The connector name Debezium's PostgreSQL connector reports (Module.name()).
pub const CONNECTOR_NAME: &str = "postgresql";
/// Debezium's PostgreSQL connector runs one task, "0".
pub const TASK_ID: &str = "0";

/// The headers' names, in Debezium's order (DebeziumHeaders.java).
pub const NAMES: [&str; 4] = [
    "__debezium.context.connectorLogicalName",
    "__debezium.context.taskId",
    "__debezium.context.connectorName",
    "__debezium.context.runId",
];

/// The four headers of one run, ready to put before an event's own.
#[derive(Debug, Clone, PartialEq)]
pub struct ExtendedHeaders(Vec<Header>);

impl ExtendedHeaders {
    /// The headers for `logical_name` (Debezium's topic.prefix) and a new run.
    pub fn for_new_run(logical_name: &str) -> Self {
        let mut random = [0u8; 16];
        // A run id only has to differ between runs; without the kernel's
        // randomness the clock alone still makes it new.
        let _ = openssl::rand::rand_bytes(&mut random);
        let now_ms = crate::clock::unix_now_us().div_euclid(1000);
        Self::new(logical_name, &uuid_v7(now_ms as u64, random))
    }

    pub fn new(logical_name: &str, run_id: &str) -> Self {
        let values = [logical_name, TASK_ID, CONNECTOR_NAME, run_id];
        ExtendedHeaders(
            NAMES
                .iter()
                .zip(values)
                .map(|(name, value)| {
                    (
                        Cow::Borrowed(*name),
                        Some(Bytes::copy_from_slice(value.as_bytes())),
                    )
                })
                .collect(),
        )
    }

    /// The same headers as the worker's header.converter writes them.
    pub fn in_format(self, format: crate::outbox::format::Format) -> Self {
        let headers = self.0.into_iter();
        ExtendedHeaders(
            headers
                .map(|(name, value)| (name, format.string_header(value)))
                .collect(),
        )
    }

    /// Puts the headers first in `headers`, before the router's and trace ones.
    pub fn prepend_to(&self, headers: &mut Vec<Header>) {
        headers.splice(0..0, self.0.iter().cloned());
    }
}

/// UUIDUtils.generateNewUUID for an instant in epoch milliseconds, as
/// java.util.UUID.toString writes it.
fn uuid_v7(unix_ms: u64, random: [u8; 16]) -> String {
    let word = |bytes: &[u8]| u64::from_be_bytes(bytes.try_into().unwrap_or([0; 8]));
    let msb = (unix_ms << 16) | (word(&random[..8]) & 0x0fff) | 0x7000;
    let lsb = (word(&random[8..]) & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        msb >> 32,
        (msb >> 16) & 0xffff,
        msb & 0xffff,
        lsb >> 48,
        lsb & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `text` has the shape of a run id: a UUIDv7 as Java writes it.
    fn is_run_id(text: &str) -> bool {
        let groups: Vec<&str> = text.split('-').collect();
        let lengths: Vec<usize> = groups.iter().map(|g| g.len()).collect();
        lengths == [8, 4, 4, 4, 12]
            && text
                .bytes()
                .all(|b| b == b'-' || b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            && groups[2].starts_with('7')
            && groups[3].starts_with(['8', '9', 'a', 'b'])
    }

    #[test]
    fn a_run_id_is_a_uuid_v7_of_the_instant_as_java_writes_it() {
        // UUIDUtils.generateNewUUID(Instant.ofEpochMilli(0x0192_3456_789a))
        // with both random longs all ones: msb = 0x01923456789a_7fff,
        // lsb = 0xbfffffffffffffff.
        assert_eq!(
            uuid_v7(0x0192_3456_789a, [0xff; 16]),
            "01923456-789a-7fff-bfff-ffffffffffff"
        );
        // All zeros: only the version and variant bits are set.
        assert_eq!(uuid_v7(0, [0; 16]), "00000000-0000-7000-8000-000000000000");
        assert!(is_run_id(&uuid_v7(1_795_946_400_250, [7; 16])));
        assert!(!is_run_id("6f1c2f4e-8a3b-4c5d-9e0f-112233445566"));
    }

    #[test]
    fn the_headers_come_first_in_debeziums_order_as_text() {
        let extended = ExtendedHeaders::new("dbserver1", "0192-run");
        let mut headers: Vec<Header> = vec![(Cow::Borrowed("id"), Some(Bytes::from("e-1")))];
        extended.prepend_to(&mut headers);
        let text: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| {
                let value = String::from_utf8(v.clone().unwrap().to_vec()).unwrap();
                (k.to_string(), value)
            })
            .collect();
        let expected = [
            ("__debezium.context.connectorLogicalName", "dbserver1"),
            ("__debezium.context.taskId", "0"),
            ("__debezium.context.connectorName", "postgresql"),
            ("__debezium.context.runId", "0192-run"),
            ("id", "e-1"),
        ];
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(text, expected);
    }

    #[test]
    fn each_run_has_its_own_run_id() {
        let run_id = |h: ExtendedHeaders| {
            let value = h.0[3].1.clone().unwrap();
            String::from_utf8(value.to_vec()).unwrap()
        };
        let a = run_id(ExtendedHeaders::for_new_run("p"));
        let b = run_id(ExtendedHeaders::for_new_run("p"));
        assert!(is_run_id(&a), "{a}");
        assert_ne!(a, b);
    }
}
