//! The allocator's contract, run over in-process and Redis counters and every SQL backend.

use std::sync::Arc;

use super::*;
use crate::testing::{self, Backend};

async fn ceilings(backend: Backend) -> Arc<SqlCeilings> {
    let config = testing::fresh_sql(backend).await.unwrap();
    let db = crate::sql::connect(&config).await.unwrap();
    let manager = sea_orm_migration::SchemaManager::new(&db);
    sea_orm_migration::MigrationTrait::up(&Migration, &manager)
        .await
        .unwrap();
    Arc::new(SqlCeilings::new(db))
}

/// Counters on every test Redis (single node and cluster), with their pools.
async fn redis_counters() -> Vec<(RedisCounters, fred::prelude::Pool)> {
    let mut out = Vec::new();
    for (_, pool) in testing::redis_pools().await {
        out.push((RedisCounters::new(pool.clone()), pool));
    }
    out
}

/// Values strictly increase, and after the counter is lost they resume above every value
/// handed out before.
async fn survives_counter_loss(
    counters: Arc<dyn Counters>,
    ceilings: Arc<SqlCeilings>,
    lose: impl AsyncFn(&str),
) {
    let key = format!("{{t:{}}}:seq", testing::random_id());
    let alloc = SeqAllocator::new(counters.clone(), ceilings.clone(), 10);
    let first: Vec<i64> = {
        let mut v = Vec::new();
        for _ in 0..25 {
            v.push(alloc.next(&key).await.unwrap());
        }
        v
    };
    assert_eq!(
        first,
        (1..=25).collect::<Vec<_>>(),
        "dense in normal operation"
    );
    lose(&key).await;
    // A new allocator too, as after a process restart: nothing is remembered but SQL.
    let alloc = SeqAllocator::new(counters, ceilings, 10);
    let after = alloc.next(&key).await.unwrap();
    assert!(
        after > 25,
        "value {after} after counter loss must be above 25"
    );
    assert!(
        after <= 25 + 10 + 1,
        "at most one step is skipped, got {after}"
    );
    assert_eq!(alloc.next(&key).await.unwrap(), after + 1);
}

#[tokio::test]
async fn memory_counters_survive_loss_on_every_sql_backend() {
    for backend in testing::sql_backends() {
        let counters = Arc::new(MemoryCounters::default());
        let c = counters.clone();
        survives_counter_loss(counters, ceilings(backend).await, async |_: &str| c.clear()).await;
    }
}

#[tokio::test]
async fn redis_counters_survive_a_deleted_key() {
    for (counters, pool) in redis_counters().await {
        survives_counter_loss(
            Arc::new(counters),
            ceilings(Backend::Sqlite).await,
            async |key: &str| {
                use fred::prelude::KeysInterface;
                let _: i64 = pool.del(key).await.unwrap();
            },
        )
        .await;
    }
}

#[tokio::test]
async fn concurrent_allocations_never_repeat() {
    let mut runs: Vec<Arc<dyn Counters>> = vec![Arc::new(MemoryCounters::default())];
    for (counters, _) in redis_counters().await {
        runs.push(Arc::new(counters));
    }
    for counters in runs {
        let alloc = Arc::new(SeqAllocator::new(
            counters,
            ceilings(Backend::Sqlite).await,
            7,
        ));
        let key = format!("{{t:{}}}:seq", testing::random_id());
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (alloc, key) = (alloc.clone(), key.clone());
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    for _ in 0..50 {
                        got.push(alloc.next(&key).await.unwrap());
                    }
                    got
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all.sort_unstable();
        assert_eq!(all, (1..=400).collect::<Vec<_>>());
    }
}

#[tokio::test]
async fn next_many_allocates_per_key_and_raises_ceilings_monotonically() {
    for backend in testing::sql_backends() {
        let ceilings = ceilings(backend).await;
        let alloc = SeqAllocator::new(Arc::new(MemoryCounters::default()), ceilings.clone(), 100);
        let (a, b) = (
            format!("a{}", testing::random_id()),
            format!("b{}", testing::random_id()),
        );
        assert_eq!(alloc.next_many(&[&a, &b]).await.unwrap(), vec![1, 1]);
        assert_eq!(alloc.next_many(&[&a, &b]).await.unwrap(), vec![2, 2]);
        assert_eq!(ceilings.get(&[&a]).await.unwrap()[0], 101);
        ceilings.raise(&[(&a, 50)]).await.unwrap();
        assert_eq!(
            ceilings.get(&[&a]).await.unwrap()[0],
            101,
            "a ceiling never goes down"
        );
    }
}

#[tokio::test]
async fn a_key_repeated_in_one_call_gets_increasing_values_in_order() {
    for backend in testing::sql_backends() {
        let mut counters: Vec<Arc<dyn Counters>> = vec![Arc::new(MemoryCounters::default())];
        for (redis, _) in redis_counters().await {
            counters.push(Arc::new(redis));
        }
        for counters in counters {
            let ceilings = ceilings(backend).await;
            let alloc = SeqAllocator::new(counters, ceilings.clone(), 10);
            let (a, b) = (
                format!("a{}", testing::random_id()),
                format!("b{}", testing::random_id()),
            );
            let got = alloc.next_many(&[&a, &b, &a, &a, &b]).await.unwrap();
            assert_eq!(got, vec![1, 1, 2, 3, 2], "{backend:?}");
            assert_eq!(ceilings.get(&[&a]).await.unwrap()[0], 13, "{backend:?}");
            let got = alloc.next_many(&[a.as_str(); 12]).await.unwrap();
            assert_eq!(got, (4..=15).collect::<Vec<_>>(), "{backend:?}");
            assert_eq!(ceilings.get(&[&a]).await.unwrap()[0], 25, "{backend:?}");
        }
    }
}

/// Counters whose missing key another caller creates between the increments of one call,
/// as happens between pipelined Redis commands.
struct CreatedMidCall(MemoryCounters);

#[async_trait]
impl Counters for CreatedMidCall {
    async fn incr_existing(&self, keys: &[&str]) -> Result<Vec<Option<i64>>, StoreError> {
        let mut values = Vec::with_capacity(keys.len());
        for key in keys {
            let value = self.0.incr_existing(&[key]).await?[0];
            if value.is_none() {
                self.0.init(&[(key, 0)]).await?;
            }
            values.push(value);
        }
        Ok(values)
    }

    async fn init(&self, floors: &[(&str, i64)]) -> Result<(), StoreError> {
        self.0.init(floors).await
    }
}

#[tokio::test]
async fn a_key_created_by_another_caller_mid_call_keeps_its_order_in_the_call() {
    let ceilings = ceilings(Backend::Sqlite).await;
    let alloc = SeqAllocator::new(
        Arc::new(CreatedMidCall(MemoryCounters::default())),
        ceilings,
        10,
    );
    let key = format!("k{}", testing::random_id());
    let got = alloc.next_many(&[&key, "other", &key, &key]).await.unwrap();
    assert_eq!(
        got,
        vec![1, 1, 2, 3],
        "places of one key get its values in order"
    );
}

/// SQL ceilings that count the reads made of them.
struct CountedReads {
    ceilings: Arc<SqlCeilings>,
    reads: std::sync::atomic::AtomicUsize,
}

#[async_trait]
impl Ceilings for CountedReads {
    async fn get(&self, keys: &[&str]) -> Result<Vec<i64>, StoreError> {
        self.reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.ceilings.get(keys).await
    }

    async fn raise(&self, ceilings: &[(&str, i64)]) -> Result<(), StoreError> {
        self.ceilings.raise(ceilings).await
    }
}

/// Allocates for 40 new keys (5 of them twice) in one call, loses every counter, then
/// allocates for the 40 again: each call reads the ceilings once, and the values resume
/// above those handed out.
async fn one_read_of_ceilings_per_call(counters: Arc<dyn Counters>, lose: impl AsyncFn(&str)) {
    for backend in testing::sql_backends() {
        let ceilings = Arc::new(CountedReads {
            ceilings: ceilings(backend).await,
            reads: Default::default(),
        });
        let reads = || ceilings.reads.load(std::sync::atomic::Ordering::Relaxed);
        let alloc = SeqAllocator::new(counters.clone(), ceilings.clone(), 10);
        let keys: Vec<String> = (0..40)
            .map(|i| format!("{{t:{}}}:{i}", testing::random_id()))
            .collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let mut repeated = keys.clone();
        repeated.extend(&keys[..5]);
        let first = alloc.next_many(&repeated).await.unwrap();
        assert_eq!(first[..40], [1; 40], "{backend:?}");
        assert_eq!(
            first[40..],
            [2; 5],
            "{backend:?}: a repeated key counts on, in order"
        );
        assert_eq!(reads(), 1, "{backend:?}: one read for the call's new keys");

        for key in &keys {
            lose(key).await;
        }
        let after = alloc.next_many(&keys).await.unwrap();
        assert_eq!(
            reads(),
            2,
            "{backend:?}: one read for the call's lost counters"
        );
        for (i, value) in after.iter().enumerate() {
            let before = if i < 5 { 2 } else { 1 };
            assert!(
                *value > before && *value <= before + 10 + 1,
                "{backend:?}: key {i} resumed at {value}, above {before} by at most a step"
            );
        }
    }
}

#[tokio::test]
async fn lost_memory_counters_of_one_call_come_back_with_one_read_of_their_ceilings() {
    let counters = Arc::new(MemoryCounters::default());
    let c = counters.clone();
    one_read_of_ceilings_per_call(counters, async |_: &str| c.clear()).await;
}

#[tokio::test]
async fn lost_redis_counters_of_one_call_come_back_with_one_read_of_their_ceilings() {
    for (counters, pool) in redis_counters().await {
        one_read_of_ceilings_per_call(Arc::new(counters), async |key: &str| {
            use fred::prelude::KeysInterface;
            let _: i64 = pool.del(key).await.unwrap();
        })
        .await;
    }
}
