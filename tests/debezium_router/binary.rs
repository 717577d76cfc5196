//! bytea payloads and keys are sent as their raw bytes, as Debezium sends
//! them with `binary.handling.mode=bytes` (its default) and
//! io.debezium.converters.BinaryDataConverter: debezium/debezium,
//! debezium-connect-plugins/src/main/java/io/debezium/converters/BinaryDataConverter.java,
//! `fromConnectData` returns a `byte[]` value as it is.

use std::collections::HashMap;
use std::time::Duration;

use crate::support::Stack;

const EVENTS: usize = 120;

/// A small deterministic generator, so a failure can be replayed.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn bytes(&mut self, max_len: usize) -> Vec<u8> {
        let len = 1 + (self.next() as usize % max_len);
        (0..len).map(|_| self.next() as u8).collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytea_payloads_and_keys_arrive_as_their_raw_bytes() {
    let stack = Stack::start_on(
        "CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype text, \
             aggregateid bytea, type text, payload bytea)",
        &[
            "--field-event-key",
            "aggregateid",
            "--field-event-type",
            "type",
            "--route-by-field",
            "aggregatetype",
        ],
    )
    .await;

    let mut rng = XorShift(0x5eed_0000_0000_0001);
    let mut sent: HashMap<String, (Vec<u8>, Vec<u8>)> = HashMap::new();
    for i in 0..EVENTS {
        let id = format!("00000000-0000-0000-0000-{i:012}");
        // Zero bytes, 0x5c ('\') and bytes above 0x7f are all likely within 120 rows.
        let key = rng.bytes(16);
        let payload = rng.bytes(400);
        stack
            .client
            .execute(
                "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) \
                 VALUES ($1::text::uuid, 'blob', $2, 'Stored', $3)",
                &[&id, &key, &payload],
            )
            .await
            .unwrap();
        sent.insert(id, (key, payload));
    }

    let reader = stack.broker.consumer();
    reader.subscribe(&["outbox.event.blob"]);
    let got = reader.read(EVENTS, Duration::from_secs(60));
    assert_eq!(got.len(), EVENTS, "log:\n{}", stack.relay.log());
    for m in &got {
        let id = m.header("id").unwrap();
        let (key, payload) = &sent[id];
        assert_eq!(m.raw_key.as_ref(), Some(key), "key of {id}");
        assert_eq!(m.raw_value.as_ref(), Some(payload), "payload of {id}");
    }
}
