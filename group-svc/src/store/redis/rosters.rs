//! Rosters in Redis: per group 16 sorted sets (user → map id), a version marker and a claim,
//! all under the group's hash tag so every script runs on one Cluster slot. Each script
//! takes the keys as `[marker, claim, bucket 0, …, bucket 15]`.

use std::time::Duration;

use async_trait::async_trait;
use fred::prelude::*;
use imesh_kit::error::StoreError;

use crate::{
    domain::ports::{BUCKETS, CLAIM_TTL, Entry, Rosters, TTL, bucket},
    keys,
};

/// Entries written per fill script, so no script blocks Redis for long.
const FILL_CHUNK: usize = 2_000;

/// Buckets outlive their marker by more than a fill can take, so a marker never points at
/// an expired bucket.
const BUCKET_TTL: Duration = Duration::from_secs(TTL.as_secs() + 2 * CLAIM_TTL.as_secs());

/// KEYS: marker, claim. ARGV: claim, claim TTL (ms). A published roster needs no fill.
const CLAIM: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0";

/// ARGV: claim, first chunk (1/0), then `bucket, map_id, user` per entry.
const FILL_CHUNK_SCRIPT: &str = r"
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
if ARGV[2] == '1' then for i = 3, #KEYS do redis.call('DEL', KEYS[i]) end end
for i = 4, #ARGV, 3 do redis.call('ZADD', KEYS[3 + tonumber(ARGV[i])], ARGV[i + 1], ARGV[i + 2]) end
for i = 3, #KEYS do redis.call('PEXPIRE', KEYS[i], ARGV[3]) end
return 1";

/// ARGV: claim, version, marker TTL (ms).
const PUBLISH: &str = r"
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[2])
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1";

/// ARGV: version, bucket TTL (ms), then `bucket, map_id or '-' (gone), user` per entry.
const APPLY: &str = r"
redis.call('DEL', KEYS[2])
local at = tonumber(redis.call('GET', KEYS[1]))
if not at then return 0 end
local version = tonumber(ARGV[1])
if at == version then return 1 end
if at ~= version - 1 then redis.call('DEL', KEYS[1]) return 0 end
for i = 3, #ARGV, 3 do
  local key = KEYS[3 + tonumber(ARGV[i])]
  if ARGV[i + 1] == '-' then redis.call('ZREM', key, ARGV[i + 2])
  else
    redis.call('ZADD', key, ARGV[i + 1], ARGV[i + 2])
    if redis.call('PTTL', key) < 0 then redis.call('PEXPIRE', key, ARGV[2]) end
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
return 1";

/// ARGV: from, limit. Nil without a marker, else `+` then `user, map_id` pairs, at least
/// `limit` of them while any are left. Map ids are dense, so the window `[from, from +
/// limit)` usually holds the whole page; it doubles past the gaps left members leave.
const PAGE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local out, found = {'+'}, 0
local limit = tonumber(ARGV[2])
local low, span = tonumber(ARGV[1]), limit
while true do
  local high = low + span
  for i = 3, #KEYS do
    local rows = redis.call('ZRANGE', KEYS[i], low, '(' .. high, 'BYSCORE', 'WITHSCORES')
    for j = 1, #rows do out[#out + 1] = rows[j] end
    found = found + #rows / 2
  end
  if found >= limit then return out end
  local more = false
  for i = 3, #KEYS do
    if #redis.call('ZRANGE', KEYS[i], high, '+inf', 'BYSCORE', 'LIMIT', 0, 1) > 0 then more = true break end
  end
  if not more then return out end
  low, span = high, span * 2
end";

/// KEYS: marker, the user's bucket. -2 without a marker, -1 for no member, else the map id.
const MEMBER: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return -2 end
local map_id = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not map_id then return -1 end
return tonumber(map_id)";

#[derive(Clone)]
pub struct RedisRosters {
    pool: Pool,
}

impl RedisRosters {
    pub fn new(pool: Pool) -> Self {
        Self { pool }
    }
}

fn all_keys(group_id: i64) -> Vec<String> {
    let mut keys = vec![keys::roster(group_id), keys::roster_claim(group_id)];
    keys.extend((0..BUCKETS as usize).map(|b| keys::roster_bucket(group_id, b)));
    keys
}

fn millis(d: Duration) -> String {
    d.as_millis().to_string()
}

/// Appends one `bucket, score, user` triple to a script's ARGV (score `-`: remove).
fn push_entry(args: &mut Vec<String>, user: i64, score: String) {
    args.extend([bucket(user).to_string(), score, user.to_string()]);
}

#[async_trait]
impl Rosters for RedisRosters {
    async fn page(
        &self,
        group_id: i64,
        from: u32,
        limit: u32,
    ) -> Result<Option<Vec<Entry>>, StoreError> {
        let args = vec![from.to_string(), limit.to_string()];
        let raw: Vec<String> = self.pool.eval(PAGE, all_keys(group_id), args).await?;
        if raw.is_empty() {
            return Ok(None);
        }
        let mut entries = raw[1..]
            .chunks_exact(2)
            .map(|pair| {
                Ok(Entry {
                    user: pair[0].parse()?,
                    map_id: pair[1].parse()?,
                })
            })
            .collect::<Result<Vec<_>, std::num::ParseIntError>>()
            .map_err(|e| {
                StoreError::Unavailable(anyhow::anyhow!("a malformed roster entry: {e}"))
            })?;
        entries.sort_unstable();
        entries.truncate(limit as usize);
        Ok(Some(entries))
    }

    async fn member(&self, group_id: i64, user: i64) -> Result<Option<Option<u32>>, StoreError> {
        let keys = vec![
            keys::roster(group_id),
            keys::roster_bucket(group_id, bucket(user)),
        ];
        let found: i64 = self.pool.eval(MEMBER, keys, user.to_string()).await?;
        Ok(match found {
            -2 => None,
            -1 => Some(None),
            map_id => Some(Some(map_id as u32)),
        })
    }

    async fn claim(&self, group_id: i64) -> Result<Option<u64>, StoreError> {
        let claim = rand::random::<u64>();
        let keys = vec![keys::roster(group_id), keys::roster_claim(group_id)];
        let args = vec![claim.to_string(), millis(CLAIM_TTL)];
        let claimed: i64 = self.pool.eval(CLAIM, keys, args).await?;
        Ok((claimed == 1).then_some(claim))
    }

    async fn fill(
        &self,
        group_id: i64,
        claim: u64,
        version: i64,
        members: &[Entry],
    ) -> Result<bool, StoreError> {
        let keys = all_keys(group_id);
        let claim = claim.to_string();
        let mut chunks: Vec<&[Entry]> = members.chunks(FILL_CHUNK).collect();
        if chunks.is_empty() {
            // An empty roster still clears the buckets.
            chunks.push(&[]);
        }
        for (i, chunk) in chunks.into_iter().enumerate() {
            let first = if i == 0 { "1" } else { "0" };
            let mut args = vec![claim.clone(), first.to_owned(), millis(BUCKET_TTL)];
            for e in chunk {
                push_entry(&mut args, e.user, e.map_id.to_string());
            }
            let held: i64 = self
                .pool
                .eval(FILL_CHUNK_SCRIPT, keys.clone(), args)
                .await?;
            if held == 0 {
                return Ok(false);
            }
        }
        let args = vec![claim, version.to_string(), millis(TTL)];
        let published: i64 = self.pool.eval(PUBLISH, keys, args).await?;
        Ok(published == 1)
    }

    async fn apply(
        &self,
        group_id: i64,
        version: i64,
        current: &[Entry],
        gone: &[i64],
    ) -> Result<(), StoreError> {
        let mut args = vec![version.to_string(), millis(BUCKET_TTL)];
        for e in current {
            push_entry(&mut args, e.user, e.map_id.to_string());
        }
        for user in gone {
            push_entry(&mut args, *user, "-".into());
        }
        let _: i64 = self.pool.eval(APPLY, all_keys(group_id), args).await?;
        Ok(())
    }

    async fn discard(&self, group_id: i64) -> Result<(), StoreError> {
        let keys = vec![keys::roster(group_id), keys::roster_claim(group_id)];
        let _: i64 = self.pool.del(keys).await?;
        Ok(())
    }
}
