//! Counters in Redis: one script call for a batch of keys (one per hash slot on a cluster).

use std::collections::BTreeMap;

use async_trait::async_trait;
use fred::prelude::*;

use super::Counters;
use crate::error::StoreError;

/// For each key in turn, `INCR` when it exists and nil otherwise (the counter was lost). A
/// key given twice is counted twice, in order.
const INCR_EXISTING: &str = "local values = {} \
    for i, key in ipairs(KEYS) do \
        if redis.call('EXISTS', key) == 1 then values[i] = redis.call('INCR', key) \
        else values[i] = false end \
    end \
    return values";

#[derive(Clone)]
pub struct RedisCounters {
    pool: Pool,
}

impl RedisCounters {
    pub fn new(pool: Pool) -> Self {
        Self { pool }
    }
}

#[async_trait]
impl Counters for RedisCounters {
    async fn incr_existing(&self, keys: &[&str]) -> Result<Vec<Option<i64>>, StoreError> {
        let client = self.pool.next();
        // A script may only touch keys of one hash slot on a cluster; a single node takes
        // every key in one call. Each group keeps its keys' order.
        let mut groups: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
        for (i, key) in keys.iter().enumerate() {
            let slot = match client.is_clustered() {
                true => fred::util::redis_keyslot(key.as_bytes()),
                false => 0,
            };
            groups.entry(slot).or_default().push(i);
        }
        // Concurrent calls on one client are pipelined by fred: one round trip.
        let calls = groups.values().map(|places| {
            let keys: Vec<&str> = places.iter().map(|&i| keys[i]).collect();
            client.eval::<Vec<Option<i64>>, _, _, _>(INCR_EXISTING, keys, ())
        });
        let counted = futures::future::try_join_all(calls).await?;
        let mut values = vec![None; keys.len()];
        for (places, counted) in groups.values().zip(counted) {
            for (&i, value) in places.iter().zip(counted) {
                values[i] = value;
            }
        }
        Ok(values)
    }

    async fn init(&self, key: &str, floor: i64) -> Result<(), StoreError> {
        let _: Option<String> = self
            .pool
            .set(key, floor, None, Some(SetOptions::NX), false)
            .await?;
        Ok(())
    }
}
