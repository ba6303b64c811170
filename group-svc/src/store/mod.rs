//! The adapter of the domain's [`crate::domain::GroupStore`]: [`sql`] (sea-orm: SQLite,
//! PostgreSQL, MySQL), with its conformance suite over every backend.

pub mod sql;

/// The outbox table of group events.
pub const OUTBOX_TABLE: &str = "group_outbox";

#[cfg(test)]
mod tests;
