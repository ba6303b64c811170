//! [`LocalCache`]: the relation check's per-process cache in front of the shared one.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use parking_lot::Mutex;

use super::check::Cached;

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
