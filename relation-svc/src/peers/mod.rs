//! Clients of other services, as the domain's ports and the outbox's sinks.

pub mod groups;
pub mod notify;
