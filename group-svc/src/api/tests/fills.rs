//! A cache fill racing a change: `MemberIds` or `CheckSend` reads the database, a change
//! commits and forgets the group, and only then does the fill reach the caches. What was
//! read before the change must not be what later calls answer.

use std::time::Duration;

use async_trait::async_trait;
use imesh_kit::error::StoreError;
use tokio::sync::{Semaphore, mpsc};

use super::*;
use crate::domain::{GateGroup, GateMember, GroupCache};
use crate::store::memory::{MemoryGroupCache, MemoryRosters};

/// The in-process cache, except that each fill of member ids or of a member waits for a
/// permit from the test after telling it that it is waiting.
struct HeldFills {
    cache: MemoryGroupCache,
    waiting: mpsc::UnboundedSender<()>,
    permits: Semaphore,
}

impl HeldFills {
    async fn held(&self) {
        let _ = self.waiting.send(());
        self.permits.acquire().await.expect("open").forget();
    }
}

#[async_trait]
impl GroupCache for HeldFills {
    async fn generation(&self, group_id: i64) -> Result<u64, StoreError> {
        self.cache.generation(group_id).await
    }
    async fn group(&self, group_id: i64) -> Result<Option<GateGroup>, StoreError> {
        self.cache.group(group_id).await
    }
    async fn put_group(&self, g: i64, at: u64, group: GateGroup) -> Result<bool, StoreError> {
        self.cache.put_group(g, at, group).await
    }
    async fn member(&self, g: i64, user: i64) -> Result<Option<Option<GateMember>>, StoreError> {
        self.cache.member(g, user).await
    }
    async fn put_member(
        &self,
        g: i64,
        at: u64,
        user: i64,
        member: Option<GateMember>,
    ) -> Result<bool, StoreError> {
        self.held().await;
        self.cache.put_member(g, at, user, member).await
    }
    async fn member_ids(&self, group_id: i64) -> Result<Option<Vec<i64>>, StoreError> {
        self.cache.member_ids(group_id).await
    }
    async fn put_member_ids(&self, g: i64, at: u64, ids: &[i64]) -> Result<bool, StoreError> {
        self.held().await;
        self.cache.put_member_ids(g, at, ids).await
    }
    async fn touch(&self, g: i64, user: i64, at_ms: i64) -> Result<(), StoreError> {
        self.cache.touch(g, user, at_ms).await
    }
    async fn active(&self, group_id: i64, limit: u32) -> Result<Vec<i64>, StoreError> {
        self.cache.active(group_id, limit).await
    }
    async fn invalidate(&self, group_id: i64) -> Result<(), StoreError> {
        self.cache.invalidate(group_id).await
    }
}

async fn member_ids(api: &GroupApi, group_id: i64) -> Vec<i64> {
    let ask = call(Actor::System, pb::MemberIdsRequest { group_id });
    let mut ids = api.member_ids(ask).await.unwrap().into_inner().user_ids;
    ids.sort_unstable();
    ids
}

/// The API over [`HeldFills`], the test's end of its waits, and a group of user 1 alone.
async fn racing() -> (
    Arc<GroupApi>,
    Arc<HeldFills>,
    mpsc::UnboundedReceiver<()>,
    i64,
) {
    let (waiting, waits) = mpsc::unbounded_channel();
    let shared = Arc::new(HeldFills {
        cache: MemoryGroupCache::new(Duration::from_secs(60)),
        waiting,
        permits: Semaphore::new(0),
    });
    let (api, _db) = api_caching(shared.clone(), Arc::new(MemoryRosters::default())).await;
    let create = pb::CreateGroupRequest {
        name: "race".into(),
        ..Default::default()
    };
    let created = api.create_group(user(1, create)).await.unwrap();
    let g = created.into_inner().group.unwrap().group_id;
    (Arc::new(api), shared, waits, g)
}

async fn import(api: &GroupApi, group_id: i64, user_ids: Vec<i64>) {
    let import = pb::ImportMembersRequest { group_id, user_ids };
    api.import_members(call(Actor::System, import))
        .await
        .unwrap();
}

async fn check_send(api: &GroupApi, group_id: i64, user_id: i64) -> Result<(), Code> {
    let check = pb::CheckSendRequest {
        group_id,
        user_id,
        needs: 0,
    };
    let checked = api.check_send(call(Actor::System, check)).await;
    checked.map(|_| ()).map_err(|status| status.code())
}

#[tokio::test]
async fn member_ids_read_before_an_import_are_not_cached_after_it() {
    let (api, shared, mut waits, g) = racing().await;

    // A notice's audience is asked for: the owner alone, held on its way into the cache.
    let early = tokio::spawn({
        let api = api.clone();
        async move { member_ids(&api, g).await }
    });
    waits.recv().await.expect("the fill reaches the cache");
    // Meanwhile the members are imported (committed, then the group forgotten).
    import(&api, g, vec![5, 6]).await;
    shared.permits.add_permits(1);
    assert_eq!(early.await.unwrap(), vec![1], "read before the import");

    // Every later call sees the import (a fill of its own goes through).
    shared.permits.add_permits(2);
    assert_eq!(member_ids(&api, g).await, vec![1, 5, 6]);
    assert_eq!(member_ids(&api, g).await, vec![1, 5, 6]);
}

#[tokio::test]
async fn a_refusal_read_before_an_import_is_not_remembered_after_it() {
    let (api, shared, mut waits, g) = racing().await;

    // User 5 is not a member yet: the gate's load is held on its way into the caches.
    let early = tokio::spawn({
        let api = api.clone();
        async move { check_send(&api, g, 5).await }
    });
    waits.recv().await.expect("the fill reaches the cache");
    import(&api, g, vec![5]).await;
    shared.permits.add_permits(1);
    assert!(early.await.unwrap().is_err(), "read before the import");

    // Neither the shared cache nor the gate's own keeps the refusal.
    shared.permits.add_permits(1);
    assert_eq!(check_send(&api, g, 5).await, Ok(()));
}
