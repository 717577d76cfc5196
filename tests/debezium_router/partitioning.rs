//! Keyed events land on the partition the Java producer (Debezium's Kafka
//! Connect worker) would pick.

use std::time::Duration;

use crate::support::Stack;

/// Kafka's `Utils.murmur2`, written from
/// apache/kafka clients/src/main/java/org/apache/kafka/common/utils/Utils.java
/// (`public static int murmur2(final byte[] data)`: seed 0x9747b28c, m 0x5bd1e995,
/// r 24, little-endian 4-byte blocks, the tail folded in by fall-through).
fn murmur2(data: &[u8]) -> i32 {
    let m: i32 = 0x5bd1e995;
    let r = 24;
    let mut h: i32 = 0x9747b28c_u32 as i32 ^ data.len() as i32;
    let blocks = data.len() / 4;
    for i in 0..blocks {
        let b = &data[i * 4..i * 4 + 4];
        let mut k = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        k = k.wrapping_mul(m);
        k ^= ((k as u32) >> r) as i32;
        k = k.wrapping_mul(m);
        h = h.wrapping_mul(m);
        h ^= k;
    }
    let tail = &data[blocks * 4..];
    if tail.len() >= 3 {
        h ^= (tail[2] as i32) << 16;
    }
    if tail.len() >= 2 {
        h ^= (tail[1] as i32) << 8;
    }
    if !tail.is_empty() {
        h ^= tail[0] as i32;
        h = h.wrapping_mul(m);
    }
    h ^= ((h as u32) >> 13) as i32;
    h = h.wrapping_mul(m);
    h ^= ((h as u32) >> 15) as i32;
    h
}

/// BuiltInPartitioner.partitionForKey in the same repository:
/// `Utils.toPositive(Utils.murmur2(serializedKey)) % numPartitions`, where
/// `toPositive(n)` is `n & 0x7fffffff` (Utils.java).
fn java_partition(key: &[u8], partitions: i32) -> i32 {
    (murmur2(key) & 0x7fffffff) % partitions
}

#[test]
fn murmur2_matches_kafkas_own_test_vectors() {
    // apache/kafka clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2.
    let vectors: &[(&[u8], i32)] = &[
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (
            b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
            -58897971,
        ),
        (b"abc", 479470107),
    ];
    for (data, expected) in vectors {
        assert_eq!(
            murmur2(data),
            *expected,
            "{}",
            String::from_utf8_lossy(data)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_events_land_on_the_java_producers_partition() {
    const PARTITIONS: i32 = 7;
    const EVENTS: usize = 300;
    let stack = Stack::start(&["--topic-partitions", &PARTITIONS.to_string()]).await;
    // Keys of every tail length, and non-ASCII ones, whose bytes are negative
    // as Java bytes (murmur2 masks them with 0xff).
    stack
        .client
        .execute(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             SELECT gen_random_uuid(), 'order', \
                    CASE WHEN i % 3 = 0 THEN 'größe-' || i ELSE repeat('k', i % 9) || i END, \
                    'Keyed', '{}' \
             FROM generate_series(1, $1::int) i",
            &[&(EVENTS as i32)],
        )
        .await
        .unwrap();
    let reader = stack.broker.consumer();
    reader.subscribe(&["outbox.event.Keyed"]);
    let got = reader.read(EVENTS, Duration::from_secs(60));
    assert_eq!(got.len(), EVENTS, "log:\n{}", stack.relay.log());
    let mut used = std::collections::HashSet::new();
    for m in &got {
        let key = m.key.as_deref().unwrap();
        assert_eq!(
            m.partition,
            java_partition(key.as_bytes(), PARTITIONS),
            "partition of key {key:?}"
        );
        used.insert(m.partition);
    }
    assert_eq!(used.len(), PARTITIONS as usize, "every partition is used");
}
