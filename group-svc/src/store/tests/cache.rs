//! The GroupCache contract, run against the in-process adapter and a real Redis, and the
//! invalidation broadcast between replicas over real Redis pub/sub.

use std::{sync::Arc, time::Duration};

use imesh_kit::testing;
use parking_lot::Mutex;

use crate::{
    domain::{
        ACTIVE_KEPT, GateGroup, GateMember, GroupCache, GroupStatus, GroupType, MemberStatus, Role,
    },
    store::{memory, redis},
};

async fn caches() -> Vec<(&'static str, Arc<dyn GroupCache>)> {
    let mut out: Vec<(&'static str, Arc<dyn GroupCache>)> = vec![(
        "memory",
        Arc::new(memory::MemoryGroupCache::new(Duration::from_secs(60))),
    )];
    for (name, pool) in testing::redis_pools().await {
        out.push((
            name,
            Arc::new(redis::RedisGroupCache::new(pool, Duration::from_secs(60))),
        ));
    }
    out
}

const GROUP: GateGroup = GateGroup {
    kind: GroupType::Normal,
    status: GroupStatus::Normal,
    mute_all: true,
    version: 7,
    member_count: 3,
    next_map_id: 9,
};
const MEMBER: GateMember = GateMember {
    role: Role::Admin,
    map_id: 4,
    mute_until_ms: 99,
    join_seq: 12,
    status: MemberStatus::Normal,
    extra_permissions: 128,
};

#[tokio::test]
async fn entries_read_back_until_the_group_is_invalidated() {
    for (name, cache) in caches().await {
        let g = testing::random_id();
        assert_eq!(cache.group(g).await.unwrap(), None, "{name}");
        assert_eq!(cache.member(g, 1).await.unwrap(), None, "{name}");
        assert_eq!(cache.member_ids(g).await.unwrap(), None, "{name}");
        let at = cache.generation(g).await.unwrap();
        assert!(cache.put_group(g, at, GROUP).await.unwrap(), "{name}");
        assert!(cache.put_member(g, at, 1, Some(MEMBER)).await.unwrap());
        assert!(cache.put_member(g, at, 2, None).await.unwrap());
        assert!(cache.put_member_ids(g, at, &[]).await.unwrap());
        assert_eq!(cache.group(g).await.unwrap(), Some(GROUP), "{name}");
        assert_eq!(
            cache.member(g, 1).await.unwrap(),
            Some(Some(MEMBER)),
            "{name}"
        );
        assert_eq!(
            cache.member(g, 2).await.unwrap(),
            Some(None),
            "{name}: cached as no member"
        );
        assert_eq!(
            cache.member_ids(g).await.unwrap(),
            Some(vec![]),
            "{name}: an empty list is a hit"
        );
        assert!(cache.put_member_ids(g, at, &[3, 1, 2]).await.unwrap());
        let mut ids = cache.member_ids(g).await.unwrap().unwrap();
        ids.sort();
        assert_eq!(ids, vec![1, 2, 3], "{name}");
        cache.invalidate(g).await.unwrap();
        assert_eq!(
            (
                cache.group(g).await.unwrap(),
                cache.member(g, 1).await.unwrap()
            ),
            (None, None),
            "{name}"
        );
        assert_eq!(cache.member_ids(g).await.unwrap(), None, "{name}");
    }
}

#[tokio::test]
async fn a_fill_read_before_an_invalidation_stores_nothing() {
    for (name, cache) in caches().await {
        let g = testing::random_id();
        // A filler reads the generation, then the database; a change commits and
        // invalidates the group before the filler puts what it read.
        let before = cache.generation(g).await.unwrap();
        cache.invalidate(g).await.unwrap();
        assert!(!cache.put_group(g, before, GROUP).await.unwrap(), "{name}");
        assert!(
            !cache.put_member(g, before, 1, None).await.unwrap(),
            "{name}"
        );
        assert!(
            !cache.put_member_ids(g, before, &[1]).await.unwrap(),
            "{name}"
        );
        assert_eq!(cache.group(g).await.unwrap(), None, "{name}");
        assert_eq!(cache.member(g, 1).await.unwrap(), None, "{name}");
        assert_eq!(cache.member_ids(g).await.unwrap(), None, "{name}");
        // A fill that began after the invalidation stores.
        let after = cache.generation(g).await.unwrap();
        assert_ne!(after, before, "{name}");
        assert!(cache.put_member_ids(g, after, &[1, 2]).await.unwrap());
        let mut ids = cache.member_ids(g).await.unwrap().unwrap();
        ids.sort();
        assert_eq!(ids, vec![1, 2], "{name}");
    }
}

#[tokio::test]
async fn an_invalidation_reaches_every_replica_listening_on_redis() {
    for (name, config) in testing::redis_servers() {
        let url = config.url().unwrap().to_owned();
        let heard = Arc::new(Mutex::new(Vec::new()));
        let sink = heard.clone();
        let task = redis::listen(&url, Arc::new(move |g| sink.lock().push(g)))
            .await
            .unwrap();
        let pool = imesh_kit::redis::connect(&config, &url).await.unwrap();
        let writer = redis::RedisGroupCache::new(pool, Duration::from_secs(60));
        let g = testing::random_id();
        // Invalidate until the listener hears it: its subscription may not be active yet.
        testing::until_async(&format!("{name}: the invalidation arrives"), || async {
            writer.invalidate(g).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            heard.lock().contains(&g)
        })
        .await;
        task.abort();
    }
}

#[tokio::test]
async fn activity_keeps_the_most_recent_members_once_each() {
    for (name, cache) in caches().await {
        let g = testing::random_id();
        for (user, at) in [(1, 10), (2, 20), (1, 30), (3, 40)] {
            cache.touch(g, user, at).await.unwrap();
        }
        assert_eq!(cache.active(g, 10).await.unwrap(), vec![3, 1, 2], "{name}");
        assert_eq!(cache.active(g, 2).await.unwrap(), vec![3, 1], "{name}");
        for user in 100..(100 + ACTIVE_KEPT as i64 + 5) {
            cache.touch(g, user, 1_000 + user).await.unwrap();
        }
        let kept = cache.active(g, 1_000).await.unwrap();
        assert_eq!(
            (kept.len(), kept[0]),
            (ACTIVE_KEPT, 104 + ACTIVE_KEPT as i64),
            "{name}"
        );
    }
}
