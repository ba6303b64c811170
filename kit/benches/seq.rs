//! Seq allocations per second in process: the embedded default's path (in-process counters,
//! SQLite ceilings written once per step).

use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use imesh_kit::{
    seq::{MemoryCounters, SeqAllocator, SqlCeilings},
    testing::{self, Backend},
};

fn allocations(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let alloc = rt.block_on(async {
        let db = imesh_kit::sql::connect(&testing::fresh_sql(Backend::Sqlite).await.unwrap())
            .await
            .unwrap();
        let manager = sea_orm_migration::SchemaManager::new(&db);
        sea_orm_migration::MigrationTrait::up(&imesh_kit::seq::Migration, &manager)
            .await
            .unwrap();
        SeqAllocator::new(
            Arc::new(MemoryCounters::default()),
            Arc::new(SqlCeilings::new(db)),
            10_000,
        )
    });
    let keys: Vec<String> = (0..1000).map(|i| format!("{{c:{i}}}:seq")).collect();
    let mut group = c.benchmark_group("seq");
    group.throughput(Throughput::Elements(1));
    let mut i = 0;
    group.bench_function("next/1000 conversations", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            rt.block_on(alloc.next(&keys[i])).unwrap()
        })
    });
    group.finish();
}

criterion_group!(benches, allocations);
criterion_main!(benches);
