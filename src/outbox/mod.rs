//! The outbox domain: which columns make an event, and which topic it goes to.

pub mod mapping;
pub mod routing;
