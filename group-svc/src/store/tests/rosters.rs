//! The Rosters contract, run against the in-process adapter and every real Redis (single
//! node and cluster).

use std::sync::Arc;

use imesh_kit::testing;

use crate::{
    domain::ports::{Entry, Rosters},
    store::{memory, redis},
};

/// The in-process rosters and every configured real Redis's.
pub(crate) async fn rosters() -> Vec<(&'static str, Arc<dyn Rosters>)> {
    let mut out: Vec<(&'static str, Arc<dyn Rosters>)> =
        vec![("memory", Arc::new(memory::MemoryRosters::default()))];
    for (name, pool) in testing::redis_pools().await {
        out.push((name, Arc::new(redis::RedisRosters::new(pool))));
    }
    out
}

fn entry(map_id: u32, user: i64) -> Entry {
    Entry { map_id, user }
}

/// `n` members with map ids 1..=n; users spread over every bucket, not in map-id order.
fn members(n: u32) -> Vec<Entry> {
    (1..=n)
        .map(|m| entry(m, 1_000_003 * i64::from(m) % 99_991 + 100))
        .collect()
}

async fn filled(rosters: &dyn Rosters, g: i64, version: i64, members: &[Entry]) {
    let claim = rosters.claim(g).await.unwrap().expect("nobody else fills");
    assert!(rosters.fill(g, claim, version, members).await.unwrap());
}

/// Every entry, page by page of `limit`.
async fn all_pages(rosters: &dyn Rosters, g: i64, limit: u32) -> Vec<Entry> {
    let mut paged = Vec::new();
    let mut from = 0;
    loop {
        let page = rosters.page(g, from, limit).await.unwrap().unwrap();
        assert!(page.len() <= limit as usize);
        let Some(last) = page.last() else {
            return paged;
        };
        from = last.map_id + 1;
        paged.extend(page);
    }
}

#[tokio::test]
async fn pages_follow_map_ids_across_buckets_and_membership_reads_back() {
    for (name, rosters) in rosters().await {
        let g = testing::random_id();
        assert_eq!(rosters.page(g, 0, 10).await.unwrap(), None, "{name}");
        assert_eq!(rosters.member(g, 7).await.unwrap(), None, "{name}");
        let all = members(4_500);
        filled(&*rosters, g, 3, &all).await;
        assert_eq!(
            all_pages(&*rosters, g, 500).await,
            all,
            "{name}: every member once, in map-id order"
        );
        let some = all[1234];
        assert_eq!(
            rosters.member(g, some.user).await.unwrap(),
            Some(Some(some.map_id)),
            "{name}"
        );
        assert_eq!(rosters.member(g, 42).await.unwrap(), Some(None), "{name}");

        // Most members gone: pages reach past the gaps.
        let sparse: Vec<Entry> = members(4_500).into_iter().step_by(97).collect();
        let g = testing::random_id();
        filled(&*rosters, g, 1, &sparse).await;
        assert_eq!(
            all_pages(&*rosters, g, 7).await,
            sparse,
            "{name}: sparse map ids"
        );
    }
}

#[tokio::test]
async fn changes_in_version_order_keep_the_roster_exact() {
    for (name, rosters) in rosters().await {
        let g = testing::random_id();
        filled(&*rosters, g, 10, &members(40)).await;
        let gone = members(40)[4].user;
        rosters
            .apply(g, 11, &[entry(41, 5), entry(42, 21)], &[gone])
            .await
            .unwrap();
        // A rejoin takes a new map id; the old one is not reused.
        rosters.apply(g, 12, &[entry(43, gone)], &[]).await.unwrap();
        // The same version again changes nothing.
        rosters.apply(g, 12, &[], &[5]).await.unwrap();
        let page = rosters.page(g, 40, 10).await.unwrap().unwrap();
        assert_eq!(
            page,
            vec![
                entry(40, members(40)[39].user),
                entry(41, 5),
                entry(42, 21),
                entry(43, gone)
            ],
            "{name}"
        );
        assert_eq!(
            rosters.member(g, gone).await.unwrap(),
            Some(Some(43)),
            "{name}"
        );
        let first = rosters.page(g, 0, 6).await.unwrap().unwrap();
        assert!(
            first.iter().all(|e| e.map_id != 5),
            "{name}: the old map id is gone"
        );
    }
}

#[tokio::test]
async fn a_skipped_version_drops_the_roster_for_a_fresh_fill() {
    for (name, rosters) in rosters().await {
        let g = testing::random_id();
        filled(&*rosters, g, 10, &members(3)).await;
        rosters.apply(g, 12, &[entry(9, 9)], &[]).await.unwrap();
        assert_eq!(rosters.page(g, 0, 10).await.unwrap(), None, "{name}");
        assert_eq!(rosters.member(g, 9).await.unwrap(), None, "{name}");
        filled(&*rosters, g, 12, &[entry(9, 9)]).await;
        assert_eq!(
            rosters.page(g, 0, 10).await.unwrap(),
            Some(vec![entry(9, 9)]),
            "{name}: the refill replaced every old entry"
        );
    }
}

#[tokio::test]
async fn a_change_during_a_fill_keeps_its_snapshot_unpublished() {
    for (name, rosters) in rosters().await {
        let g = testing::random_id();
        let claim = rosters.claim(g).await.unwrap().unwrap();
        assert_eq!(
            rosters.claim(g).await.unwrap(),
            None,
            "{name}: one filler at a time"
        );
        // The snapshot was read before this change landed.
        rosters.apply(g, 5, &[entry(4, 4)], &[]).await.unwrap();
        assert!(
            !rosters.fill(g, claim, 4, &members(3)).await.unwrap(),
            "{name}"
        );
        assert_eq!(rosters.page(g, 0, 10).await.unwrap(), None, "{name}");
        // The revoked claim frees the group for the next filler.
        filled(&*rosters, g, 5, &members(4)).await;
        assert_eq!(
            rosters.claim(g).await.unwrap(),
            None,
            "{name}: published needs no fill"
        );
        rosters.discard(g).await.unwrap();
        assert_eq!(
            rosters.member(g, 4).await.unwrap(),
            None,
            "{name}: discarded"
        );
    }
}

#[tokio::test]
async fn an_empty_group_is_a_roster_too() {
    for (name, rosters) in rosters().await {
        let g = testing::random_id();
        filled(&*rosters, g, 1, &members(20)).await;
        rosters.discard(g).await.unwrap();
        filled(&*rosters, g, 2, &[]).await;
        assert_eq!(
            rosters.page(g, 0, 10).await.unwrap(),
            Some(vec![]),
            "{name}"
        );
        assert_eq!(
            rosters.member(g, members(20)[0].user).await.unwrap(),
            Some(None),
            "{name}"
        );
    }
}
