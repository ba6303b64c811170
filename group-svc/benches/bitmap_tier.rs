//! Seed 000's membership bitmap tier for super groups, measured against the roster group-svc
//! keeps (16 sorted sets by `user % 16`, ordered by map id). The tier: each member's dense
//! `map_id` by user id (16 hashes by `user % 16`, since user ids are sparse snowflakes a
//! bitmap cannot be indexed by) and seed 002's quit bitmap over map ids; a member is mapped
//! and not quit. Both answer a member check in one script call. Pages by map id need one
//! more index beside the tier (map id → user), which the roster holds already; its size is
//! printed with the tier's. 100,000 members, 1,000 of them quit. Redis runs when
//! `IMESH_TEST_REDIS_URL` names one (sizes printed once by `MEMORY USAGE`); in process, the
//! roster against a hash map and a roaring bitmap held the same way (one lock, per group).

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::HashMap;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fred::prelude::*;
use group_svc::{
    domain::ports::{Entry, Rosters},
    store::{memory::MemoryRosters, redis::RedisRosters},
};
use imesh_kit::testing;
use roaring::RoaringBitmap;

const MEMBERS: u32 = 100_000;
const QUIT_EVERY: u32 = 100;
/// 16-digit user ids, sparse like snowflakes.
const FIRST_USER: i64 = 3_875_000_000_000_000;

fn user(map_id: u32) -> i64 {
    FIRST_USER + map_id as i64 * 7_919
}

fn quit(map_id: u32) -> bool {
    map_id.is_multiple_of(QUIT_EVERY)
}

const CHECK: &str = r#"
local m = redis.call('HGET', KEYS[1], ARGV[1])
if not m then return -1 end
if redis.call('GETBIT', KEYS[2], m) == 1 then return -1 end
return tonumber(m)
"#;

fn ids_key(group: i64, user: i64) -> String {
    format!("bt:{{{group}}}:ids:{}", user.rem_euclid(16))
}

fn quit_key(group: i64) -> String {
    format!("bt:{{{group}}}:quit")
}

/// What pages need besides: the user at each map id (16 hashes by `map_id % 16`).
fn users_key(group: i64, map_id: u32) -> String {
    format!("bt:{{{group}}}:users:{}", map_id % 16)
}

/// The in-process tier, held as the roster is: under one lock, per group.
#[derive(Default)]
struct Tiers(parking_lot::Mutex<HashMap<i64, Tier>>);

struct Tier {
    by_user: HashMap<i64, u32>,
    quits: RoaringBitmap,
}

impl Tiers {
    async fn member(&self, group: i64, user: i64) -> Option<Option<u32>> {
        let tiers = self.0.lock();
        let tier = tiers.get(&group)?;
        Some(
            tier.by_user
                .get(&user)
                .copied()
                .filter(|m| !tier.quits.contains(*m)),
        )
    }
}

/// The bitmap tier of `group` in Redis: every member ever mapped, and the quit bitmap.
async fn bitmap_tier(pool: &Pool, group: i64) {
    let mut buckets: HashMap<String, Vec<(String, String)>> = HashMap::new();
    for map_id in 0..MEMBERS {
        let u = user(map_id);
        buckets
            .entry(ids_key(group, u))
            .or_default()
            .push((u.to_string(), map_id.to_string()));
    }
    for map_id in 0..MEMBERS {
        let u = user(map_id).to_string();
        buckets
            .entry(users_key(group, map_id))
            .or_default()
            .push((map_id.to_string(), u));
    }
    for (key, fields) in buckets {
        for chunk in fields.chunks(1_000) {
            let _: () = pool.hset(&key, chunk.to_vec()).await.unwrap();
        }
    }
    let quits: Vec<String> = (0..MEMBERS)
        .filter(|m| quit(*m))
        .map(|m| m.to_string())
        .collect();
    let set = "for _, m in ipairs(ARGV) do redis.call('SETBIT', KEYS[1], m, 1) end";
    let _: () = pool.eval(set, vec![quit_key(group)], quits).await.unwrap();
}

/// Current members in map id order, as a roster holds them.
fn members() -> Vec<Entry> {
    (0..MEMBERS)
        .filter(|m| !quit(*m))
        .map(|map_id| Entry {
            map_id,
            user: user(map_id),
        })
        .collect()
}

async fn fill(rosters: &dyn Rosters, group: i64) {
    rosters.discard(group).await.unwrap();
    let claim = rosters.claim(group).await.unwrap().unwrap();
    assert!(rosters.fill(group, claim, 1, &members()).await.unwrap());
}

async fn memory(pool: &Pool, keys: Vec<String>) -> i64 {
    let mut total = 0;
    for key in keys {
        let usage = "return redis.call('MEMORY', 'USAGE', KEYS[1], 'SAMPLES', '0')";
        let used: Option<i64> = pool
            .eval(usage, vec![key], Vec::<String>::new())
            .await
            .unwrap();
        total += used.unwrap_or(0);
    }
    total
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let member = user(77_777);
    let quitter = user(77_700);
    let mut g = c.benchmark_group("bitmap_tier");
    g.throughput(Throughput::Elements(1));

    let in_process = MemoryRosters::default();
    rt.block_on(fill(&in_process, 1));
    let tier = Tier {
        by_user: (0..MEMBERS).map(|m| (user(m), m)).collect(),
        quits: (0..MEMBERS).filter(|m| quit(*m)).collect(),
    };
    println!(
        "in process: quit bitmap {} bytes serialized",
        tier.quits.serialized_size()
    );
    let tiers = Tiers::default();
    tiers.0.lock().insert(1, tier);
    let check = |u: i64| rt.block_on(tiers.member(1, u)).unwrap();
    assert_eq!((check(member), check(quitter)), (Some(77_777), None));
    g.bench_function("member check, in-process roster", |b| {
        b.iter(|| rt.block_on(in_process.member(1, member)).unwrap().unwrap())
    });
    g.bench_function("member check, in-process bitmap tier", |b| {
        b.iter(|| check(member))
    });
    g.bench_function("quitter check, in-process roster", |b| {
        b.iter(|| rt.block_on(in_process.member(1, quitter)).unwrap().unwrap())
    });
    g.bench_function("quitter check, in-process bitmap tier", |b| {
        b.iter(|| check(quitter))
    });

    let Some((_, pool)) = rt.block_on(testing::redis_pools()).into_iter().next() else {
        return;
    };
    let group = testing::random_id();
    let redis = RedisRosters::new(pool.clone());
    rt.block_on(fill(&redis, group));
    rt.block_on(bitmap_tier(&pool, group));
    let roster_keys = (0..16)
        .map(|b| group_svc::keys::roster_bucket(group, b))
        .collect();
    let mut tier_keys: Vec<String> = (0..16).map(|b| ids_key(group, b)).collect();
    tier_keys.push(quit_key(group));
    let page_keys = (0..16).map(|m| users_key(group, m)).collect();
    let (roster_bytes, tier_bytes, page_bytes) = rt.block_on(async {
        (
            memory(&pool, roster_keys).await,
            memory(&pool, tier_keys).await,
            memory(&pool, page_keys).await,
        )
    });
    let each = |bytes: i64| bytes / MEMBERS as i64;
    println!(
        "Redis, 100,000 members: roster {roster_bytes} bytes ({} a member); bitmap tier {tier_bytes} bytes ({} a member), with the map id → user index pages need {} bytes ({} a member)",
        each(roster_bytes),
        each(tier_bytes),
        tier_bytes + page_bytes,
        each(tier_bytes + page_bytes),
    );
    let tier_check = |u: i64| {
        let keys = vec![ids_key(group, u), quit_key(group)];
        rt.block_on(pool.eval::<i64, _, _, _>(CHECK, keys, u.to_string()))
            .unwrap()
    };
    assert_eq!((tier_check(member), tier_check(quitter)), (77_777, -1));
    g.bench_function("member check, Redis roster", |b| {
        b.iter(|| rt.block_on(redis.member(group, member)).unwrap().unwrap())
    });
    g.bench_function("member check, Redis bitmap tier", |b| {
        b.iter(|| tier_check(member))
    });
    g.bench_function("quitter check, Redis roster", |b| {
        b.iter(|| rt.block_on(redis.member(group, quitter)).unwrap().unwrap())
    });
    g.bench_function("quitter check, Redis bitmap tier", |b| {
        b.iter(|| tier_check(quitter))
    });
    g.finish();
    rt.block_on(redis.discard(group)).unwrap();
    let mut tier_keys: Vec<String> = (0..16).map(|b| ids_key(group, b)).collect();
    tier_keys.extend((0..16).map(|m| users_key(group, m)));
    tier_keys.push(quit_key(group));
    let _: i64 = rt.block_on(pool.del(tier_keys)).unwrap();
}

criterion_group!(bitmap_benches, benches);
criterion_main!(bitmap_benches);
