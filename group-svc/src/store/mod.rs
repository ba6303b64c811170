//! The storage port of group-svc. Adapter: [`sql`] (sea-orm: SQLite, PostgreSQL, MySQL).

use async_trait::async_trait;
use imesh_kit::error::StoreError;

use crate::domain::{Group, Member};

pub mod sql;

#[async_trait]
pub trait GroupStore: Send + Sync + 'static {
    /// Stores a new group with its members in one transaction.
    async fn create(&self, group: &Group, members: &[Member]) -> Result<(), StoreError>;
    async fn group(&self, group_id: i64) -> Result<Option<Group>, StoreError>;
    /// Current members, by map id.
    async fn members(&self, group_id: i64) -> Result<Vec<Member>, StoreError>;
}

#[cfg(test)]
mod tests;
