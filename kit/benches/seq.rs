//! Seq allocations per second: the embedded default's path (in-process counters, SQLite
//! ceilings written once per step), and, with the test Redis configured
//! (`source scripts/stores.sh && stores_start`), Redis counters: one script call per
//! allocation, or per `next_many` of 100 keys (a batch of sends to 100 conversations).

/// The allocator the programs use (mimalloc), so the figures are theirs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use imesh_kit::{
    seq::{Counters, MemoryCounters, RedisCounters, SeqAllocator, SqlCeilings},
    testing::{self, Backend},
};

async fn allocator(counters: Arc<dyn Counters>) -> SeqAllocator {
    let db = imesh_kit::sql::connect(&testing::fresh_sql(Backend::Sqlite).await.unwrap())
        .await
        .unwrap();
    let manager = sea_orm_migration::SchemaManager::new(&db);
    sea_orm_migration::MigrationTrait::up(&imesh_kit::seq::Migration, &manager)
        .await
        .unwrap();
    SeqAllocator::new(counters, Arc::new(SqlCeilings::new(db)), 10_000)
}

fn allocations(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut tiers: Vec<(&str, SeqAllocator)> = vec![(
        "memory",
        rt.block_on(allocator(Arc::new(MemoryCounters::default()))),
    )];
    if let Some(redis) = testing::redis() {
        let pool = rt
            .block_on(imesh_kit::redis::connect(&redis, redis.url().unwrap()))
            .unwrap();
        tiers.push((
            "redis",
            rt.block_on(allocator(Arc::new(RedisCounters::new(pool)))),
        ));
    }
    let run = testing::random_id();
    let keys: Vec<String> = (0..1000).map(|i| format!("{{c:{run}:{i}}}:seq")).collect();
    let mut group = c.benchmark_group("seq");
    for (tier, alloc) in &tiers {
        group.throughput(Throughput::Elements(1));
        let mut i = 0;
        group.bench_function(format!("{tier}/next/1000 conversations"), |b| {
            b.iter(|| {
                i = (i + 1) % keys.len();
                rt.block_on(alloc.next(&keys[i])).unwrap()
            })
        });
        let users: Vec<&str> = keys[..100].iter().map(String::as_str).collect();
        group.throughput(Throughput::Elements(users.len() as u64));
        group.bench_function(format!("{tier}/next_many/100 conversations"), |b| {
            b.iter(|| rt.block_on(alloc.next_many(&users)).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, allocations);
criterion_main!(benches);
