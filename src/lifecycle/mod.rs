//! The outbox beyond streaming: publishing rows that are already in the
//! table. `walrelay replay` sends rows again on demand; `walrelay audit`
//! checks that every row's event is in its topic; `run --snapshot-where`
//! publishes the rows that predate the slot on its first start.
//!
//! None of it touches the apply loop. Rows are read as the replication
//! stream would carry them (`rows`), mapped by `outbox::mapping` and sent
//! through the relay's own publisher (`sender`), so what these commands
//! send is what `run` sends.

pub mod audit;
pub mod order;
pub mod plan;
pub mod replay;
pub mod rows;
pub mod sender;
pub mod snapshot;
