//! The adapter of the domain's [`crate::domain::UserStore`] and
//! [`crate::domain::FriendStore`]: [`sql`] (sea-orm: SQLite, PostgreSQL, MySQL), with its
//! conformance suite over every backend.

pub mod sql;

/// The outbox table of relation events.
pub const OUTBOX_TABLE: &str = "relation_outbox";

#[cfg(test)]
mod tests;
