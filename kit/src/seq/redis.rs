//! Counters in Redis: one script call for a batch of keys (one per hash slot on a cluster).

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
        crate::redis::per_script(client, keys, |keys| {
            let keys: Vec<&str> = keys.into_iter().copied().collect();
            client.eval::<Vec<Option<i64>>, _, _, _>(INCR_EXISTING, keys, ())
        })
        .await
    }

    /// One `SET … NX` per key, all sent at once: one round trip of waiting.
    async fn init(&self, floors: &[(&str, i64)]) -> Result<(), StoreError> {
        let sets = floors.iter().map(|(key, floor)| {
            self.pool
                .set::<Option<String>, _, _>(*key, *floor, None, Some(SetOptions::NX), false)
        });
        futures::future::try_join_all(sets).await?;
        Ok(())
    }
}
