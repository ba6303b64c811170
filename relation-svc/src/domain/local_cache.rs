//! [`LocalCache`]: the relation check's per-process cache in front of the shared one.

use std::{
    collections::HashMap,
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use parking_lot::Mutex;

use super::check::Cached;

/// A small per-process cache of `(owner, peer)` answers. Entries live `ttl` (short: other
/// replicas' writes reach this process only by expiry) and the whole cache is dropped when
/// it holds more than `max_owners` owners, which bounds its memory. A lookup keeps what
/// it read only if no forget came while it read ([`LocalCache::forgets`]).
pub struct LocalCache {
    ttl: Duration,
    max_owners: usize,
    owners: Mutex<HashMap<i64, Answers>>,
    forgets: AtomicU64,
}

/// One owner's cached answers: peer → (when cached, answer).
type Answers = HashMap<i64, (Instant, Cached)>;

impl LocalCache {
    pub fn new(ttl: Duration, max_owners: usize) -> Self {
        Self {
            ttl,
            max_owners,
            owners: Mutex::new(HashMap::new()),
            forgets: AtomicU64::new(0),
        }
    }

    /// Forgets so far: read before a lookup, handed to [`LocalCache::put`].
    pub fn forgets(&self) -> u64 {
        self.forgets.load(Ordering::Acquire)
    }

    pub fn get(&self, owner: i64, peer: i64) -> Option<Cached> {
        let owners = self.owners.lock();
        let (at, cached) = owners.get(&owner)?.get(&peer)?;
        (at.elapsed() < self.ttl).then_some(*cached)
    }

    /// Keeps an answer read after `forgets` were counted, unless a forget came since.
    pub fn put(&self, forgets: u64, owner: i64, peer: i64, cached: Cached) {
        if self.ttl.is_zero() {
            return;
        }
        let mut owners = self.owners.lock();
        if self.forgets() != forgets {
            return;
        }
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
        self.forgets.fetch_add(1, Ordering::AcqRel);
        for owner in owners {
            map.remove(owner);
        }
    }
}
