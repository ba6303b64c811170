//! The adapter of the domain's [`crate::domain::ports::InboxStore`]: [`sql`] (sea-orm:
//! SQLite, PostgreSQL, MySQL), with its contract tests.

pub mod sql;

/// The outbox table of the app server's after-event webhooks.
pub const WEBHOOK_TABLE: &str = "webhook_outbox";

#[cfg(test)]
mod tests;
