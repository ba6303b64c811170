//! The roster of a large group (seed 000): its current members' ids in 16 buckets by
//! `user % 16`, each ordered by map id. Map ids are assigned in join order and never reused,
//! so a page from map id `n` is stable while members come and go, and no bucket grows past
//! a few thousand entries. Adapters: [`redis`] (sorted sets, scripts) and [`memory`].
//!
//! A roster is kept current by applying each change's members in version order, never by
//! a reload: reloading 100,000 members for every join would cost more than it saves. The
//! protocol that keeps it exact under races:
//! - a filler first [`Rosters::claim`]s the group, then reads the database, then
//!   [`Rosters::fill`]s; any change applied meanwhile revokes the claim, so a snapshot that
//!   may have missed it is never published;
//! - [`Rosters::apply`] of version `v` applies only to a roster at `v - 1`, and drops any
//!   other (a lost or reordered change), so the next reader fills it afresh.

use async_trait::async_trait;
use imesh_kit::error::StoreError;

pub mod memory;
pub mod redis;

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

#[cfg(test)]
pub(crate) mod tests;
