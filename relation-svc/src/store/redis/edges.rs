//! The Redis [`EdgeCache`]: one hash per owner (seed 001: `im:friend:{user}` → peer →
//! `status|blocked`). Lookups of many pairs go out as one script call of HMGETs, one per
//! owner; a row set is written by one script (DEL, HSETs, PEXPIRE), so readers see all or
//! nothing, and only while the owner's generation counter is the one its filler read.

use async_trait::async_trait;
use fred::prelude::*;
use imesh_kit::error::StoreError;

use crate::domain::check::{Account, Cached, Edge, Known};
use crate::{domain::EdgeCache, keys};

/// KEYS: hash, generation. ARGV: TTL (ms), generation, then `field, value` pairs.
const REPLACE_HASH: &str = r"
if (redis.call('GET', KEYS[2]) or '0') ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[1])
for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1";

/// KEYS: hash, generation. ARGV: the generation's TTL (ms).
const INVALIDATE: &str = r"
redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[1])
return 1";

/// KEYS: hashes. ARGV: for each hash in turn, how many fields, then the fields. Each
/// hash's HMGET answer.
const FIELDS_OF_EACH: &str = r"
local out, a = {}, 1
for i, key in ipairs(KEYS) do
  local n = tonumber(ARGV[a])
  out[i] = redis.call('HMGET', key, unpack(ARGV, a + 1, a + n))
  a = a + n + 1
end
return out";

/// A generation outlives any fill by far: one that expired mid-fill would read as 0 again
/// and let a fill that began at 0 through.
const GENERATION_TTL_MS: u64 = 600_000;

#[derive(Clone)]
pub struct RedisEdgeCache {
    pool: Pool,
    ttl_ms: u64,
}

impl RedisEdgeCache {
    pub fn new(pool: Pool, ttl: std::time::Duration) -> Self {
        Self {
            pool,
            ttl_ms: ttl.as_millis() as u64,
        }
    }
}

#[async_trait]
impl EdgeCache for RedisEdgeCache {
    async fn get(&self, pairs: &[(i64, i64)]) -> Result<Vec<Option<Cached>>, StoreError> {
        // Per owner, its account field and every peer asked of it: one HMGET each, in one
        // script call.
        let mut owners: Vec<(i64, Vec<usize>)> = Vec::new();
        for (i, &(owner, _)) in pairs.iter().enumerate() {
            match owners.iter_mut().find(|(o, _)| *o == owner) {
                Some((_, asked)) => asked.push(i),
                None => owners.push((owner, vec![i])),
            }
        }
        let asked: Vec<Fields> = owners
            .iter()
            .map(|(owner, asked)| Fields {
                hash: keys::friends(*owner),
                fields: std::iter::once(keys::ACCOUNT_FIELD.to_owned())
                    .chain(asked.iter().map(|&i| pairs[i].1.to_string()))
                    .collect(),
            })
            .collect();
        let client = self.pool.next();
        let replies = imesh_kit::redis::per_script(client, &asked, |asked| {
            let hashes: Vec<&str> = asked.iter().map(|a| a.hash.as_str()).collect();
            let mut args: Vec<String> = Vec::new();
            for a in &asked {
                args.push(a.fields.len().to_string());
                args.extend(a.fields.iter().cloned());
            }
            client.eval::<Vec<Vec<Option<String>>>, _, _, _>(FIELDS_OF_EACH, hashes, args)
        })
        .await?;
        let mut out = vec![None; pairs.len()];
        for ((_, asked), fields) in owners.iter().zip(replies) {
            for (k, &i) in asked.iter().enumerate() {
                out[i] = decode(fields.first(), fields.get(k + 1));
            }
        }
        Ok(out)
    }

    async fn generations(&self, owners: &[i64]) -> Result<Vec<u64>, StoreError> {
        let client = self.pool.next();
        let calls = owners
            .iter()
            .map(|owner| client.get::<Option<u64>, _>(keys::friends_generation(*owner)));
        let found = futures::future::try_join_all(calls).await?;
        Ok(found.into_iter().map(Option::unwrap_or_default).collect())
    }

    async fn put(&self, owners: &[(i64, u64, Known)]) -> Result<(), StoreError> {
        let client = self.pool.next();
        let calls = owners.iter().map(|(owner, generation, known)| {
            let mut args = Vec::with_capacity(4 + 2 * known.edges.len());
            args.push(self.ttl_ms.to_string());
            args.push(generation.to_string());
            args.push(keys::ACCOUNT_FIELD.to_owned());
            args.push(account_code(known.account).to_owned());
            for (peer, edge) in &known.edges {
                args.push(peer.to_string());
                args.push(edge_code(*edge));
            }
            client.eval::<i64, _, _, _>(REPLACE_HASH, owner_keys(*owner), args)
        });
        futures::future::try_join_all(calls).await?;
        Ok(())
    }

    async fn invalidate(&self, owners: &[i64]) -> Result<(), StoreError> {
        let client = self.pool.next();
        let ttl = GENERATION_TTL_MS.max(self.ttl_ms).to_string();
        let calls = owners
            .iter()
            .map(|owner| client.eval::<i64, _, _, _>(INVALIDATE, owner_keys(*owner), ttl.clone()));
        futures::future::try_join_all(calls).await?;
        Ok(())
    }
}

/// The fields asked of one hash; placed by the hash's slot.
struct Fields {
    hash: String,
    fields: Vec<String>,
}

impl AsRef<[u8]> for Fields {
    fn as_ref(&self) -> &[u8] {
        self.hash.as_bytes()
    }
}

/// An owner's hash and generation, the keys of both scripts.
fn owner_keys(owner: i64) -> Vec<String> {
    vec![keys::friends(owner), keys::friends_generation(owner)]
}

fn account_code(account: Account) -> &'static str {
    match account {
        Account::Active => "a",
        Account::Disabled => "d",
        Account::Missing => "m",
    }
}

/// `status|blocked`: status 1 friend, 0 not; blocked 1 or 0.
fn edge_code(edge: Edge) -> String {
    format!("{}|{}", u8::from(edge.friend), u8::from(edge.blocked))
}

/// An answer from the owner's account field and the peer's field; `None` when the owner's
/// hash is not loaded.
fn decode(account: Option<&Option<String>>, edge: Option<&Option<String>>) -> Option<Cached> {
    let account = match account?.as_deref()? {
        "a" => Account::Active,
        "d" => Account::Disabled,
        _ => Account::Missing,
    };
    let edge = edge.cloned().flatten().map(|code| Edge {
        friend: code.starts_with('1'),
        blocked: code.ends_with('1'),
    });
    Some(Cached { account, edge })
}
