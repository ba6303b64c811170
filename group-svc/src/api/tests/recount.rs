//! Member counts that drifted from the member rows are corrected by `RecountMembers` and by
//! the sweep over every group; counts in step are left alone.

use prometheus_client::metrics::counter::Counter;
use sea_orm::ConnectionTrait;

use super::*;
use crate::{domain::recount, store::memory::MemoryRosters};

async fn drift(db: &sea_orm::DatabaseConnection, g: i64, count: u32) {
    let sql = format!("UPDATE im_group SET member_count = {count} WHERE id = {g}");
    db.execute_unprepared(&sql).await.unwrap();
}

async fn member_count(api: &GroupApi, g: i64) -> u32 {
    let get = api.get_group(user(1, pb::GetGroupRequest { group_id: g }));
    get.await.unwrap().into_inner().group.unwrap().member_count
}

#[tokio::test]
async fn recount_members_corrects_a_drifted_count_for_the_system_only() {
    let (api, db) = api_over(Arc::new(MemoryRosters::default())).await;
    let g = team(&api).await;
    let recount = |group_id| pb::RecountMembersRequest { group_id };
    let refused = api.recount_members(user(1, recount(g))).await.unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied);
    let unknown = api.recount_members(call(Actor::System, recount(g + 1)));
    assert_eq!(unknown.await.unwrap_err().code(), Code::NotFound);

    drift(&db, g, 17).await;
    let before = version(&api, g).await;
    let fixed = api.recount_members(call(Actor::System, recount(g))).await;
    let fixed = fixed.unwrap().into_inner();
    assert_eq!((fixed.stored, fixed.counted), (17, 4));
    assert_eq!(member_count(&api, g).await, 4);
    assert_eq!(
        version(&api, g).await,
        before + 1,
        "a correction is a change"
    );
    let again = api.recount_members(call(Actor::System, recount(g))).await;
    let again = again.unwrap().into_inner();
    assert_eq!((again.stored, again.counted), (4, 4));
    assert_eq!(version(&api, g).await, before + 1, "nothing to correct");
}

#[tokio::test]
async fn the_sweep_corrects_every_drifted_group_and_counts_them() {
    let (api, db) = api_over(Arc::new(MemoryRosters::default())).await;
    let groups: Vec<i64> = futures::future::join_all((0..3).map(|_| team(&api))).await;
    drift(&db, groups[0], 0).await;
    drift(&db, groups[2], 400).await;
    let corrected = Counter::default();
    let fixed = recount::sweep(&api.groups(), &corrected).await.unwrap();
    assert_eq!((fixed, corrected.get()), (2, 2));
    for g in groups {
        assert_eq!(member_count(&api, g).await, 4, "group {g}");
    }
    assert_eq!(recount::sweep(&api.groups(), &corrected).await.unwrap(), 0);
}
