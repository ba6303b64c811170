//! The group hot paths on the embedded default (SQLite): `CheckSend` answered from the gate's
//! cache, and paging a 100,000-member super group (built with the bulk import, whose
//! duration is printed once) by keyset from the database and from its roster, in process
//! and — when `IMESH_TEST_REDIS_URL` names one — in Redis (fills printed once).

/// The allocator the programs use (mimalloc), so the figures are theirs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use group_svc::{
    domain::{
        Gate, Group, GroupStore, GroupType, JoinMode, Member, MemberStatus, Role,
        ports::{Entry, Rosters},
    },
    store::{memory::MemoryRosters, redis::RedisRosters, sql},
};
use imesh_kit::{ids::Snowflake, testing};

async fn store() -> Arc<dyn GroupStore> {
    let config = testing::fresh_sql(testing::Backend::Sqlite).await.unwrap();
    let db = imesh_kit::sql::connect_and_migrate::<sql::Migrator>(&config)
        .await
        .unwrap();
    Arc::new(sql::SqlGroupStore::new(
        db,
        Arc::new(Snowflake::new(1)),
        group_svc::events::encode,
        Default::default(),
    ))
}

/// Group `id` of `kind` owned by user 1, with `members` members in all (users 1..=members).
async fn group(store: &dyn GroupStore, id: i64, kind: GroupType, members: i64) {
    let group = Group {
        id,
        kind,
        name: "bench".into(),
        owner_id: 1,
        member_count: 1,
        max_member: 100_000,
        join_mode: JoinMode::Invite,
        version: 1,
        next_map_id: 1,
        ..Default::default()
    };
    let owner = Member {
        group_id: id,
        user_id: 1,
        role: Role::Owner,
        map_id: 0,
        alias: String::new(),
        nickname: String::new(),
        mute_until_ms: 0,
        join_seq: 0,
        leave_seq: 0,
        joined_at_ms: 0,
        status: MemberStatus::Normal,
        extra_permissions: 0,
    };
    store.create(&group, &[owner]).await.unwrap();
    let users: Vec<i64> = (2..=members).collect();
    for chunk in users.chunks(10_000) {
        store.import(id, chunk, 0, 0).await.unwrap();
    }
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = rt.block_on(store());
    rt.block_on(group(&*store, 1, GroupType::Normal, 1_000));
    let started = Instant::now();
    rt.block_on(group(&*store, 2, GroupType::Super, 100_000));
    println!(
        "bulk import of a 100,000-member super group: {:?}",
        started.elapsed()
    );
    let shared = Arc::new(group_svc::store::memory::MemoryGroupCache::new(
        Duration::from_secs(600),
    ));
    let gate = Gate::new(store.clone(), shared, Duration::from_secs(600), 100_000);
    for user in 1..=1_000 {
        rt.block_on(gate.check(1, user, 0)).unwrap();
    }

    let mut g = c.benchmark_group("groups");
    g.throughput(Throughput::Elements(1));
    let mut user = 0;
    g.bench_function("check_send/cached, 1,000-member group", |b| {
        b.iter(|| {
            user = user % 1_000 + 1;
            rt.block_on(gate.check(1, user, 0)).unwrap()
        })
    });
    g.bench_function(
        "page of 100/100,000-member group, from map id 50,000",
        |b| b.iter(|| rt.block_on(store.page(2, 50_000, 100)).unwrap()),
    );
    g.bench_function("page of 100/100,000-member group, last page", |b| {
        b.iter(|| rt.block_on(store.page(2, 99_950, 100)).unwrap())
    });
    g.bench_function("member check, database", |b| {
        b.iter(|| rt.block_on(store.members(2, &[77_777])).unwrap())
    });
    for (name, rosters) in rt.block_on(rosters()) {
        let started = Instant::now();
        rt.block_on(fill(&*store, &*rosters));
        println!(
            "{name} roster fill of the 100,000-member group: {:?}",
            started.elapsed()
        );
        g.bench_function(
            format!("page of 100/100,000-member group, from map id 50,000, {name} roster"),
            |b| {
                b.iter(|| {
                    rt.block_on(async {
                        let page = rosters.page(2, 50_000, 100).await.unwrap().unwrap();
                        let ids: Vec<i64> = page.iter().map(|e| e.user).collect();
                        store.members(2, &ids).await.unwrap()
                    })
                })
            },
        );
        g.bench_function(format!("member check, {name} roster"), |b| {
            b.iter(|| rt.block_on(rosters.member(2, 77_777)).unwrap().unwrap())
        });
    }
    g.finish();
}

/// The in-process roster, and Redis's when the tests' Redis is named.
async fn rosters() -> Vec<(&'static str, Arc<dyn Rosters>)> {
    let mut out: Vec<(&'static str, Arc<dyn Rosters>)> =
        vec![("in-process", Arc::new(MemoryRosters::default()))];
    if let Some((_, config)) = testing::redis_servers().into_iter().next() {
        let pool = imesh_kit::redis::connect(&config, config.url().unwrap())
            .await
            .unwrap();
        out.push(("Redis", Arc::new(RedisRosters::new(pool))));
    }
    out
}

/// Fills group 2's roster from the database, as a miss does.
async fn fill(store: &dyn GroupStore, rosters: &dyn Rosters) {
    rosters.discard(2).await.unwrap();
    let claim = rosters.claim(2).await.unwrap().unwrap();
    let version = store.group(2).await.unwrap().unwrap().version;
    let members: Vec<Entry> = store
        .roster(2)
        .await
        .unwrap()
        .into_iter()
        .map(|(map_id, user)| Entry { map_id, user })
        .collect();
    assert!(rosters.fill(2, claim, version, &members).await.unwrap());
}

criterion_group!(group_benches, benches);
criterion_main!(group_benches);
