//! The adapter of the domain's [`crate::domain::MessageStore`]: [`sql`] (sea-orm: SQLite,
//! PostgreSQL, MySQL), with its group commit and contract tests.

mod commits;
pub mod sql;

/// The outbox table message-svc's relay drains.
pub const OUTBOX_TABLE: &str = "message_outbox";

#[cfg(test)]
mod tests;
