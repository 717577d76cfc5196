//! Wall-clock time in the two epochs walrelay meets: Unix (Kafka timestamps,
//! latency metrics) and PostgreSQL's, 2000-01-01 (commit times and standby
//! status updates on the replication protocol).

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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
    unix_span_us(then_us, unix_now_us())
}

/// The time from one Unix-epoch instant to a later one; zero if `to_us`
/// comes first (two hosts' clocks may disagree).
pub fn unix_span_us(from_us: i64, to_us: i64) -> Duration {
    Duration::from_micros(to_us.saturating_sub(from_us).max(0) as u64)
}

/// How often `UnixInstants` reads the wall clock again, so that a step of
/// the system clock shows within this.
const RESYNC_EVERY_US: i64 = 1_000_000;

/// Monotonic instants on the Unix epoch, without a wall-clock read for
/// each: per-event latencies convert thousands of instants a second, and
/// each has already been read once from the monotonic clock. The wall
/// clock's distance from the monotonic one is read at the start and again
/// once a second of instants has gone by; both clocks run at the same
/// (NTP-slewed) rate, so only a step of the system clock moves it.
#[derive(Debug)]
pub struct UnixInstants {
    base: Instant,
    /// The Unix time of `base`, in microseconds.
    base_unix_us: AtomicI64,
    /// Microseconds after `base` of the last wall-clock read.
    synced_us: AtomicI64,
}

impl UnixInstants {
    pub fn new() -> Self {
        let base = Instant::now();
        UnixInstants {
            base,
            base_unix_us: AtomicI64::new(unix_now_us()),
            synced_us: AtomicI64::new(0),
        }
    }

    /// Microseconds since the Unix epoch at `at`.
    pub fn unix_us(&self, at: Instant) -> i64 {
        let after_us = at.saturating_duration_since(self.base).as_micros() as i64;
        if after_us - self.synced_us.load(Ordering::Relaxed) > RESYNC_EVERY_US {
            let now_after_us = self.base.elapsed().as_micros() as i64;
            self.base_unix_us
                .store(unix_now_us() - now_after_us, Ordering::Relaxed);
            self.synced_us.store(now_after_us, Ordering::Relaxed);
        }
        self.base_unix_us.load(Ordering::Relaxed) + after_us
    }
}

impl Default for UnixInstants {
    fn default() -> Self {
        Self::new()
    }
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

    #[test]
    fn a_monotonic_instant_reads_as_the_wall_clock_read_beside_it() {
        let instants = UnixInstants::new();
        std::thread::sleep(Duration::from_millis(20));
        let (before, at, after) = (unix_now_us(), Instant::now(), unix_now_us());
        let unix = instants.unix_us(at);
        // Within a millisecond: the two clocks may be read a little apart.
        assert!(
            unix >= before - 1_000 && unix <= after + 1_000,
            "{before} {unix} {after}"
        );
    }

    #[test]
    fn instants_a_second_apart_are_a_second_apart_on_the_unix_epoch() {
        let instants = UnixInstants::new();
        let at = Instant::now();
        let later = at + Duration::from_secs(3);
        // The later one first: it reads the wall clock again (a second of
        // instants has gone by), and the earlier one then uses that read.
        let later_us = instants.unix_us(later);
        assert_eq!(later_us - instants.unix_us(at), 3_000_000);
    }
}
