//! Adapters of the domain's storage and cache ports: [`sql`] (sea-orm: SQLite, PostgreSQL,
//! MySQL) for [`crate::domain::UserStore`] and [`crate::domain::FriendStore`]; [`redis`]
//! and [`memory`] for [`crate::domain::EdgeCache`] and [`crate::domain::Attempts`]. One
//! conformance suite per port runs over every adapter.

pub mod memory;
pub mod redis;
pub mod sql;

/// The outbox table of relation events.
pub const OUTBOX_TABLE: &str = "relation_outbox";

#[cfg(test)]
mod tests;
