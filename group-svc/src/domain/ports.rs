//! Every storage port the domain needs, with the types that cross it: [`GroupStore`]
//! (adapter `crate::store::sql`, one conformance suite over every backend). Adapters depend
//! on the domain, never the other way.

use async_trait::async_trait;
use imesh_kit::error::StoreError;

use super::{
    Error, Group, GroupEvent, JoinRequest, Member,
    rules::{GroupChange, GroupState},
};

/// Encodes a group event as an outbox payload (see [`crate::events::encode`]).
pub type EncodeEvent = fn(&GroupEvent) -> Vec<u8>;

/// A decision run inside [`GroupStore::change`]'s transaction.
pub type Plan<'a> = &'a (dyn Fn(&GroupState) -> Result<GroupChange, Error> + Send + Sync);

#[async_trait]
pub trait GroupStore: Send + Sync + 'static {
    /// Stores a new group with its members, an operation-log row and its event, in one
    /// transaction.
    async fn create(&self, group: &Group, members: &[Member]) -> Result<(), StoreError>;
    async fn group(&self, group_id: i64) -> Result<Option<Group>, StoreError>;
    /// The rows of `users` in the group, whatever their status.
    async fn members(&self, group_id: i64, users: &[i64]) -> Result<Vec<Member>, StoreError>;
    /// Current members with `map_id >= from`, by map id.
    async fn page(&self, group_id: i64, from: u32, limit: u32) -> Result<Vec<Member>, StoreError>;
    /// Current members whose alias or nickname contains `query`, by map id.
    async fn search(
        &self,
        group_id: i64,
        query: &str,
        limit: u32,
    ) -> Result<Vec<Member>, StoreError>;
    async fn member_ids(&self, group_id: i64) -> Result<Vec<i64>, StoreError>;
    /// Every current member as `(map_id, user)`, by map id (a large group's roster).
    async fn roster(&self, group_id: i64) -> Result<Vec<(u32, i64)>, StoreError>;
    /// Sets each `(user, nickname, version)` on every membership row of the user whose
    /// stored version is lower; returns how many rows changed.
    async fn rename(&self, names: &[(i64, String, i64)]) -> Result<u64, StoreError>;
    /// Groups `user` currently belongs to with `id < before`, newest first.
    async fn groups_of(&self, user: i64, before: i64, limit: u32)
    -> Result<Vec<Group>, StoreError>;
    async fn join_requests(&self, group_id: i64) -> Result<Vec<JoinRequest>, StoreError>;
    /// In one transaction: locks the group against every other change (NotFound when it
    /// does not exist), reads its state with `actor`'s and `users`' rows and requests, runs
    /// `plan`, and writes what it returns: the group with its version bumped and its members
    /// recounted, the members, the requests, an operation-log row and one event. A plan that
    /// changes nothing writes nothing. Returns the group after and the members written.
    async fn change(
        &self,
        group_id: i64,
        actor: i64,
        users: &[i64],
        plan: Plan<'_>,
    ) -> Result<(Group, Vec<Member>), Error>;
    /// Counts the group's current members and, under the group's lock, stores the count
    /// when it differs from `member_count` (a count found in step takes no lock). Returns the count stored before and the group after
    /// (its version bumped only when the count was corrected). NotFound for no group.
    async fn recount(&self, group_id: i64) -> Result<(u32, Group), StoreError>;
    /// Ids of groups with `id > after`, ascending, at most `limit` (sweeps).
    async fn group_ids(&self, after: i64, limit: u32) -> Result<Vec<i64>, StoreError>;
    /// Adds current members in bulk (new map ids, no events), skipping existing members;
    /// returns how many were added. `users` MUST hold no duplicates. MUST fail with
    /// `Conflict`, adding nothing, when the group would exceed its `max_member`.
    async fn import(
        &self,
        group_id: i64,
        users: &[i64],
        join_seq: i64,
        now_ms: i64,
    ) -> Result<u32, StoreError>;
}
