//! The outbox domain: which columns make an event, how extra columns are
//! placed, and which topic an event goes to (Debezium's outbox event router).

pub mod cloudevents;
pub mod column;
pub mod column_default;
pub mod connect;
pub mod expansion;
pub mod extended_headers;
pub mod format;
pub mod mapping;
pub mod message;
pub mod placement;
pub mod routing;
pub mod schema;
pub mod timestamp;
pub mod trace_context;
