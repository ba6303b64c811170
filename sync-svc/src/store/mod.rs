//! Adapters of the domain's ports: [`sql`] (sea-orm: SQLite, PostgreSQL, MySQL) for
//! [`crate::domain::ports::InboxStore`]; [`redis`] (deployments) and [`memory`] (the
//! embedded default) for [`crate::domain::ports::ReceiptBits`], whose arena layout is
//! described there. One contract suite per port runs over every adapter.

pub mod memory;
pub mod redis;
pub mod sql;

/// The outbox table of the app server's after-event webhooks.
pub const WEBHOOK_TABLE: &str = "webhook_outbox";

#[cfg(test)]
mod tests;
