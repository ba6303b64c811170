//! Every port the domain needs, with the types that cross them: [`UserStore`] (accounts)
//! and [`FriendStore`] (relation rows and friend requests), adapter `crate::store::sql`;
//! the shared relation cache [`EdgeCache`] and the login throttle's counters
//! [`Attempts`], adapters in `crate::store::{memory, redis}`; users' live sessions
//! [`Sessions`], adapter `crate::peers`. One conformance suite runs per port over every
//! adapter. Adapters depend on the domain, never the other way.

use std::time::Duration;

use async_trait::async_trait;
use imesh_kit::error::StoreError;

use super::check::{Cached, Known};
use super::{
    Error, FriendRequest, Friendship, RelationEvent, User,
    plan::{PairChange, PairState},
};

pub struct NewUser {
    pub user: User,
    /// Empty: the account has no password (admin-created).
    pub password_hash: String,
}

pub struct StoredUser {
    pub user: User,
    pub password_hash: String,
}

/// Fields of a profile to change; `None` keeps the stored value.
#[derive(Debug, Clone, Default)]
pub struct ProfileUpdate {
    pub nickname: Option<String>,
    pub avatar_url: Option<String>,
    pub extra_json: Option<String>,
}

#[async_trait]
pub trait UserStore: Send + Sync + 'static {
    /// MUST fail with `Conflict` when the username is taken, leaving the store unchanged.
    async fn insert(&self, user: &NewUser) -> Result<(), StoreError>;
    async fn by_username(&self, username: &str) -> Result<Option<StoredUser>, StoreError>;
    /// The users among `ids` that exist, in no particular order.
    async fn by_ids(&self, ids: &[i64]) -> Result<Vec<User>, StoreError>;
    /// `None` when the user does not exist.
    async fn update_profile(
        &self,
        id: i64,
        update: &ProfileUpdate,
    ) -> Result<Option<User>, StoreError>;
    /// Sets the flag; disabling MUST also move `token_version` on (atomically), enabling
    /// MUST NOT move it back. `None` when the user does not exist.
    async fn set_disabled(&self, id: i64, disabled: bool) -> Result<Option<User>, StoreError>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Received,
    Sent,
}

/// Encodes a relation event as an outbox payload (see [`crate::events::encode`]).
pub type EncodeEvent = fn(&RelationEvent) -> Vec<u8>;

/// A planning step run inside [`FriendStore::change_pair`]'s transaction.
pub type Plan<'a> = &'a (dyn Fn(&PairState) -> Result<PairChange, Error> + Send + Sync);

#[async_trait]
pub trait FriendStore: Send + Sync + 'static {
    /// Every row owned by any of `owners` (friends or not, blocked or not).
    async fn rows_of(&self, owners: &[i64]) -> Result<Vec<Friendship>, StoreError>;
    /// `owner`'s rows with `sequence > after`, by sequence, at most `limit`.
    async fn changes(
        &self,
        owner: i64,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Friendship>, StoreError>;
    async fn request(&self, id: i64) -> Result<Option<FriendRequest>, StoreError>;
    /// Requests to (`Received`) or from (`Sent`) `user` with `id < before`, newest first.
    async fn requests(
        &self,
        user: i64,
        direction: Direction,
        before: i64,
        limit: u32,
    ) -> Result<Vec<FriendRequest>, StoreError>;
    /// In one transaction: locks users `a` and `b` against every other change of theirs
    /// (NotFound when either does not exist), reads the pair's state, runs `plan` on it and
    /// writes what it returns — each written row with its owner's next change sequence, and
    /// one outbox event per written row or request. Returns the state after the change.
    /// An error from `plan` MUST leave the store unchanged.
    async fn change_pair(&self, a: i64, b: i64, plan: Plan<'_>) -> Result<PairState, Error>;
}

/// The shared cache of owners' relation rows. A fill races the writes it may miss: the
/// filler reads the owners' [`EdgeCache::generations`] BEFORE it reads the database, and
/// [`EdgeCache::put`] stores an owner's rows only while the owner's generation is still the
/// one read. [`EdgeCache::invalidate`] advances it, so rows read before a write are never
/// stored after the write's invalidation.
#[async_trait]
pub trait EdgeCache: Send + Sync + 'static {
    /// For each `(owner, peer)`: `None` when the owner's rows are not cached (the caller
    /// loads them), otherwise the owner's account and their row about the peer.
    async fn get(&self, pairs: &[(i64, i64)]) -> Result<Vec<Option<Cached>>, StoreError>;
    /// Each owner's generation, in the order asked.
    async fn generations(&self, owners: &[i64]) -> Result<Vec<u64>, StoreError>;
    /// Caches each `(owner, generation, rows)`: the owner's complete row set, replacing what
    /// was there, with the cache's TTL, unless the owner was invalidated since `generation`.
    async fn put(&self, owners: &[(i64, u64, Known)]) -> Result<(), StoreError>;
    /// MUST drop the owners' entries and advance their generations; called after every
    /// write to their rows or account.
    async fn invalidate(&self, owners: &[i64]) -> Result<(), StoreError>;
}

/// Windowed counters and holds, keyed by strings.
#[async_trait]
pub trait Attempts: Send + Sync + 'static {
    /// Counts one more hit of `key`; the count is forgotten `window` after its first hit.
    async fn hit(&self, key: &str, window: Duration) -> Result<Hit, StoreError>;
    /// Holds `key` for `wait`.
    async fn hold(&self, key: &str, wait: Duration) -> Result<(), StoreError>;
    /// How much longer the longest-held of `keys` is held, if any is.
    async fn held(&self, keys: &[String]) -> Result<Option<Duration>, StoreError>;
    /// Forgets the hits of `key`.
    async fn forget(&self, key: &str) -> Result<(), StoreError>;
}

/// A counter after a hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hit {
    pub count: u64,
    /// Until the count is forgotten.
    pub resets_in: Duration,
}

/// Users' live client sessions (notify-svc), closed when an account is disabled.
#[async_trait]
pub trait Sessions: Send + Sync + 'static {
    /// Closes every session of `user` with `reason`; returns how many there were.
    async fn disconnect(&self, user: i64, reason: &str) -> anyhow::Result<u32>;
}
