//! The in-process [`Attempts`]: counters and holds in a map, expired entries swept out as
//! it grows.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use async_trait::async_trait;
use imesh_kit::error::StoreError;
use parking_lot::Mutex;

use crate::domain::ports::{Attempts, Hit};

/// Entries written between two sweeps of expired ones.
const SWEEP_EVERY: usize = 1_024;

#[derive(Default)]
pub struct MemoryAttempts {
    inner: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    /// Key → (count, when it is forgotten).
    map: HashMap<String, (u64, Instant)>,
    writes: usize,
}

impl Entries {
    fn live(&self, key: &str, now: Instant) -> Option<(u64, Instant)> {
        self.map.get(key).copied().filter(|(_, ends)| *ends > now)
    }

    fn put(&mut self, key: &str, entry: (u64, Instant), now: Instant) {
        self.writes += 1;
        if self.writes.is_multiple_of(SWEEP_EVERY) {
            self.map.retain(|_, (_, ends)| *ends > now);
        }
        self.map.insert(key.to_owned(), entry);
    }
}

#[async_trait]
impl Attempts for MemoryAttempts {
    async fn hit(&self, key: &str, window: Duration) -> Result<Hit, StoreError> {
        let now = Instant::now();
        let mut entries = self.inner.lock();
        let (count, ends) = entries.live(key, now).unwrap_or((0, now + window));
        entries.put(key, (count + 1, ends), now);
        Ok(Hit {
            count: count + 1,
            resets_in: ends - now,
        })
    }

    async fn hold(&self, key: &str, wait: Duration) -> Result<(), StoreError> {
        let now = Instant::now();
        self.inner.lock().put(key, (1, now + wait), now);
        Ok(())
    }

    async fn held(&self, keys: &[String]) -> Result<Option<Duration>, StoreError> {
        let now = Instant::now();
        let entries = self.inner.lock();
        Ok(keys
            .iter()
            .filter_map(|key| entries.live(key, now))
            .map(|(_, ends)| ends - now)
            .max())
    }

    async fn forget(&self, key: &str) -> Result<(), StoreError> {
        self.inner.lock().map.remove(key);
        Ok(())
    }
}
