//! Wall-clock time in the two epochs walrelay meets: Unix (Kafka timestamps,
//! latency metrics) and PostgreSQL's, 2000-01-01 (commit times and standby
//! status updates on the replication protocol).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Microseconds between the Unix epoch and the PostgreSQL epoch.
const PG_EPOCH_OFFSET_US: i64 = 946_684_800 * 1_000_000;

/// Microseconds since the Unix epoch.
pub fn unix_now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_micros() as i64
}

/// Microseconds since the PostgreSQL epoch, as the replication protocol counts time.
pub fn pg_now_us() -> i64 {
    unix_now_us() - PG_EPOCH_OFFSET_US
}

/// A PostgreSQL timestamp (microseconds since 2000-01-01) on the Unix epoch.
pub fn pg_to_unix_us(pg_us: i64) -> i64 {
    pg_us + PG_EPOCH_OFFSET_US
}

/// How long ago a Unix-epoch instant was; zero if the clocks disagree.
pub fn since_unix_us(then_us: i64) -> Duration {
    Duration::from_micros(unix_now_us().saturating_sub(then_us).max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_postgres_epoch_is_the_first_of_january_2000() {
        // 2000-01-01T00:00:00Z is 946684800 seconds after the Unix epoch.
        assert_eq!(pg_to_unix_us(0), 946_684_800_000_000);
        assert!((pg_now_us() + PG_EPOCH_OFFSET_US - unix_now_us()).abs() < 1_000_000);
    }
}
