//! The flags of outbox retention (`walrelay run --retention`), a group of
//! their own in `--help`, and the settings built from them.

use std::time::Duration;

use clap::Args;

use super::{parse_duration, Source};
use crate::error::{Error, Result};
use crate::retention::RetentionSettings;

/// Outbox retention: deleting rows (or dropping partitions) whose events are confirmed.
#[derive(Args, Clone)]
#[command(next_help_heading = "Outbox retention")]
pub struct RetentionArgs {
    /// Delete outbox rows older than this whose events Kafka acknowledged and walrelay confirmed (e.g. 7d); off unless given.
    #[arg(long, env = "WALRELAY_RETENTION", value_parser = parse_duration)]
    pub retention: Option<Duration>,

    /// Rows deleted per statement, each in a transaction of its own.
    #[arg(long, env = "WALRELAY_RETENTION_BATCH_SIZE", default_value_t = 1000)]
    pub retention_batch_size: usize,

    /// How often a retention pass runs [default: 1m, or a quarter of --retention when shorter].
    #[arg(long, env = "WALRELAY_RETENTION_INTERVAL", value_parser = parse_duration)]
    pub retention_interval: Option<Duration>,

    /// The timestamptz column with each row's insert time (the server's clock: DEFAULT now() or clock_timestamp()), which --retention counts from; a timestamp without time zone or a date is refused (its writers' zone is unknown).
    #[arg(
        long,
        env = "WALRELAY_RETENTION_TIME_COLUMN",
        default_value = "created_at"
    )]
    pub retention_time_column: String,

    /// On an outbox partitioned by time, keep this many partitions made ahead of the current one, named and sized like the newest.
    #[arg(long, env = "WALRELAY_PARTITIONS_AHEAD", default_value_t = 0)]
    pub partitions_ahead: u32,
}

/// The longest pause between passes.
const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);
/// Most rows per DELETE: a batch must stay a short transaction.
const MAX_BATCH: usize = 100_000;

impl RetentionArgs {
    /// None when neither retention nor partitions ahead is asked for.
    pub fn settings(&self, source: Source) -> Result<Option<RetentionSettings>> {
        if self.retention.is_none() && self.partitions_ahead == 0 {
            return Ok(None);
        }
        if source == Source::Messages {
            return Err(Error::permanent(
                "--retention and --partitions-ahead work on an outbox table, and --source \
                 messages has none (its events are in the WAL only): drop them",
            ));
        }
        if self.retention.is_some_and(|keep| keep.is_zero()) {
            return Err(Error::permanent(
                "--retention must be above 0, e.g. 7d; leave it out to keep every row",
            ));
        }
        if !(1..=MAX_BATCH).contains(&self.retention_batch_size) {
            return Err(Error::permanent(format!(
                "--retention-batch-size must be between 1 and {MAX_BATCH} (e.g. 1000): each \
                 batch is one DELETE in a transaction of its own"
            )));
        }
        if self.retention_time_column.is_empty() {
            return Err(Error::permanent(
                "--retention-time-column is empty: name the column with each row's insert time, \
                 e.g. created_at",
            ));
        }
        let interval = match self.retention_interval {
            Some(interval) if interval < Duration::from_millis(100) => {
                return Err(Error::permanent(
                    "--retention-interval must be at least 100ms (e.g. 1m)",
                ))
            }
            Some(interval) => interval,
            None => self
                .retention
                .map_or(DEFAULT_INTERVAL, |keep| (keep / 4).min(DEFAULT_INTERVAL))
                .max(Duration::from_millis(100)),
        };
        Ok(Some(RetentionSettings {
            keep: self.retention,
            batch_size: self.retention_batch_size,
            interval,
            time_column: self.retention_time_column.clone(),
            partitions_ahead: self.partitions_ahead,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::super::run_args;
    use super::*;

    fn settings(extra: &[&str]) -> Result<Option<RetentionSettings>> {
        let args = run_args(extra);
        args.retention.settings(args.source.source)
    }

    #[test]
    fn retention_is_off_unless_asked_for() {
        assert!(settings(&[]).unwrap().is_none());
        let on = settings(&["--retention", "7days"]).unwrap().unwrap();
        assert_eq!(on.keep, Some(Duration::from_secs(7 * 86_400)));
        assert_eq!(on.interval, Duration::from_secs(60));
        assert_eq!(on.batch_size, 1000);
        assert_eq!(on.time_column, "created_at");
    }

    #[test]
    fn a_short_retention_runs_its_passes_more_often() {
        let short = settings(&["--retention", "20s"]).unwrap().unwrap();
        assert_eq!(short.interval, Duration::from_secs(5));
        let set = settings(&["--retention", "20s", "--retention-interval", "2s"])
            .unwrap()
            .unwrap();
        assert_eq!(set.interval, Duration::from_secs(2));
    }

    #[test]
    fn partitions_ahead_alone_makes_partitions_and_deletes_nothing() {
        let ahead = settings(&["--partitions-ahead", "2"]).unwrap().unwrap();
        assert_eq!((ahead.keep, ahead.partitions_ahead), (None, 2));
    }

    #[test]
    fn bad_retention_values_are_refused_with_the_fix() {
        for (extra, says) in [
            (&["--retention", "0s"][..], "above 0"),
            (
                &["--retention", "1d", "--retention-batch-size", "0"],
                "between 1",
            ),
            (
                &["--retention", "1d", "--source", "messages"],
                "--source messages",
            ),
            (
                &["--retention", "1d", "--retention-interval", "1ms"],
                "at least 100ms",
            ),
        ] {
            let Err(e) = settings(extra) else {
                panic!("{extra:?} was accepted");
            };
            assert!(e.to_string().contains(says), "{extra:?}: {e}");
        }
    }
}
