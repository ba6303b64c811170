//! The adapters of the domain's stores: [`sql`] (sea-orm: SQLite, PostgreSQL, MySQL) for
//! [`crate::domain::MessageStore`] and [`crate::domain::FileStore`], with its group commit
//! and contract tests; [`blobs`] for uploads' bytes.

pub mod blobs;
mod commits;
pub mod sql;

/// The outbox table message-svc's relay drains.
pub const OUTBOX_TABLE: &str = "message_outbox";

#[cfg(test)]
mod tests;
