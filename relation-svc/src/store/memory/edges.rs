//! The in-process [`EdgeCache`] of the embedded default: owners' row sets with a TTL. An
//! invalidated owner keeps an empty slot holding their generation for a TTL.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use async_trait::async_trait;
use imesh_kit::error::StoreError;
use parking_lot::Mutex;

use crate::domain::EdgeCache;
use crate::domain::check::{Cached, Known};

pub struct MemoryEdgeCache {
    ttl: Duration,
    owners: Mutex<HashMap<i64, Slot>>,
}

/// An owner's rows as last filled (if not invalidated since), and their generation.
struct Slot {
    at: Instant,
    generation: u64,
    known: Option<Known>,
}

impl Default for Slot {
    fn default() -> Self {
        Self {
            at: Instant::now(),
            generation: 0,
            known: None,
        }
    }
}

impl MemoryEdgeCache {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            owners: Mutex::new(HashMap::new()),
        }
    }
}

#[async_trait]
impl EdgeCache for MemoryEdgeCache {
    async fn get(&self, pairs: &[(i64, i64)]) -> Result<Vec<Option<Cached>>, StoreError> {
        let owners = self.owners.lock();
        Ok(pairs
            .iter()
            .map(|(owner, peer)| {
                let slot = owners.get(owner)?;
                let known = slot.known.as_ref()?;
                (slot.at.elapsed() < self.ttl).then(|| Cached {
                    account: known.account,
                    edge: known.edges.get(peer).copied(),
                })
            })
            .collect())
    }

    async fn generations(&self, asked: &[i64]) -> Result<Vec<u64>, StoreError> {
        let owners = self.owners.lock();
        Ok(asked
            .iter()
            .map(|owner| owners.get(owner).map_or(0, |slot| slot.generation))
            .collect())
    }

    async fn put(&self, entries: &[(i64, u64, Known)]) -> Result<(), StoreError> {
        let mut owners = self.owners.lock();
        owners.retain(|_, slot| slot.at.elapsed() < self.ttl);
        for (owner, generation, known) in entries {
            let slot = owners.entry(*owner).or_default();
            if slot.generation == *generation {
                slot.at = Instant::now();
                slot.known = Some(known.clone());
            }
        }
        Ok(())
    }

    async fn invalidate(&self, owners: &[i64]) -> Result<(), StoreError> {
        let mut map = self.owners.lock();
        for owner in owners {
            let slot = map.entry(*owner).or_default();
            *slot = Slot {
                generation: slot.generation + 1,
                ..Slot::default()
            };
        }
        Ok(())
    }
}
