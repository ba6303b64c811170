//! The GroupStore contract, run against every SQL backend.

use std::sync::Arc;

use imesh_kit::{error::StoreError, ids::Snowflake, outbox::SqlOutbox, testing};
use tokio::sync::Notify;

mod cache;
pub(crate) mod rosters;

use super::*;
use crate::domain::{
    Error, Group, GroupStatus, GroupStore, GroupType, JoinMode, Member, MemberStatus, Role,
    rules::{self, Now},
};

struct Stores {
    backend: testing::Backend,
    store: Arc<dyn GroupStore>,
    outbox: SqlOutbox,
    db: sea_orm::DatabaseConnection,
}

async fn stores() -> Vec<Stores> {
    let mut out = Vec::new();
    for backend in testing::sql_backends() {
        let config = testing::fresh_sql(backend).await.unwrap();
        let db = imesh_kit::sql::connect_and_migrate::<sql::Migrator>(&config)
            .await
            .unwrap();
        let store = sql::SqlGroupStore::new(
            db.clone(),
            Arc::new(Snowflake::new(5)),
            crate::events::encode,
            Arc::new(Notify::new()),
        );
        out.push(Stores {
            backend,
            store: Arc::new(store),
            outbox: SqlOutbox::new(db.clone(), OUTBOX_TABLE),
            db,
        });
    }
    out
}

const NOW: Now = Now {
    ms: 1_800_000_000_000,
    seq: 7,
};

fn member(group_id: i64, user_id: i64, role: Role, map_id: u32) -> Member {
    Member {
        group_id,
        user_id,
        role,
        map_id,
        alias: format!("alias-{user_id}"),
        nickname: format!("Nick {user_id}"),
        mute_until_ms: 0,
        join_seq: 0,
        leave_seq: 0,
        joined_at_ms: 1,
        status: MemberStatus::Normal,
        extra_permissions: 0,
    }
}

/// Group `id` owned by 1 with members 2 and 3.
async fn group(s: &Stores, id: i64) -> Group {
    let group = Group {
        id,
        kind: GroupType::Normal,
        name: "team".into(),
        owner_id: 1,
        member_count: 3,
        max_member: 2_000,
        join_mode: JoinMode::Invite,
        version: 1,
        next_map_id: 3,
        ..Default::default()
    };
    let members = [
        member(id, 1, Role::Owner, 0),
        member(id, 2, Role::Member, 1),
        member(id, 3, Role::Member, 2),
    ];
    s.store.create(&group, &members).await.unwrap();
    group
}

#[tokio::test]
async fn the_operation_log_pages_newest_first_by_version_on_every_backend() {
    for s in stores().await {
        let b = s.backend;
        group(&s, 10).await;
        for muted in [true, false] {
            s.store
                .change(10, 1, &[], &move |st| rules::mute_all(st, muted))
                .await
                .unwrap();
        }
        s.store
            .change(10, 0, &[], &|st| rules::ban(st, true))
            .await
            .unwrap();
        let newest = s.store.operations(10, i64::MAX, 3).await.unwrap();
        let seen: Vec<(i64, &str, i64)> = newest
            .iter()
            .map(|o| (o.version, o.op.as_str(), o.operator))
            .collect();
        assert_eq!(
            seen,
            vec![(4, "banned", 0), (3, "mute_all", 1), (2, "mute_all", 1)],
            "{b:?}"
        );
        let rest = s.store.operations(10, 2, 3).await.unwrap();
        assert_eq!(rest.len(), 1, "{b:?}: {rest:?}");
        assert_eq!(
            (
                rest[0].version,
                rest[0].op.as_str(),
                rest[0].targets.clone()
            ),
            (1, "created", vec![1, 2, 3]),
            "{b:?}"
        );
        assert!(
            s.store
                .operations(11, i64::MAX, 3)
                .await
                .unwrap()
                .is_empty(),
            "{b:?}: another group's log"
        );
    }
}

#[tokio::test]
async fn a_created_group_reads_back_with_its_members_pages_and_search() {
    for s in stores().await {
        let b = s.backend;
        let created = group(&s, 10).await;
        assert_eq!(s.store.group(10).await.unwrap(), Some(created), "{b:?}");
        assert!(s.store.group(11).await.unwrap().is_none());
        let page: Vec<u32> = s
            .store
            .page(10, 1, 10)
            .await
            .unwrap()
            .iter()
            .map(|m| m.map_id)
            .collect();
        assert_eq!(page, vec![1, 2], "{b:?}");
        let found = s.store.search(10, "alias-3", 10).await.unwrap();
        assert_eq!(
            found.iter().map(|m| m.user_id).collect::<Vec<_>>(),
            vec![3],
            "{b:?}"
        );
        let mut ids = s.store.member_ids(10).await.unwrap();
        ids.sort();
        assert_eq!(ids, vec![1, 2, 3]);
        group(&s, 20).await;
        let mine: Vec<i64> = s
            .store
            .groups_of(2, i64::MAX, 10)
            .await
            .unwrap()
            .iter()
            .map(|g| g.id)
            .collect();
        assert_eq!(mine, vec![20, 10], "{b:?}: newest first");
        assert_eq!(
            s.outbox.pending(10).await.unwrap().len(),
            2,
            "{b:?}: one event per creation"
        );
    }
}

#[tokio::test]
async fn a_change_bumps_the_version_recounts_members_and_logs_one_event() {
    for s in stores().await {
        let b = s.backend;
        group(&s, 10).await;
        let (after, changed) = s
            .store
            .change(10, 1, &[2, 4], &|st| rules::kick(st, &[2], NOW))
            .await
            .unwrap();
        assert_eq!((after.version, after.member_count), (2, 2), "{b:?}");
        assert_eq!(changed[0].status, MemberStatus::Kicked);
        let (after, added) = s
            .store
            .change(10, 1, &[4], &|st| rules::invite(st, &[4], NOW))
            .await
            .unwrap();
        assert_eq!(
            (after.version, after.member_count, after.next_map_id),
            (3, 3, 4),
            "{b:?}"
        );
        assert_eq!((added[0].map_id, added[0].join_seq), (3, 7), "{b:?}");
        // A plan that changes nothing writes nothing, not even the version.
        let (same, _) = s
            .store
            .change(10, 1, &[4], &|st| rules::invite(st, &[4], NOW))
            .await
            .unwrap();
        assert_eq!(same.version, 3, "{b:?}");
        // A refused plan leaves everything as it was.
        let refused = s
            .store
            .change(10, 2, &[3], &|st| rules::kick(st, &[3], NOW))
            .await
            .unwrap_err();
        assert!(matches!(refused, Error::NotMember(_)), "{b:?}: {refused:?}");
        assert_eq!(s.store.group(10).await.unwrap().unwrap().version, 3);
        let unknown = s
            .store
            .change(99, 1, &[], &rules::dismiss)
            .await
            .unwrap_err();
        assert!(
            matches!(unknown, Error::Store(StoreError::NotFound)),
            "{b:?}"
        );
        assert_eq!(
            s.outbox.pending(10).await.unwrap().len(),
            3,
            "{b:?}: created, kicked, invited"
        );
    }
}

#[tokio::test]
async fn join_requests_are_kept_until_reviewed() {
    for s in stores().await {
        let b = s.backend;
        group(&s, 10).await;
        s.store
            .change(10, 1, &[], &|st| {
                rules::update(
                    st,
                    &rules::InfoEdit {
                        join_mode: Some(JoinMode::Approval),
                        ..Default::default()
                    },
                )
            })
            .await
            .unwrap();
        s.store
            .change(10, 8, &[8], &|st| rules::join(st, "let me in", NOW))
            .await
            .unwrap();
        let pending = s.store.join_requests(10).await.unwrap();
        assert_eq!(
            (pending.len(), pending[0].message.as_str()),
            (1, "let me in"),
            "{b:?}"
        );
        let (_, added) = s
            .store
            .change(10, 1, &[8], &|st| rules::review(st, 8, true, NOW))
            .await
            .unwrap();
        assert_eq!(added[0].user_id, 8);
        assert!(s.store.join_requests(10).await.unwrap().is_empty(), "{b:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_transfers_leave_exactly_one_owner() {
    for s in stores().await {
        let b = s.backend;
        group(&s, 10).await;
        let transfers = [2, 3, 2, 3].map(|to| {
            let store = s.store.clone();
            tokio::spawn(async move {
                let actor = 1;
                store
                    .change(10, actor, &[to], &move |st| rules::transfer(st, to, false))
                    .await
            })
        });
        let results: Vec<_> = futures::future::join_all(transfers)
            .await
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(
            results.iter().filter(|r| r.is_ok()).count(),
            1,
            "{b:?}: only the first is still the owner's to give"
        );
        let rows = s.store.members(10, &[1, 2, 3]).await.unwrap();
        let owners: Vec<i64> = rows
            .iter()
            .filter(|m| m.role == Role::Owner)
            .map(|m| m.user_id)
            .collect();
        let group = s.store.group(10).await.unwrap().unwrap();
        assert!(
            owners.len() == 1 && owners[0] == group.owner_id,
            "{b:?}: {owners:?}"
        );
        assert_eq!(group.status, GroupStatus::Normal);
    }
}

#[tokio::test]
async fn a_bulk_import_adds_members_with_dense_map_ids_and_skips_existing_ones() {
    for s in stores().await {
        let b = s.backend;
        group(&s, 10).await;
        let users: Vec<i64> = (2..=1_201).collect();
        assert_eq!(
            s.store.import(10, &users, 5, 1).await.unwrap(),
            1_198,
            "{b:?}: 2 and 3 were members"
        );
        let group = s.store.group(10).await.unwrap().unwrap();
        assert_eq!(
            (group.member_count, group.next_map_id),
            (1_201, 1_201),
            "{b:?}"
        );
        let last = s.store.page(10, 1_200, 10).await.unwrap();
        assert_eq!(
            last.iter()
                .map(|m| (m.map_id, m.user_id))
                .collect::<Vec<_>>(),
            vec![(1_200, 1_201)],
            "{b:?}"
        );
        let roster = s.store.roster(10).await.unwrap();
        assert_eq!(roster.len(), 1_201, "{b:?}");
        assert!(roster.is_sorted(), "{b:?}: by map id");
        assert_eq!(roster[1_200], (1_200, 1_201), "{b:?}: map ids from 0");
    }
}

#[tokio::test]
async fn an_import_past_the_member_limit_adds_nobody() {
    for s in stores().await {
        group(&s, 10).await;
        let users: Vec<i64> = (4..=2_001).collect();
        let err = s.store.import(10, &users, 0, 1).await.unwrap_err();
        assert!(
            matches!(err, StoreError::Conflict(_)),
            "{:?}: {err:?}",
            s.backend
        );
        assert_eq!(
            s.store.group(10).await.unwrap().unwrap().member_count,
            3,
            "{:?}",
            s.backend
        );
        assert_eq!(
            s.store.import(10, &users[..1_997], 0, 1).await.unwrap(),
            1_997,
            "{:?}: up to the limit",
            s.backend
        );
    }
}

#[tokio::test]
async fn search_matches_nicknames_and_renames_only_move_forward_on_every_membership() {
    for s in stores().await {
        let b = s.backend;
        group(&s, 10).await;
        group(&s, 20).await;
        let users = |found: Vec<Member>| found.iter().map(|m| m.user_id).collect::<Vec<_>>();
        assert_eq!(
            users(s.store.search(10, "Nick 2", 10).await.unwrap()),
            vec![2],
            "{b:?}"
        );
        assert_eq!(
            s.store.rename(&[(2, "Zed".into(), 7)]).await.unwrap(),
            2,
            "{b:?}: both of user 2's memberships"
        );
        assert_eq!(
            s.store
                .rename(&[(2, "Stale".into(), 5), (3, "Cy".into(), 9)])
                .await
                .unwrap(),
            2,
            "{b:?}: the older rename of user 2 is ignored"
        );
        assert_eq!(
            users(s.store.search(20, "Zed", 10).await.unwrap()),
            vec![2],
            "{b:?}"
        );
        assert!(
            s.store.search(10, "Stale", 10).await.unwrap().is_empty(),
            "{b:?}"
        );
        assert!(
            s.store.search(10, "Nick 2", 10).await.unwrap().is_empty(),
            "{b:?}"
        );
        let found = s.store.members(10, &[3]).await.unwrap();
        assert_eq!(found[0].nickname, "Cy", "{b:?}");
    }
}

#[tokio::test]
async fn a_recount_corrects_a_drifted_member_count_and_only_then_bumps_the_version() {
    use sea_orm::ConnectionTrait;
    for s in stores().await {
        let b = s.backend;
        let created = group(&s, 10).await;
        group(&s, 20).await;
        assert_eq!(
            s.store.recount(10).await.unwrap(),
            (3, created.clone()),
            "{b:?}: a count in step changes nothing"
        );
        s.db.execute_unprepared("UPDATE im_group SET member_count = 9 WHERE id = 10")
            .await
            .unwrap();
        let (stored, after) = s.store.recount(10).await.unwrap();
        assert_eq!(
            (stored, after.member_count, after.version),
            (9, 3, created.version + 1),
            "{b:?}"
        );
        assert_eq!(s.store.group(10).await.unwrap(), Some(after), "{b:?}");
        assert!(matches!(
            s.store.recount(11).await,
            Err(StoreError::NotFound)
        ));
        assert_eq!(
            s.store.group_ids(0, 10).await.unwrap(),
            vec![10, 20],
            "{b:?}"
        );
        assert_eq!(s.store.group_ids(10, 10).await.unwrap(), vec![20], "{b:?}");
        assert_eq!(s.store.group_ids(0, 1).await.unwrap(), vec![10], "{b:?}");
    }
}
