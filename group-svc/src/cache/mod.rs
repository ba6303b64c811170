//! The shared group cache behind the send gate's per-process cache (seed 000): group info
//! and member rows as the gate needs them, and member-id sets for write fanout. Adapters:
//! [`redis`] (deployments; invalidations also broadcast to every replica's local cache over
//! pub/sub) and [`memory`] (the embedded default). The database stays the truth: writers
//! change it first, then invalidate here.

use async_trait::async_trait;
use imesh_kit::error::StoreError;

pub use crate::domain::{GateGroup, GateMember};

pub mod keys;
pub mod memory;
pub mod redis;
pub mod roster;

/// How many recently active members a group keeps.
pub const ACTIVE_KEPT: usize = 200;

#[async_trait]
pub trait GroupCache: Send + Sync + 'static {
    async fn group(&self, group_id: i64) -> Result<Option<GateGroup>, StoreError>;
    async fn put_group(&self, group_id: i64, group: GateGroup) -> Result<(), StoreError>;
    /// `Some(None)`: cached as never having been a member.
    async fn member(
        &self,
        group_id: i64,
        user: i64,
    ) -> Result<Option<Option<GateMember>>, StoreError>;
    async fn put_member(
        &self,
        group_id: i64,
        user: i64,
        member: Option<GateMember>,
    ) -> Result<(), StoreError>;
    async fn member_ids(&self, group_id: i64) -> Result<Option<Vec<i64>>, StoreError>;
    async fn put_member_ids(&self, group_id: i64, ids: &[i64]) -> Result<(), StoreError>;
    /// Records that `user` was active in the group at `at_ms`, keeping the most recent
    /// [`ACTIVE_KEPT`] (seed 001's hot members of large groups).
    async fn touch(&self, group_id: i64, user: i64, at_ms: i64) -> Result<(), StoreError>;
    /// The most recently active members, most recent first, at most `limit`.
    async fn active(&self, group_id: i64, limit: u32) -> Result<Vec<i64>, StoreError>;
    /// MUST drop every entry of the group; called after each change to it.
    async fn invalidate(&self, group_id: i64) -> Result<(), StoreError>;
}

#[cfg(test)]
mod tests;
