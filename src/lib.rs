//! walrelay: publishes a Postgres transactional outbox to Kafka through a
//! pgoutput logical replication slot, confirming each commit only after
//! Kafka has acknowledged its events.
//!
//! The binary (`src/main.rs`) only parses flags and picks a command; the
//! library holds everything else, so the apply path can be tested without a
//! broker (see `relay` and `sink`).

mod allocator;
#[cfg(feature = "aws")]
pub mod aws;
pub mod check;
pub mod clock;
pub mod completions;
pub mod config;
pub mod delivery;
pub mod error;
pub mod http;
pub mod kafka;
pub mod lifecycle;
pub mod logging;
pub mod metrics;
pub mod migrate;
pub mod outbox;
pub mod output;
pub mod percent;
pub mod postgres;
pub mod redrive;
pub mod registry;
pub mod relay;
pub mod retention;
pub mod sink;
pub mod status;
pub mod watchdog;
