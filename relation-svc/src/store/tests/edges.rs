//! The EdgeCache contract, run against the in-process adapter and a real Redis.

use std::{collections::HashMap, sync::Arc, time::Duration};

use imesh_kit::testing;

use crate::domain::check::{Account, Cached, Edge, Known};
use crate::{
    domain::{EdgeCache, LocalCache},
    store::{memory, redis},
};

async fn caches() -> Vec<(&'static str, Arc<dyn EdgeCache>)> {
    let mut out: Vec<(&'static str, Arc<dyn EdgeCache>)> = vec![(
        "memory",
        Arc::new(memory::MemoryEdgeCache::new(Duration::from_secs(60))),
    )];
    for (name, pool) in testing::redis_pools().await {
        out.push((
            name,
            Arc::new(redis::RedisEdgeCache::new(pool, Duration::from_secs(60))),
        ));
    }
    out
}

const FRIEND: Edge = Edge {
    friend: true,
    blocked: false,
};
const BLOCKED: Edge = Edge {
    friend: false,
    blocked: true,
};

#[tokio::test]
async fn an_owner_is_unknown_until_put_then_answers_every_peer_until_invalidated() {
    for (name, cache) in caches().await {
        let (owner, friend, blocked, stranger) = (
            testing::random_id(),
            testing::random_id(),
            testing::random_id(),
            testing::random_id(),
        );
        let pairs = [(owner, friend), (owner, blocked), (owner, stranger)];
        assert_eq!(cache.get(&pairs).await.unwrap(), vec![None; 3], "{name}");
        let known = Known {
            account: Account::Active,
            edges: HashMap::from([(friend, FRIEND), (blocked, BLOCKED)]),
        };
        cache.put(&[(owner, 0, known)]).await.unwrap();
        let cached = |edge| {
            Some(Cached {
                account: Account::Active,
                edge,
            })
        };
        assert_eq!(
            cache.get(&pairs).await.unwrap(),
            vec![cached(Some(FRIEND)), cached(Some(BLOCKED)), cached(None)],
            "{name}"
        );
        cache.invalidate(&[owner]).await.unwrap();
        assert_eq!(cache.get(&pairs).await.unwrap(), vec![None; 3], "{name}");
    }
}

#[tokio::test]
async fn a_put_replaces_the_whole_row_set_and_keeps_missing_accounts() {
    for (name, cache) in caches().await {
        let (owner, peer, ghost) = (
            testing::random_id(),
            testing::random_id(),
            testing::random_id(),
        );
        let first = Known {
            account: Account::Active,
            edges: HashMap::from([(peer, FRIEND)]),
        };
        cache.put(&[(owner, 0, first)]).await.unwrap();
        let second = Known {
            account: Account::Disabled,
            edges: HashMap::new(),
        };
        let missing = Known {
            account: Account::Missing,
            edges: HashMap::new(),
        };
        cache
            .put(&[(owner, 0, second), (ghost, 0, missing)])
            .await
            .unwrap();
        let got = cache.get(&[(owner, peer), (ghost, owner)]).await.unwrap();
        assert_eq!(
            got,
            vec![
                Some(Cached {
                    account: Account::Disabled,
                    edge: None
                }),
                Some(Cached {
                    account: Account::Missing,
                    edge: None
                })
            ],
            "{name}"
        );
    }
}

#[tokio::test]
async fn rows_read_before_an_invalidation_are_not_stored() {
    for (name, cache) in caches().await {
        let (owner, other, peer) = (
            testing::random_id(),
            testing::random_id(),
            testing::random_id(),
        );
        let known = || Known {
            account: Account::Active,
            edges: HashMap::from([(peer, FRIEND)]),
        };
        // A filler reads the generations, then the database; a write to `owner` commits
        // and invalidates before the filler puts what it read.
        let before = cache.generations(&[owner, other]).await.unwrap();
        cache.invalidate(&[owner]).await.unwrap();
        let fill = [(owner, before[0], known()), (other, before[1], known())];
        cache.put(&fill).await.unwrap();
        let got = cache.get(&[(owner, peer), (other, peer)]).await.unwrap();
        assert_eq!(got[0], None, "{name}: the stale rows were not stored");
        assert!(got[1].is_some(), "{name}: the other owner's were");
        // A fill that began after the invalidation stores.
        let after = cache.generations(&[owner]).await.unwrap();
        assert_ne!(after[0], before[0], "{name}");
        cache.put(&[(owner, after[0], known())]).await.unwrap();
        assert!(cache.get(&[(owner, peer)]).await.unwrap()[0].is_some());
    }
}

#[test]
fn the_local_cache_expires_forgets_and_stays_bounded() {
    let cached = Cached {
        account: Account::Active,
        edge: Some(FRIEND),
    };
    let local = LocalCache::new(Duration::from_secs(60), 2);
    local.put(local.forgets(), 1, 2, cached);
    assert_eq!(local.get(1, 2), Some(cached));
    let read_before = local.forgets();
    local.forget(&[1]);
    assert_eq!(local.get(1, 2), None);
    local.put(read_before, 1, 2, cached);
    assert_eq!(local.get(1, 2), None, "read before the forget: not kept");
    let now = local.forgets();
    local.put(now, 1, 2, cached);
    local.put(now, 3, 4, cached);
    local.put(now, 5, 6, cached);
    assert_eq!(
        (local.get(1, 2), local.get(5, 6)),
        (None, Some(cached)),
        "full: dropped, then refilled"
    );
    let expired = LocalCache::new(Duration::ZERO, 10);
    expired.put(expired.forgets(), 1, 2, cached);
    assert_eq!(expired.get(1, 2), None);
}
