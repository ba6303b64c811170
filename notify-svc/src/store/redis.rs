//! Presence in Redis: one hash per user, `{u:<id>}:devices`, field = device id, value =
//! `conn_id|expires_at_ms|platform|gateway_addr`. The key expires with its newest refresh;
//! each field carries its own expiry, checked on lookup. Group subscriptions are a sorted
//! set per group, `{g:<id>}:gateways`, member = gateway address, score = expiry (its key
//! expiry only ever extended, with `PEXPIRE NX` / `GT`: Redis 7 or later).

use std::time::Duration;

use async_trait::async_trait;
use fred::{prelude::*, types::ExpireOptions};
use imesh_kit::{error::StoreError, ids::unix_ms};

use crate::{
    domain::ports::{DeviceRoute, Presence},
    keys,
};

/// Deletes the field only while it still names the given connection.
const OFFLINE_IF_SAME_CONN: &str = "local v = redis.call('HGET', KEYS[1], ARGV[1]) \
     if v and string.sub(v, 1, string.len(ARGV[2]) + 1) == ARGV[2] .. '|' then \
       return redis.call('HDEL', KEYS[1], ARGV[1]) end return 0";

/// Each key's hash, as `HGETALL` answers it: field, value, field, value…
const EVERY_HASH: &str = "local hashes = {} \
     for i, key in ipairs(KEYS) do hashes[i] = redis.call('HGETALL', key) end \
     return hashes";

#[derive(Clone)]
pub struct RedisPresence {
    pool: Pool,
}

impl RedisPresence {
    pub fn new(pool: Pool) -> Self {
        Self { pool }
    }
}

fn parse(user_id: i64, device_id: String, value: &str, now: i64) -> Option<DeviceRoute> {
    let mut parts = value.splitn(4, '|');
    let conn_id = parts.next()?.parse().ok()?;
    let expires_at: i64 = parts.next()?.parse().ok()?;
    let platform = parts.next()?.to_owned();
    let gateway_addr = parts.next()?.to_owned();
    (expires_at > now).then_some(DeviceRoute {
        user_id,
        device_id,
        platform,
        gateway_addr,
        conn_id,
    })
}

#[async_trait]
impl Presence for RedisPresence {
    async fn online(&self, route: &DeviceRoute, ttl: Duration) -> Result<(), StoreError> {
        let expires_at = unix_ms() + ttl.as_millis() as i64;
        let value = format!(
            "{}|{expires_at}|{}|{}",
            route.conn_id, route.platform, route.gateway_addr
        );
        let key = keys::devices(route.user_id);
        let client = self.pool.next();
        // Every device uses the same TTL, so the newest refresh outlives every field.
        let (set, expire) = tokio::join!(
            client.hset::<(), _, _>(&key, (route.device_id.as_str(), value)),
            client.pexpire::<(), _>(&key, ttl.as_millis() as i64, None),
        );
        set?;
        expire?;
        Ok(())
    }

    async fn offline(&self, user_id: i64, device_id: &str, conn_id: u64) -> Result<(), StoreError> {
        let _: i64 = self
            .pool
            .eval(
                OFFLINE_IF_SAME_CONN,
                keys::devices(user_id),
                vec![device_id.to_owned(), conn_id.to_string()],
            )
            .await?;
        Ok(())
    }

    async fn lookup(&self, users: &[i64]) -> Result<Vec<DeviceRoute>, StoreError> {
        let client = self.pool.next();
        let keys: Vec<String> = users.iter().map(|u| keys::devices(*u)).collect();
        let all = imesh_kit::redis::per_script(client, &keys, |keys| {
            let keys: Vec<&str> = keys.into_iter().map(String::as_str).collect();
            client.eval::<Vec<Vec<String>>, _, _, _>(EVERY_HASH, keys, ())
        })
        .await?;
        let now = unix_ms();
        Ok(users
            .iter()
            .zip(all)
            .flat_map(|(user, fields)| {
                let mut fields = fields.into_iter();
                std::iter::from_fn(move || Some((fields.next()?, fields.next()?)))
                    .filter_map(move |(device, value)| parse(*user, device, &value, now))
            })
            .collect())
    }

    async fn subscribe(
        &self,
        gateway_addr: &str,
        groups: &[i64],
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let now = unix_ms();
        let expires_at = (now + ttl.as_millis() as i64) as f64;
        let client = self.pool.next();
        let calls = groups.iter().map(|group| {
            let key = keys::group_gateways(*group);
            let client = client.clone();
            async move {
                let _: () = client
                    .zadd(&key, None, None, false, false, (expires_at, gateway_addr))
                    .await?;
                let _: () = client
                    .zremrangebyscore(&key, f64::NEG_INFINITY, now as f64)
                    .await?;
                // The key lives as long as its longest subscription: give it an expiry
                // where it has none, and only ever extend it.
                let ms = ttl.as_millis() as i64;
                let _: () = client.pexpire(&key, ms, Some(ExpireOptions::NX)).await?;
                client
                    .pexpire::<(), _>(&key, ms, Some(ExpireOptions::GT))
                    .await
            }
        });
        futures::future::try_join_all(calls).await?;
        Ok(())
    }

    async fn gateways_of(&self, group: i64) -> Result<Vec<String>, StoreError> {
        let now = unix_ms() as f64;
        let gateways: Vec<String> = self
            .pool
            .zrangebyscore(keys::group_gateways(group), now, f64::INFINITY, false, None)
            .await?;
        Ok(gateways)
    }
}
