//! Every port the domain needs, with the types that cross it: [`GroupStore`] (adapter
//! `crate::store::sql`, one conformance suite over every backend), the shared
//! [`GroupCache`] and large groups' [`Rosters`] (adapters `crate::store::{memory,
//! redis}`), and the peers [`SeqSource`] (message-svc) and [`Nicknames`] (relation-svc),
//! adapters in `crate::peers`. Adapters depend on the domain, never the other way.

use std::collections::HashMap;

use async_trait::async_trait;
use imesh_kit::error::StoreError;

use super::{
    Error, Group, GroupEvent, JoinRequest, Member, Operation,
    rules::{GroupChange, GroupState},
};
use super::{GateGroup, GateMember};

/// Where a joiner's `join_seq` comes from: the conversation's current seq (message-svc).
#[async_trait]
pub trait SeqSource: Send + Sync + 'static {
    async fn current_seq(&self, conversation_id: &str) -> anyhow::Result<i64>;
}

/// Users' nicknames as relation-svc has them now; group-svc keeps a copy on each
/// membership for search, set at join and moved by [`Groups::rename`].
#[async_trait]
pub trait Nicknames: Send + Sync + 'static {
    /// The nickname of each of `users` that exists.
    async fn nicknames(&self, users: &[i64]) -> anyhow::Result<HashMap<i64, String>>;
}

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
    /// Up to `limit` operation-log rows of versions below `before_version`, newest first.
    async fn operations(
        &self,
        group_id: i64,
        before_version: i64,
        limit: u32,
    ) -> Result<Vec<Operation>, StoreError>;
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

/// How many recently active members a group keeps.
pub const ACTIVE_KEPT: usize = 200;

/// The shared tier of the send gate's cache. A fill races the changes it may miss: a
/// filler reads the group's [`GroupCache::generation`] BEFORE it reads the database, and
/// each `put_*` stores only while the generation is still that one. [`GroupCache::invalidate`]
/// advances it, so a fill that read the database before a change (and would put it after
/// the change's invalidation) stores nothing.
#[async_trait]
pub trait GroupCache: Send + Sync + 'static {
    /// The group's generation: the token a fill's puts carry.
    async fn generation(&self, group_id: i64) -> Result<u64, StoreError>;
    async fn group(&self, group_id: i64) -> Result<Option<GateGroup>, StoreError>;
    /// Stores `group` unless the group was invalidated since `generation`; `false` then.
    async fn put_group(
        &self,
        group_id: i64,
        generation: u64,
        group: GateGroup,
    ) -> Result<bool, StoreError>;
    /// `Some(None)`: cached as never having been a member.
    async fn member(
        &self,
        group_id: i64,
        user: i64,
    ) -> Result<Option<Option<GateMember>>, StoreError>;
    /// Stores `member` unless the group was invalidated since `generation`; `false` then.
    async fn put_member(
        &self,
        group_id: i64,
        generation: u64,
        user: i64,
        member: Option<GateMember>,
    ) -> Result<bool, StoreError>;
    async fn member_ids(&self, group_id: i64) -> Result<Option<Vec<i64>>, StoreError>;
    /// Stores `ids` unless the group was invalidated since `generation`; `false` then.
    async fn put_member_ids(
        &self,
        group_id: i64,
        generation: u64,
        ids: &[i64],
    ) -> Result<bool, StoreError>;
    /// Records that `user` was active in the group at `at_ms`, keeping the most recent
    /// [`ACTIVE_KEPT`] (seed 001's hot members of large groups).
    async fn touch(&self, group_id: i64, user: i64, at_ms: i64) -> Result<(), StoreError>;
    /// The most recently active members, most recent first, at most `limit`.
    async fn active(&self, group_id: i64, limit: u32) -> Result<Vec<i64>, StoreError>;
    /// MUST drop every entry of the group and advance its generation; called after each
    /// change to it.
    async fn invalidate(&self, group_id: i64) -> Result<(), StoreError>;
}

/// Buckets per roster.
pub const BUCKETS: i64 = 16;

/// How long a filled roster is trusted before it is filled again.
pub const TTL: std::time::Duration = std::time::Duration::from_secs(1800);

/// How long a claim holds without its fill finishing.
pub const CLAIM_TTL: std::time::Duration = std::time::Duration::from_secs(30);

/// The bucket of `user` (non-negative for every user id).
pub fn bucket(user: i64) -> usize {
    user.rem_euclid(BUCKETS) as usize
}

/// One member as a roster holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Entry {
    pub map_id: u32,
    pub user: i64,
}

/// The roster of a large group (seed 000): its current members' ids in 16 buckets by
/// `user % 16`, each ordered by map id. Map ids are assigned in join order and never reused,
/// so a page from map id `n` is stable while members come and go, and no bucket grows past
/// a few thousand entries. Adapters: `crate::store::{memory, redis}`.
///
/// A roster is kept current by applying each change's members in version order, never by
/// a reload: reloading 100,000 members for every join would cost more than it saves. The
/// protocol that keeps it exact under races:
/// - a filler first [`Rosters::claim`]s the group, then reads the database, then
///   [`Rosters::fill`]s; any change applied meanwhile revokes the claim, so a snapshot that
///   may have missed it is never published;
/// - [`Rosters::apply`] of version `v` applies only to a roster at `v - 1`, and drops any
///   other (a lost or reordered change), so the next reader fills it afresh.
#[async_trait]
pub trait Rosters: Send + Sync + 'static {
    /// Current members with `map_id >= from`, by map id, at most `limit`; `None` when no
    /// roster of the group is stored.
    async fn page(
        &self,
        group_id: i64,
        from: u32,
        limit: u32,
    ) -> Result<Option<Vec<Entry>>, StoreError>;
    /// `Some(Some(map_id))` for a current member, `Some(None)` for anyone else, `None`
    /// when no roster is stored.
    async fn member(&self, group_id: i64, user: i64) -> Result<Option<Option<u32>>, StoreError>;
    /// Claims the right to fill the group's roster; `None` while another fill holds it or
    /// a roster is published (a refill would hide it while it ran). Claim BEFORE reading
    /// the database.
    async fn claim(&self, group_id: i64) -> Result<Option<u64>, StoreError>;
    /// Stores `members`, read after [`Self::claim`] at group `version`, as the roster.
    /// Returns false, publishing nothing, when the claim was revoked or lapsed.
    async fn fill(
        &self,
        group_id: i64,
        claim: u64,
        version: i64,
        members: &[Entry],
    ) -> Result<bool, StoreError>;
    /// Applies the change that brought the group to `version`: `current` are members now
    /// (joined, or changed in place), `gone` left. Revokes any claim. A roster not at
    /// `version - 1` is dropped instead; one at `version` is left as it is.
    async fn apply(
        &self,
        group_id: i64,
        version: i64,
        current: &[Entry],
        gone: &[i64],
    ) -> Result<(), StoreError>;
    /// Drops the roster and revokes any claim (a change too large to apply: imports).
    async fn discard(&self, group_id: i64) -> Result<(), StoreError>;
}
