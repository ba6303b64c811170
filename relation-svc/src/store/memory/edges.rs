//! The in-process [`EdgeCache`] of the embedded default: owners' row sets with a TTL.

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
    owners: Mutex<HashMap<i64, (Instant, Known)>>,
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
                let (at, known) = owners.get(owner)?;
                (at.elapsed() < self.ttl).then(|| Cached {
                    account: known.account,
                    edge: known.edges.get(peer).copied(),
                })
            })
            .collect())
    }

    async fn put(&self, entries: &[(i64, Known)]) -> Result<(), StoreError> {
        let mut owners = self.owners.lock();
        owners.retain(|_, (at, _)| at.elapsed() < self.ttl);
        let now = Instant::now();
        for (owner, known) in entries {
            owners.insert(*owner, (now, known.clone()));
        }
        Ok(())
    }

    async fn invalidate(&self, owners: &[i64]) -> Result<(), StoreError> {
        let mut map = self.owners.lock();
        for owner in owners {
            map.remove(owner);
        }
        Ok(())
    }
}
