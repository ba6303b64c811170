//! The relation check of every direct send: `CheckRelations(user, [peers])` through the
//! domain, warmed. `memory` is the embedded default (local cache → in-process cache);
//! `redis` turns the local cache off to measure the Redis tier alone (set
//! `IMESH_TEST_REDIS_URL`, e.g. under scripts/stores.sh). `1 stranger` is the negative
//! check (no row either way); `bloom` is what seed 001's Bloom filter would answer it with
//! instead: two probes of a filter over 5,000,000 edges (100,000 users, 50 rows each) at
//! a 1 % false-positive rate.

/// The allocator the programs use (mimalloc), so the figures are theirs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::{sync::Arc, time::Duration};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use imesh_kit::{ids::Snowflake, testing};
use relation_svc::{
    domain::{
        Checker, EdgeCache, FriendStore, LocalCache, NewUser, User, UserStore,
        plan::{self, Clock},
    },
    store::{memory::MemoryEdgeCache, redis::RedisEdgeCache, sql},
};

const USERS: i64 = 101;

async fn checker(shared: Arc<dyn EdgeCache>, local_ttl: Duration) -> Checker {
    let config = testing::fresh_sql(testing::Backend::Sqlite).await.unwrap();
    let db = imesh_kit::sql::connect_and_migrate::<sql::Migrator>(&config)
        .await
        .unwrap();
    let ids = Arc::new(Snowflake::new(1));
    let users = Arc::new(sql::SqlUserStore::new(
        db.clone(),
        ids.clone(),
        Default::default(),
    ));
    let friends = Arc::new(sql::SqlFriendStore::new(
        db,
        ids,
        relation_svc::events::encode,
        Default::default(),
    ));
    for id in 1..=USERS {
        let user = User {
            id,
            username: format!("user{id}"),
            nickname: String::new(),
            created_at_ms: 0,
            avatar_url: String::new(),
            extra_json: String::new(),
            disabled: false,
            token_version: 0,
        };
        users
            .insert(&NewUser {
                user,
                password_hash: String::new(),
            })
            .await
            .unwrap();
    }
    // User 1 is friends with everyone else.
    let clock = Clock {
        now_ms: 1,
        request_ttl_ms: 1_000,
    };
    for peer in 2..=USERS {
        let draft = plan::parse_draft(peer, "", "").unwrap();
        friends
            .change_pair(1, peer, &|s| plan::send(s, draft.clone(), clock))
            .await
            .unwrap();
        friends
            .change_pair(1, peer, &|s| plan::respond(s, peer, true, clock))
            .await
            .unwrap();
    }
    Checker::new(LocalCache::new(local_ttl, 100_000), shared, users, friends)
}

fn checks(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut tiers: Vec<(&str, Checker)> = vec![(
        "memory",
        rt.block_on(checker(
            Arc::new(MemoryEdgeCache::new(Duration::from_secs(600))),
            Duration::from_secs(600),
        )),
    )];
    if let Some(redis) = testing::redis() {
        let pool = rt
            .block_on(imesh_kit::redis::connect(&redis, redis.url().unwrap()))
            .unwrap();
        let shared = Arc::new(RedisEdgeCache::new(pool, Duration::from_secs(600)));
        tiers.push(("redis", rt.block_on(checker(shared, Duration::ZERO))));
    }
    let peers: Vec<i64> = (2..=USERS).collect();
    let mut group = c.benchmark_group("check_relations");
    for (tier, checker) in &tiers {
        rt.block_on(checker.check(1, &peers)).unwrap();
        group.throughput(Throughput::Elements(1));
        let mut i = 0;
        group.bench_function(format!("{tier}/1 peer"), |b| {
            b.iter(|| {
                i = (i + 1) % peers.len();
                rt.block_on(checker.check(1, &peers[i..=i])).unwrap()
            })
        });
        let mut stranger = 2;
        group.bench_function(format!("{tier}/1 stranger"), |b| {
            b.iter(|| {
                stranger = stranger % (USERS - 1) + 2;
                rt.block_on(checker.check(stranger, &[stranger % (USERS - 1) + 2]))
                    .unwrap()
            })
        });
        group.throughput(Throughput::Elements(peers.len() as u64));
        group.bench_function(format!("{tier}/100 peers"), |b| {
            b.iter(|| rt.block_on(checker.check(1, &peers)).unwrap())
        });
    }
    let filter = edges_filter();
    println!(
        "bloom: {} bytes for 5,000,000 edges",
        filter.as_slice().len() * 8
    );
    group.throughput(Throughput::Elements(1));
    let mut owner = 0i64;
    group.bench_function("bloom/1 stranger", |b| {
        b.iter(|| {
            owner = (owner + 1) % 100_000;
            let peer = owner + 1_000_000;
            filter.contains(&(owner, peer)) || filter.contains(&(peer, owner))
        })
    });
    group.finish();
}

/// Seed 001's filter: every (owner, peer) row of 100,000 users with 50 rows each.
fn edges_filter() -> fastbloom::BloomFilter {
    let mut filter = fastbloom::BloomFilter::with_false_pos(0.01).expected_items(5_000_000);
    for owner in 0..100_000i64 {
        for k in 1..=50 {
            filter.insert(&(owner, (owner + k * 97) % 100_000));
        }
    }
    filter
}

criterion_group!(benches, checks);
criterion_main!(benches);
