//! The Redis [`GroupCache`]: per group an info string, a member hash and a member-id set,
//! all under the group's hash tag, each with a TTL. Invalidation deletes the three keys and
//! publishes the group id so every replica drops its local entries ([`listen`]).

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use fred::{prelude::*, types::ExpireOptions};
use imesh_kit::error::StoreError;

use crate::{
    domain::{
        ACTIVE_KEPT, GateGroup, GateMember, GroupCache, GroupStatus, GroupType, MemberStatus, Role,
    },
    keys,
};

#[derive(Clone)]
pub struct RedisGroupCache {
    pool: Pool,
    ttl: Duration,
}

impl RedisGroupCache {
    pub fn new(pool: Pool, ttl: Duration) -> Self {
        Self { pool, ttl }
    }

    fn expiry(&self) -> Option<Expiration> {
        Some(Expiration::PX(self.ttl.as_millis() as i64))
    }
}

#[async_trait]
impl GroupCache for RedisGroupCache {
    async fn group(&self, group_id: i64) -> Result<Option<GateGroup>, StoreError> {
        let raw: Option<String> = self.pool.get(keys::info(group_id)).await?;
        Ok(raw.as_deref().and_then(decode_group))
    }

    async fn put_group(&self, group_id: i64, g: GateGroup) -> Result<(), StoreError> {
        let code = format!(
            "{}|{}|{}|{}|{}|{}",
            g.kind as u8,
            g.status as u8,
            u8::from(g.mute_all),
            g.version,
            g.member_count,
            g.next_map_id
        );
        let _: () = self
            .pool
            .set(keys::info(group_id), code, self.expiry(), None, false)
            .await?;
        Ok(())
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
        user: i64,
        member: Option<GateMember>,
    ) -> Result<(), StoreError> {
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
        let key = keys::members(group_id);
        let client = self.pool.next();
        let (set, expire) = tokio::join!(
            client.hset::<i64, _, _>(&key, (user.to_string(), code)),
            client.pexpire::<i64, _>(&key, self.ttl.as_millis() as i64, Some(ExpireOptions::NX)),
        );
        set?;
        expire?;
        Ok(())
    }

    async fn member_ids(&self, group_id: i64) -> Result<Option<Vec<i64>>, StoreError> {
        // The set always holds the marker 0, so an empty group is still a hit.
        let ids: Vec<i64> = self.pool.smembers(keys::member_ids(group_id)).await?;
        Ok((!ids.is_empty()).then(|| ids.into_iter().filter(|id| *id != 0).collect()))
    }

    async fn put_member_ids(&self, group_id: i64, ids: &[i64]) -> Result<(), StoreError> {
        let key = keys::member_ids(group_id);
        let mut members: Vec<i64> = ids.to_vec();
        members.push(0);
        let client = self.pool.next();
        let (_, added, expire) = tokio::join!(
            client.del::<i64, _>(&key),
            client.sadd::<i64, _, _>(&key, members),
            client.pexpire::<i64, _>(&key, self.ttl.as_millis() as i64, None),
        );
        added?;
        expire?;
        Ok(())
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
            keys::info(group_id),
            keys::members(group_id),
            keys::member_ids(group_id),
        ];
        let _: i64 = client.del(keys).await?;
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
