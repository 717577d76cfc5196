//! The flags of `--delivery` (at least once, or exactly once through Kafka
//! transactions), a group of their own in `--help`, and the settings built
//! from them.

use std::time::Duration;

use clap::{Args, ValueEnum};

use super::parse_duration;
use crate::error::{Error, Result};
use crate::outbox::routing::validate_topic;

/// How often each event reaches Kafka.
#[derive(Args, Clone)]
#[command(next_help_heading = "Delivery")]
pub struct DeliveryArgs {
    /// at-least-once: each event is acknowledged on its own and may come again after a crash; exactly-once: Kafka transactions with the position inside, so read_committed consumers see each event once (needs a broker with transactions).
    #[arg(long, env = "WALRELAY_DELIVERY", value_enum, default_value_t = Delivery::AtLeastOnce)]
    pub delivery: Delivery,

    /// With exactly-once: a Kafka transaction closes at the first Postgres commit that brings it to this many events (a Postgres transaction is never split).
    #[arg(
        long,
        env = "WALRELAY_TRANSACTION_MAX_EVENTS",
        default_value_t = 10_000
    )]
    pub transaction_max_events: usize,

    /// With exactly-once: a Kafka transaction open this long closes at the next Postgres commit, or at once between Postgres transactions; what a read_committed consumer waits at most, beyond the commit itself.
    #[arg(long, env = "WALRELAY_TRANSACTION_MAX_DURATION", default_value = "100ms", value_parser = parse_duration)]
    pub transaction_max_duration: Duration,

    /// With exactly-once: the compacted topic where each Kafka transaction records the position of its last Postgres transaction (created with one partition if missing).
    #[arg(
        long,
        env = "WALRELAY_POSITION_TOPIC",
        default_value = "walrelay.positions"
    )]
    pub position_topic: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Delivery {
    /// Each event is acknowledged on its own; after a crash some come again (consumers dedupe by event id).
    AtLeastOnce,
    /// Events go in Kafka transactions that also record the position: each once for read_committed consumers.
    ExactlyOnce,
}

/// What `--delivery exactly-once` runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExactlyOnce {
    /// A Kafka transaction closes at the first Postgres commit at or past this many events.
    pub max_events: usize,
    /// ... or once it has been open this long.
    pub max_duration: Duration,
    /// The compacted topic of positions.
    pub position_topic: String,
}

impl DeliveryArgs {
    /// None for at-least-once.
    pub fn settings(&self) -> Result<Option<ExactlyOnce>> {
        if self.delivery == Delivery::AtLeastOnce {
            return Ok(None);
        }
        if self.transaction_max_events == 0 {
            return Err(Error::permanent(
                "--transaction-max-events must be at least 1 (e.g. 10000)",
            ));
        }
        if self.transaction_max_duration < Duration::from_millis(1) {
            return Err(Error::permanent(
                "--transaction-max-duration must be at least 1ms (e.g. 100ms)",
            ));
        }
        validate_topic(&self.position_topic)
            .map_err(|e| Error::permanent(format!("--position-topic: {e}")))?;
        Ok(Some(ExactlyOnce {
            max_events: self.transaction_max_events,
            max_duration: self.transaction_max_duration,
            position_topic: self.position_topic.clone(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{run_args, Settings};

    #[test]
    fn at_least_once_is_the_default_and_exactly_once_takes_its_limits() {
        assert_eq!(
            Settings::from_args(&run_args(&[])).unwrap().exactly_once,
            None
        );
        let eos = Settings::from_args(&run_args(&[
            "--delivery",
            "exactly-once",
            "--transaction-max-events",
            "50",
            "--transaction-max-duration",
            "2s",
        ]))
        .unwrap()
        .exactly_once
        .unwrap();
        assert_eq!(eos.max_events, 50);
        assert_eq!(eos.max_duration, std::time::Duration::from_secs(2));
        assert_eq!(eos.position_topic, "walrelay.positions");
    }

    #[test]
    fn a_transaction_limit_of_nothing_or_an_illegal_position_topic_is_refused() {
        for extra in [
            &["--transaction-max-events", "0"][..],
            &["--transaction-max-duration", "0s"],
            &["--position-topic", "no spaces"],
        ] {
            let argv = [&["--delivery", "exactly-once"][..], extra].concat();
            let Err(e) = Settings::from_args(&run_args(&argv)) else {
                panic!("{extra:?} was accepted");
            };
            assert!(e.to_string().contains(extra[0]), "{e}");
        }
    }
}
