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
        cache.put(&[(owner, known)]).await.unwrap();
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
        cache.put(&[(owner, first)]).await.unwrap();
        let second = Known {
            account: Account::Disabled,
            edges: HashMap::new(),
        };
        let missing = Known {
            account: Account::Missing,
            edges: HashMap::new(),
        };
        cache
            .put(&[(owner, second), (ghost, missing)])
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

#[test]
fn the_local_cache_expires_forgets_and_stays_bounded() {
    let cached = Cached {
        account: Account::Active,
        edge: Some(FRIEND),
    };
    let local = LocalCache::new(Duration::from_secs(60), 2);
    local.put(1, 2, cached);
    assert_eq!(local.get(1, 2), Some(cached));
    local.forget(&[1]);
    assert_eq!(local.get(1, 2), None);
    local.put(1, 2, cached);
    local.put(3, 4, cached);
    local.put(5, 6, cached);
    assert_eq!(
        (local.get(1, 2), local.get(5, 6)),
        (None, Some(cached)),
        "full: dropped, then refilled"
    );
    let expired = LocalCache::new(Duration::ZERO, 10);
    expired.put(1, 2, cached);
    assert_eq!(expired.get(1, 2), None);
}
