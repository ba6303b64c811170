//! The Redis [`GroupCache`]: per group an info string, a member hash and a member-id set,
//! all under the group's hash tag, each with a TTL, and the generation counter that
//! guards their fills. Each put is a script that writes only while the generation is the
//! one the filler read. Invalidation advances the generation, deletes the three keys and
//! publishes the group id so every replica drops its local entries ([`listen`]).

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use fred::prelude::*;
use imesh_kit::error::StoreError;

use crate::{
    domain::{
        ACTIVE_KEPT, GateGroup, GateMember, GroupCache, GroupStatus, GroupType, MemberStatus, Role,
    },
    keys,
};

/// KEYS: generation, info. ARGV: generation, info, TTL (ms).
const PUT_INFO: &str = r"
if (redis.call('GET', KEYS[1]) or '0') ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 1";

/// KEYS: generation, member hash. ARGV: generation, user, member, TTL (ms).
const PUT_MEMBER: &str = r"
if (redis.call('GET', KEYS[1]) or '0') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
if redis.call('PTTL', KEYS[2]) < 0 then redis.call('PEXPIRE', KEYS[2], ARGV[4]) end
return 1";

/// KEYS: generation, id set. ARGV: generation, TTL (ms), then the ids.
const PUT_IDS: &str = r"
if (redis.call('GET', KEYS[1]) or '0') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[2])
for i = 3, #ARGV, 1000 do
  redis.call('SADD', KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1";

/// KEYS: generation, info, member hash, id set. ARGV: the generation's TTL (ms).
const INVALIDATE: &str = r"
redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
return 1";

/// A generation outlives any fill by far: one that expired mid-fill would read as 0 again
/// and let a fill that began at 0 through.
const GENERATION_TTL: Duration = Duration::from_secs(600);

#[derive(Clone)]
pub struct RedisGroupCache {
    pool: Pool,
    ttl: Duration,
}

impl RedisGroupCache {
    pub fn new(pool: Pool, ttl: Duration) -> Self {
        Self { pool, ttl }
    }

    fn ttl_ms(&self) -> String {
        self.ttl.as_millis().to_string()
    }

    /// Runs a put script on `[generation, key]`; whether it stored.
    async fn put(
        &self,
        script: &str,
        group_id: i64,
        key: String,
        args: Vec<String>,
    ) -> Result<bool, StoreError> {
        let keys = vec![keys::generation(group_id), key];
        let stored: i64 = self.pool.eval(script, keys, args).await?;
        Ok(stored == 1)
    }
}

#[async_trait]
impl GroupCache for RedisGroupCache {
    async fn generation(&self, group_id: i64) -> Result<u64, StoreError> {
        let generation: Option<u64> = self.pool.get(keys::generation(group_id)).await?;
        Ok(generation.unwrap_or(0))
    }

    async fn group(&self, group_id: i64) -> Result<Option<GateGroup>, StoreError> {
        let raw: Option<String> = self.pool.get(keys::info(group_id)).await?;
        Ok(raw.as_deref().and_then(decode_group))
    }

    async fn put_group(
        &self,
        group_id: i64,
        generation: u64,
        g: GateGroup,
    ) -> Result<bool, StoreError> {
        let code = format!(
            "{}|{}|{}|{}|{}|{}",
            g.kind as u8,
            g.status as u8,
            u8::from(g.mute_all),
            g.version,
            g.member_count,
            g.next_map_id
        );
        let args = vec![generation.to_string(), code, self.ttl_ms()];
        self.put(PUT_INFO, group_id, keys::info(group_id), args)
            .await
    }

    async fn member(
        &self,
        group_id: i64,
        user: i64,
    ) -> Result<Option<Option<GateMember>>, StoreError> {
        let raw: Option<String> = self.pool.hget(keys::members(group_id), user).await?;
        Ok(raw.map(|code| decode_member(&code)))
    }

    async fn put_member(
        &self,
        group_id: i64,
        generation: u64,
        user: i64,
        member: Option<GateMember>,
    ) -> Result<bool, StoreError> {
        let code = member.map_or("-".to_owned(), |m| {
            format!(
                "{}|{}|{}|{}|{}|{}",
                m.role as u8,
                m.map_id,
                m.mute_until_ms,
                m.join_seq,
                m.status as u8,
                m.extra_permissions
            )
        });
        let args = vec![
            generation.to_string(),
            user.to_string(),
            code,
            self.ttl_ms(),
        ];
        self.put(PUT_MEMBER, group_id, keys::members(group_id), args)
            .await
    }

    async fn member_ids(&self, group_id: i64) -> Result<Option<Vec<i64>>, StoreError> {
        // The set always holds the marker 0, so an empty group is still a hit.
        let ids: Vec<i64> = self.pool.smembers(keys::member_ids(group_id)).await?;
        Ok((!ids.is_empty()).then(|| ids.into_iter().filter(|id| *id != 0).collect()))
    }

    async fn put_member_ids(
        &self,
        group_id: i64,
        generation: u64,
        ids: &[i64],
    ) -> Result<bool, StoreError> {
        let mut args = vec![generation.to_string(), self.ttl_ms(), "0".to_owned()];
        args.extend(ids.iter().map(i64::to_string));
        self.put(PUT_IDS, group_id, keys::member_ids(group_id), args)
            .await
    }

    async fn touch(&self, group_id: i64, user: i64, at_ms: i64) -> Result<(), StoreError> {
        let key = keys::active(group_id);
        let client = self.pool.next();
        let keep = ACTIVE_KEPT as i64;
        let (added, trimmed) = tokio::join!(
            client.zadd::<i64, _, _>(&key, None, None, false, false, (at_ms as f64, user)),
            client.zremrangebyrank::<i64, _>(&key, 0, -(keep + 1)),
        );
        added?;
        trimmed?;
        Ok(())
    }

    async fn active(&self, group_id: i64, limit: u32) -> Result<Vec<i64>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let key = keys::active(group_id);
        let ids: Vec<i64> = self
            .pool
            .zrevrange(key, 0, i64::from(limit) - 1, false)
            .await?;
        Ok(ids)
    }

    async fn invalidate(&self, group_id: i64) -> Result<(), StoreError> {
        let client = self.pool.next();
        let keys = vec![
            keys::generation(group_id),
            keys::info(group_id),
            keys::members(group_id),
            keys::member_ids(group_id),
        ];
        let ttl = GENERATION_TTL.max(self.ttl).as_millis().to_string();
        let _: i64 = client.eval(INVALIDATE, keys, ttl).await?;
        let _: i64 = client.publish(keys::INVALIDATIONS, group_id).await?;
        Ok(())
    }
}

/// Subscribes to invalidations and calls `forget` with each stale group id, until the
/// process ends (fred resubscribes after reconnecting).
pub async fn listen(
    url: &str,
    forget: Arc<dyn Fn(i64) + Send + Sync>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let config = Config::from_url(url)?;
    let subscriber = Builder::from_config(config)
        .set_policy(ReconnectPolicy::new_exponential(0, 100, 5_000, 2))
        .build_subscriber_client()?;
    subscriber.init().await?;
    subscriber.subscribe(keys::INVALIDATIONS).await?;
    let _resubscribe = subscriber.manage_subscriptions();
    let mut messages = subscriber.message_rx();
    Ok(tokio::spawn(async move {
        let _keep = subscriber;
        while let Ok(message) = messages.recv().await {
            if let Ok(group_id) = message.value.convert::<i64>() {
                forget(group_id);
            }
        }
    }))
}

fn decode_group(code: &str) -> Option<GateGroup> {
    let mut f = code.split('|');
    let kind = match f.next()? {
        "1" => GroupType::Super,
        _ => GroupType::Normal,
    };
    let status = match f.next()? {
        "1" => GroupStatus::Dismissed,
        "2" => GroupStatus::Banned,
        _ => GroupStatus::Normal,
    };
    Some(GateGroup {
        kind,
        status,
        mute_all: f.next()? == "1",
        version: f.next()?.parse().ok()?,
        member_count: f.next()?.parse().ok()?,
        next_map_id: f.next()?.parse().ok()?,
    })
}

fn decode_member(code: &str) -> Option<GateMember> {
    let mut f = code.split('|');
    let role = match f.next()? {
        "3" => Role::Owner,
        "2" => Role::Admin,
        "1" => Role::Member,
        _ => return None,
    };
    Some(GateMember {
        role,
        map_id: f.next()?.parse().ok()?,
        mute_until_ms: f.next()?.parse().ok()?,
        join_seq: f.next()?.parse().ok()?,
        status: match f.next()? {
            "1" => MemberStatus::Quit,
            "2" => MemberStatus::Kicked,
            _ => MemberStatus::Normal,
        },
        extra_permissions: f.next()?.parse().ok()?,
    })
}
