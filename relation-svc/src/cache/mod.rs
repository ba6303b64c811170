//! The relation caches in front of the database: [`LocalCache`] (per process, a second or
//! so) and the shared [`EdgeCache`] port, with a Redis adapter ([`redis`], seed 001's hash
//! per user) and an in-process one ([`memory`], the embedded default).

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use async_trait::async_trait;
use imesh_kit::error::StoreError;
use parking_lot::Mutex;

use crate::domain::check::{Cached, Known};

pub mod keys;
pub mod memory;
pub mod redis;

/// The shared cache of owners' relation rows.
#[async_trait]
pub trait EdgeCache: Send + Sync + 'static {
    /// For each `(owner, peer)`: `None` when the owner's rows are not cached (the caller
    /// loads them), otherwise the owner's account and their row about the peer.
    async fn get(&self, pairs: &[(i64, i64)]) -> Result<Vec<Option<Cached>>, StoreError>;
    /// Caches each owner's complete row set, replacing what was there, with the cache's TTL.
    async fn put(&self, owners: &[(i64, Known)]) -> Result<(), StoreError>;
    /// MUST drop the owners' entries; called after every write to their rows or account.
    async fn invalidate(&self, owners: &[i64]) -> Result<(), StoreError>;
}

/// A small per-process cache of `(owner, peer)` answers. Entries live `ttl` (short: other
/// replicas' writes reach this process only by expiry) and the whole cache is dropped when
/// it holds more than `max_owners` owners, which bounds its memory.
pub struct LocalCache {
    ttl: Duration,
    max_owners: usize,
    owners: Mutex<HashMap<i64, Answers>>,
}

/// One owner's cached answers: peer → (when cached, answer).
type Answers = HashMap<i64, (Instant, Cached)>;

impl LocalCache {
    pub fn new(ttl: Duration, max_owners: usize) -> Self {
        Self {
            ttl,
            max_owners,
            owners: Mutex::new(HashMap::new()),
        }
    }

    pub fn get(&self, owner: i64, peer: i64) -> Option<Cached> {
        let owners = self.owners.lock();
        let (at, cached) = owners.get(&owner)?.get(&peer)?;
        (at.elapsed() < self.ttl).then_some(*cached)
    }

    pub fn put(&self, owner: i64, peer: i64, cached: Cached) {
        if self.ttl.is_zero() {
            return;
        }
        let mut owners = self.owners.lock();
        if owners.len() >= self.max_owners && !owners.contains_key(&owner) {
            owners.clear();
        }
        owners
            .entry(owner)
            .or_default()
            .insert(peer, (Instant::now(), cached));
    }

    pub fn forget(&self, owners: &[i64]) {
        let mut map = self.owners.lock();
        for owner in owners {
            map.remove(owner);
        }
    }
}

#[cfg(test)]
mod tests;
