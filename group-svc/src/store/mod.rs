//! Adapters of the domain's storage and cache ports: [`sql`] (sea-orm: SQLite, PostgreSQL,
//! MySQL) for [`crate::domain::GroupStore`]; [`redis`] and [`memory`] for the shared group
//! cache behind the send gate's per-process one ([`crate::domain::GroupCache`], seed 000)
//! and large groups' [`crate::domain::ports::Rosters`]. One conformance suite per port runs
//! over every adapter. The database stays the truth: writers change it first, then
//! invalidate the caches.

pub mod memory;
pub mod redis;
pub mod sql;

/// The outbox table of group events.
pub const OUTBOX_TABLE: &str = "group_outbox";

#[cfg(test)]
pub(crate) mod tests;
