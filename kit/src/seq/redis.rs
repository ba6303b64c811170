//! Counters in Redis: one pipelined round trip for a batch of keys.

use async_trait::async_trait;
use fred::prelude::*;

use super::Counters;
use crate::error::StoreError;

/// `INCR` only when the key exists; nil otherwise (the counter was lost).
const INCR_EXISTING: &str = "if redis.call('EXISTS', KEYS[1]) == 1 then return redis.call('INCR', KEYS[1]) end return false";

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
        // Concurrent commands on one client are pipelined by fred: one round trip per batch.
        let client = self.pool.next();
        let calls = keys
            .iter()
            .map(|key| client.eval::<Option<i64>, _, _, _>(INCR_EXISTING, *key, ()));
        Ok(futures::future::try_join_all(calls).await?)
    }

    async fn init(&self, key: &str, floor: i64) -> Result<(), StoreError> {
        let _: Option<String> = self
            .pool
            .set(key, floor, None, Some(SetOptions::NX), false)
            .await?;
        Ok(())
    }
}
