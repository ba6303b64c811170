//! The Redis [`Attempts`]: a counter is an INCR'd key expiring a window after its first
//! hit; a hold is a key expiring when the hold ends. Every command names one key, so the
//! adapter works on Redis Cluster.

use std::time::Duration;

use async_trait::async_trait;
use fred::prelude::*;
use imesh_kit::error::StoreError;

use crate::domain::ports::{Attempts, Hit};

/// INCR, an expiry on the first hit, and the time left: `{count, pttl}`.
const HIT: &str = "local n = redis.call('INCR', KEYS[1]) \
    local t = redis.call('PTTL', KEYS[1]) \
    if t < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) t = tonumber(ARGV[1]) end \
    return {n, t}";

#[derive(Clone)]
pub struct RedisAttempts {
    pool: Pool,
}

impl RedisAttempts {
    pub fn new(pool: Pool) -> Self {
        Self { pool }
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1)
}

#[async_trait]
impl Attempts for RedisAttempts {
    async fn hit(&self, key: &str, window: Duration) -> Result<Hit, StoreError> {
        let (count, left): (i64, i64) =
            self.pool.eval(HIT, key, millis(window).to_string()).await?;
        Ok(Hit {
            count: count.max(0) as u64,
            resets_in: Duration::from_millis(left.max(0) as u64),
        })
    }

    async fn hold(&self, key: &str, wait: Duration) -> Result<(), StoreError> {
        let expiry = Some(Expiration::PX(millis(wait)));
        let _: () = self.pool.set(key, 1, expiry, None, false).await?;
        Ok(())
    }

    async fn held(&self, keys: &[String]) -> Result<Option<Duration>, StoreError> {
        let client = self.pool.next();
        // One PTTL per key (pipelined by fred): each may sit in its own cluster slot.
        let left: Vec<i64> =
            futures::future::try_join_all(keys.iter().map(|key| client.pttl::<i64, _>(key)))
                .await?;
        Ok(left
            .into_iter()
            .filter(|&ms| ms > 0)
            .max()
            .map(|ms| Duration::from_millis(ms as u64)))
    }

    async fn forget(&self, key: &str) -> Result<(), StoreError> {
        let _: i64 = self.pool.del(key).await?;
        Ok(())
    }
}
