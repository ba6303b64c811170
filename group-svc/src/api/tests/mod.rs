//! Handler tests over SQLite: every refusal is the precise status, and changes nothing.

mod fills;
mod governance;
mod recount;
mod roster;

use std::sync::Arc;

use imesh_kit::{
    config::{AuthConfig, Secret},
    identity::Actor,
    testing,
};
use tonic::Code;

use super::*;
use crate::{
    Config,
    domain::{Nicknames, SeqSource},
};

/// Seq 11 for every conversation; user `n` is nicknamed "User n".
struct FixedSeq;

#[async_trait::async_trait]
impl SeqSource for FixedSeq {
    async fn current_seq(&self, _: &str) -> anyhow::Result<i64> {
        Ok(11)
    }
}

#[async_trait::async_trait]
impl Nicknames for FixedSeq {
    async fn nicknames(
        &self,
        users: &[i64],
    ) -> anyhow::Result<std::collections::HashMap<i64, String>> {
        Ok(users.iter().map(|u| (*u, format!("User {u}"))).collect())
    }
}

async fn api() -> GroupApi {
    api_with(Arc::new(crate::store::memory::MemoryRosters::default())).await
}

async fn api_with(rosters: Arc<dyn crate::domain::ports::Rosters>) -> GroupApi {
    api_over(rosters).await.0
}

/// The API with the given rosters, and its database.
async fn api_over(
    rosters: Arc<dyn crate::domain::ports::Rosters>,
) -> (GroupApi, sea_orm::DatabaseConnection) {
    let shared = Arc::new(crate::store::memory::MemoryGroupCache::new(
        std::time::Duration::from_secs(60),
    ));
    api_caching(shared, rosters).await
}

/// The API over the given shared cache and rosters, and its database.
async fn api_caching(
    shared: Arc<dyn crate::domain::GroupCache>,
    rosters: Arc<dyn crate::domain::ports::Rosters>,
) -> (GroupApi, sea_orm::DatabaseConnection) {
    let auth = AuthConfig {
        internal_secret: Secret::new("internal-secret-0123456789"),
        jwt_secret: Secret::new("jwt-secret-0123456789abcdef"),
        ..AuthConfig::default()
    };
    let db_config = testing::fresh_sql(testing::Backend::Sqlite).await.unwrap();
    let db = imesh_kit::sql::connect_and_migrate::<crate::store::sql::Migrator>(&db_config)
        .await
        .unwrap();
    let peers = (Arc::new(FixedSeq) as _, Arc::new(FixedSeq) as _);
    let (api, _) = crate::wire(
        &Config::default(),
        &auth,
        (Arc::new(imesh_kit::ids::Snowflake::new(4)), None),
        db.clone(),
        peers,
        (shared, rosters),
    )
    .unwrap();
    (api, db)
}

fn call<T>(actor: Actor, message: T) -> Request<T> {
    let mut request = Request::new(message);
    request.extensions_mut().insert(actor);
    request
}

fn user<T>(id: i64, message: T) -> Request<T> {
    call(Actor::User(id), message)
}

/// Group owned by 1 with admin 2 and members 3 and 4.
async fn team(api: &GroupApi) -> i64 {
    let create = pb::CreateGroupRequest {
        name: "team".into(),
        member_ids: vec![2, 3, 4],
        ..Default::default()
    };
    let g = api
        .create_group(user(1, create))
        .await
        .unwrap()
        .into_inner()
        .group
        .unwrap()
        .group_id;
    api.set_admin(user(
        1,
        pb::SetAdminRequest {
            group_id: g,
            user_id: 2,
            admin: true,
        },
    ))
    .await
    .unwrap();
    g
}

async fn member_ids(api: &GroupApi, g: i64) -> Vec<i64> {
    let mut ids = api
        .member_ids(call(Actor::System, pb::MemberIdsRequest { group_id: g }))
        .await
        .unwrap()
        .into_inner()
        .user_ids;
    ids.sort();
    ids
}

async fn version(api: &GroupApi, g: i64) -> i64 {
    api.get_group(user(1, pb::GetGroupRequest { group_id: g }))
        .await
        .unwrap()
        .into_inner()
        .group
        .unwrap()
        .version
}

#[tokio::test]
async fn refusals_carry_the_precise_status_and_change_nothing() {
    let api = api().await;
    let g = team(&api).await;
    let before = version(&api, g).await;
    let kick = |by: i64, target: i64| {
        user(
            by,
            pb::KickMembersRequest {
                group_id: g,
                user_ids: vec![target],
            },
        )
    };
    assert_eq!(
        api.kick_members(kick(3, 4)).await.unwrap_err().code(),
        Code::PermissionDenied,
        "a member lacks KICK"
    );
    assert_eq!(
        api.kick_members(kick(2, 1)).await.unwrap_err().code(),
        Code::PermissionDenied,
        "an admin on the owner"
    );
    assert_eq!(
        api.kick_members(kick(9, 4)).await.unwrap_err().code(),
        Code::PermissionDenied,
        "a non-member"
    );
    let mute_owner = pb::MuteMemberRequest {
        group_id: g,
        user_id: 1,
        until_ms: i64::MAX,
    };
    assert_eq!(
        api.mute_member(user(2, mute_owner))
            .await
            .unwrap_err()
            .code(),
        Code::PermissionDenied
    );
    let list = pb::ListMembersRequest {
        group_id: g,
        cursor: 0,
        limit: 0,
    };
    assert_eq!(
        api.list_members(user(9, list)).await.unwrap_err().code(),
        Code::PermissionDenied
    );
    assert_eq!(
        api.quit_group(user(1, pb::QuitGroupRequest { group_id: g }))
            .await
            .unwrap_err()
            .code(),
        Code::FailedPrecondition
    );
    assert_eq!(
        (version(&api, g).await, member_ids(&api, g).await),
        (before, vec![1, 2, 3, 4]),
        "nothing changed"
    );

    api.kick_members(kick(2, 4)).await.unwrap();
    assert_eq!(
        api.kick_members(kick(2, 4)).await.unwrap_err().code(),
        Code::FailedPrecondition,
        "already kicked"
    );
    let check = |u: i64| {
        call(
            Actor::System,
            pb::CheckSendRequest {
                group_id: g,
                user_id: u,
                needs: 0,
            },
        )
    };
    assert_eq!(
        api.check_send(check(4)).await.unwrap_err().code(),
        Code::PermissionDenied,
        "the kicked cannot send"
    );
    let allowed = api.check_send(check(3)).await.unwrap().into_inner();
    assert_eq!((allowed.role(), allowed.map_id), (pb::Role::Member, 2));

    api.dismiss_group(user(1, pb::DismissGroupRequest { group_id: g }))
        .await
        .unwrap();
    let invite = pb::InviteMembersRequest {
        group_id: g,
        user_ids: vec![5],
    };
    assert_eq!(
        api.invite_members(user(1, invite))
            .await
            .unwrap_err()
            .code(),
        Code::FailedPrecondition
    );
    assert_eq!(
        api.check_send(check(3)).await.unwrap_err().code(),
        Code::FailedPrecondition,
        "the gate forgot the group"
    );
    let unknown = pb::GetGroupRequest { group_id: 424_242 };
    assert_eq!(
        api.get_group(user(1, unknown)).await.unwrap_err().code(),
        Code::NotFound
    );
}

#[tokio::test]
async fn bad_input_and_wrong_actors_are_refused_by_field() {
    let api = api().await;
    let field = |s: Status| {
        (
            s.code(),
            s.message().split(':').next().unwrap_or_default().to_owned(),
        )
    };
    let invalid = |f: &str| (Code::InvalidArgument, f.to_owned());
    let unnamed = pb::CreateGroupRequest {
        name: " ".into(),
        ..Default::default()
    };
    assert_eq!(
        field(api.create_group(user(1, unnamed)).await.unwrap_err()),
        invalid("name")
    );
    let bad_ids = pb::CreateGroupRequest {
        name: "x".into(),
        member_ids: vec![0],
        ..Default::default()
    };
    assert_eq!(
        field(api.create_group(user(1, bad_ids)).await.unwrap_err()),
        invalid("member_ids")
    );
    let bad_mode = pb::CreateGroupRequest {
        name: "x".into(),
        join_mode: 9,
        ..Default::default()
    };
    assert_eq!(
        field(api.create_group(user(1, bad_mode)).await.unwrap_err()),
        invalid("join_mode")
    );
    let g = team(&api).await;
    let past = pb::MuteMemberRequest {
        group_id: g,
        user_id: 3,
        until_ms: 1,
    };
    assert_eq!(
        field(api.mute_member(user(1, past)).await.unwrap_err()),
        invalid("until_ms")
    );
    let as_user = pb::CheckSendRequest {
        group_id: g,
        user_id: 3,
        needs: 0,
    };
    assert_eq!(
        api.check_send(user(3, as_user)).await.unwrap_err().code(),
        Code::PermissionDenied,
        "internal only"
    );
    let as_system = pb::CreateGroupRequest {
        name: "x".into(),
        ..Default::default()
    };
    assert_eq!(
        api.create_group(call(Actor::System, as_system))
            .await
            .unwrap_err()
            .code(),
        Code::PermissionDenied
    );
}

#[tokio::test]
async fn join_modes_and_reviews_work_through_the_api_and_super_groups_hide_their_lists() {
    let api = api().await;
    let create = pb::CreateGroupRequest {
        name: "open".into(),
        join_mode: pb::JoinMode::Approval as i32,
        ..Default::default()
    };
    let g = api
        .create_group(user(1, create))
        .await
        .unwrap()
        .into_inner()
        .group
        .unwrap()
        .group_id;
    let join = api
        .join_group(user(
            7,
            pb::JoinGroupRequest {
                group_id: g,
                message: "hi".into(),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(join.pending && join.member.is_none());
    let pending = api
        .list_join_requests(user(1, pb::ListJoinRequestsRequest { group_id: g }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        pending
            .requests
            .iter()
            .map(|r| r.user_id)
            .collect::<Vec<_>>(),
        vec![7]
    );
    let review = pb::ReviewJoinRequestRequest {
        group_id: g,
        user_id: 7,
        approve: true,
    };
    let approved = api
        .review_join_request(user(1, review))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (approved.members[0].user_id, approved.members[0].join_seq),
        (7, 11),
        "join_seq from the conversation"
    );

    let create = pb::CreateGroupRequest {
        name: "all hands".into(),
        r#type: pb::GroupType::Super as i32,
        ..Default::default()
    };
    let big = api
        .create_group(user(1, create))
        .await
        .unwrap()
        .into_inner()
        .group
        .unwrap();
    assert_eq!(big.max_member, 100_000);
    // Duplicates count once.
    let mut user_ids: Vec<i64> = (2..=301).collect();
    user_ids.extend([2, 3]);
    let import = pb::ImportMembersRequest {
        group_id: big.group_id,
        user_ids,
    };
    assert_eq!(
        api.import_members(call(Actor::System, import))
            .await
            .unwrap()
            .into_inner()
            .added,
        300
    );
    let ids = api
        .member_ids(call(
            Actor::System,
            pb::MemberIdsRequest {
                group_id: big.group_id,
            },
        ))
        .await;
    assert_eq!(
        ids.unwrap_err().code(),
        Code::FailedPrecondition,
        "no full list of a super group"
    );
    let page = pb::ListMembersRequest {
        group_id: big.group_id,
        cursor: 0,
        limit: 100,
    };
    let first = api.list_members(user(5, page)).await.unwrap().into_inner();
    assert_eq!((first.members.len(), first.next_cursor), (100, 100));
}

#[tokio::test]
async fn imports_are_bounded_by_the_member_limit_and_memberships_of_strangers_are_not_found() {
    let api = api().await;
    let create = pb::CreateGroupRequest {
        name: "small".into(),
        max_member: 3,
        ..Default::default()
    };
    let g = api
        .create_group(user(1, create))
        .await
        .unwrap()
        .into_inner()
        .group
        .unwrap()
        .group_id;
    let over = pb::ImportMembersRequest {
        group_id: g,
        user_ids: vec![2, 3, 4],
    };
    assert_eq!(
        api.import_members(call(Actor::System, over))
            .await
            .unwrap_err()
            .code(),
        Code::FailedPrecondition
    );
    assert_eq!(member_ids(&api, g).await, vec![1], "nothing was added");
    let bad = pb::ImportMembersRequest {
        group_id: g,
        user_ids: vec![0],
    };
    assert_eq!(
        api.import_members(call(Actor::System, bad))
            .await
            .unwrap_err()
            .code(),
        Code::InvalidArgument
    );
    let fits = pb::ImportMembersRequest {
        group_id: g,
        user_ids: vec![2, 3, 2],
    };
    assert_eq!(
        api.import_members(call(Actor::System, fits))
            .await
            .unwrap()
            .into_inner()
            .added,
        2
    );
    let stranger = pb::MembershipRequest {
        group_id: g,
        user_id: 9,
    };
    assert_eq!(
        api.membership(call(Actor::System, stranger))
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
    let owner = pb::MembershipRequest {
        group_id: g,
        user_id: 1,
    };
    assert_eq!(
        api.membership(call(Actor::System, owner))
            .await
            .unwrap()
            .into_inner()
            .role(),
        pb::Role::Owner
    );
}

#[tokio::test]
async fn member_maps_list_current_members_by_map_id_and_rejoins_get_a_new_map_id() {
    let api = api().await;
    let g = team(&api).await;
    let map = async |api: &GroupApi| {
        let request = call(Actor::System, pb::MemberMapRequest { group_id: g });
        api.member_map(request).await.map(|r| r.into_inner())
    };
    let before = map(&api).await.unwrap();
    assert_eq!(before.user_ids, vec![1, 2, 3, 4]);
    assert_eq!(before.map_ids, vec![0, 1, 2, 3]);
    let roles: Vec<pb::Role> = before.roles().collect();
    assert_eq!(roles[..2], [pb::Role::Owner, pb::Role::Admin]);
    let bound = async |api: &GroupApi, u: i64| {
        let request = call(
            Actor::System,
            pb::CheckSendRequest {
                group_id: g,
                user_id: u,
                needs: 0,
            },
        );
        api.check_send(request)
            .await
            .unwrap()
            .into_inner()
            .map_bound
    };
    assert_eq!(
        bound(&api, 3).await,
        4,
        "map ids 0–3 were given before the send"
    );

    api.quit_group(user(3, pb::QuitGroupRequest { group_id: g }))
        .await
        .unwrap();
    let invite = pb::InviteMembersRequest {
        group_id: g,
        user_ids: vec![3],
    };
    api.invite_members(user(1, invite)).await.unwrap();
    let after = map(&api).await.unwrap();
    assert_eq!(
        after.user_ids,
        vec![1, 2, 4, 3],
        "the rejoined member comes last"
    );
    assert_eq!(
        after.map_ids,
        vec![0, 1, 3, 4],
        "with a map id never used before"
    );
    assert!(after.version > before.version);
    assert_eq!(bound(&api, 3).await, 5);

    let unknown = call(Actor::System, pb::MemberMapRequest { group_id: 424_242 });
    assert_eq!(
        api.member_map(unknown).await.unwrap_err().code(),
        Code::NotFound
    );
    let as_user = user(1, pb::MemberMapRequest { group_id: g });
    assert_eq!(
        api.member_map(as_user).await.unwrap_err().code(),
        Code::PermissionDenied,
        "internal callers only"
    );
}

#[tokio::test]
async fn members_are_found_by_nickname_and_renames_apply_in_version_order() {
    let api = api().await;
    let g = team(&api).await;
    let search = async |query: &str| {
        let request = pb::SearchMembersRequest {
            group_id: g,
            query: query.into(),
            limit: 0,
        };
        let found = api.search_members(user(2, request)).await.unwrap();
        let members = found.into_inner().members;
        members
            .iter()
            .map(|m| (m.user_id, m.nickname.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        search("User 3").await,
        vec![(3, "User 3".into())],
        "set at join"
    );
    let invite = pb::InviteMembersRequest {
        group_id: g,
        user_ids: vec![5],
    };
    api.invite_members(user(1, invite)).await.unwrap();
    assert_eq!(search("User 5").await, vec![(5, "User 5".into())]);

    let rename = |user_id, nickname: &str, version| pb::RenameMembersRequest {
        names: vec![pb::MemberName {
            user_id,
            nickname: nickname.into(),
            version,
        }],
    };
    let renamed = api
        .rename_members(call(Actor::System, rename(3, "Carol", 10)))
        .await
        .unwrap();
    assert_eq!(renamed.into_inner().renamed, 1);
    let stale = api
        .rename_members(call(Actor::System, rename(3, "Old", 4)))
        .await
        .unwrap();
    assert_eq!(
        stale.into_inner().renamed,
        0,
        "an older rename arriving late"
    );
    assert_eq!(search("Carol").await, vec![(3, "Carol".into())]);
    assert!(search("User 3").await.is_empty());

    for (bad, field) in [
        (rename(0, "X", 1), "names.user_id"),
        (rename(3, "X", 0), "names.version"),
        (rename(3, &"x".repeat(65), 11), "names.nickname"),
        (pb::RenameMembersRequest { names: vec![] }, "names"),
    ] {
        let err = api
            .rename_members(call(Actor::System, bad))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(err.message().starts_with(field), "{}", err.message());
    }
    let as_user = api
        .rename_members(user(3, rename(3, "Me", 99)))
        .await
        .unwrap_err();
    assert_eq!(
        as_user.code(),
        Code::PermissionDenied,
        "internal callers only"
    );
}
