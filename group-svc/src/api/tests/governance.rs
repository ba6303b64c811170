//! The operation log read by the group's owner and admins or by operators, bans by the
//! system actor, and what an ownership transfer leaves the old owner.

use tonic::Code;

use super::*;

fn page(g: i64, before_version: i64, limit: u32) -> pb::ListOperationsRequest {
    pb::ListOperationsRequest {
        group_id: g,
        before_version,
        limit,
    }
}

fn banned(g: i64, banned: bool) -> Request<pb::SetBannedRequest> {
    call(
        Actor::System,
        pb::SetBannedRequest {
            group_id: g,
            banned,
        },
    )
}

async fn role_of(api: &GroupApi, g: i64, user_id: i64) -> i32 {
    api.get_members(user(
        user_id,
        pb::GetMembersRequest {
            group_id: g,
            user_ids: vec![user_id],
        },
    ))
    .await
    .unwrap()
    .into_inner()
    .members[0]
        .role
}

#[tokio::test]
async fn the_operation_log_pages_newest_first_for_admins_and_operators_only() {
    let api = api().await;
    let g = team(&api).await;
    let mute = pb::MuteAllRequest {
        group_id: g,
        muted: true,
    };
    api.mute_all(user(1, mute)).await.unwrap();
    let first = api
        .list_operations(user(2, page(g, 0, 2)))
        .await
        .unwrap()
        .into_inner();
    let ops: Vec<(&str, i64, Vec<i64>)> = first
        .operations
        .iter()
        .map(|o| (o.op.as_str(), o.operator_id, o.target_ids.clone()))
        .collect();
    assert_eq!(ops, vec![("mute_all", 1, vec![]), ("admin", 1, vec![2])]);
    let versions: Vec<i64> = first.operations.iter().map(|o| o.version).collect();
    assert_eq!(versions, vec![3, 2], "newest first");
    assert_eq!(first.next_before_version, 2);
    let rest = api
        .list_operations(call(Actor::System, page(g, first.next_before_version, 2)))
        .await
        .unwrap()
        .into_inner();
    let ops: Vec<(&str, i64)> = rest
        .operations
        .iter()
        .map(|o| (o.op.as_str(), o.version))
        .collect();
    assert_eq!(ops, vec![("created", 1)], "the system actor reads it too");
    assert_eq!(rest.next_before_version, 0, "no page after the last");

    let refused = api
        .list_operations(user(3, page(g, 0, 10)))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    let stranger = api
        .list_operations(user(9, page(g, 0, 10)))
        .await
        .unwrap_err();
    assert_eq!(stranger.code(), Code::PermissionDenied, "{stranger:?}");
    let too_many = api
        .list_operations(user(1, page(g, 0, 101)))
        .await
        .unwrap_err();
    assert_eq!(too_many.code(), Code::InvalidArgument);
    assert!(too_many.message().starts_with("limit"), "{too_many:?}");
    let negative = api
        .list_operations(user(1, page(g, -1, 10)))
        .await
        .unwrap_err();
    assert_eq!(negative.code(), Code::InvalidArgument);
    assert!(
        negative.message().starts_with("before_version"),
        "{negative:?}"
    );
    let unknown = api
        .list_operations(call(Actor::System, page(g + 1, 0, 10)))
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound, "{unknown:?}");
}

#[tokio::test]
async fn the_system_bans_a_group_once_and_lifts_the_ban_and_users_may_not() {
    let api = api().await;
    let g = team(&api).await;
    let by_user = pb::SetBannedRequest {
        group_id: g,
        banned: true,
    };
    let refused = api.set_banned(user(1, by_user)).await.unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "even the owner");

    let group = api.set_banned(banned(g, true)).await.unwrap().into_inner();
    let group = group.group.unwrap();
    assert_eq!(group.status, pb::GroupStatus::Banned as i32);
    let again = api.set_banned(banned(g, true)).await.unwrap().into_inner();
    assert_eq!(
        again.group.unwrap().version,
        group.version,
        "banning a banned group changes nothing"
    );
    let check = || {
        call(
            Actor::System,
            pb::CheckSendRequest {
                group_id: g,
                user_id: 1,
                needs: 0,
            },
        )
    };
    let send = api.check_send(check()).await.unwrap_err();
    assert_eq!(send.code(), Code::PermissionDenied, "{send:?}");
    assert!(send.message().contains("banned"), "{send:?}");
    let rename = pb::UpdateGroupRequest {
        group_id: g,
        name: Some("renamed".into()),
        ..Default::default()
    };
    let edit = api.update_group(user(1, rename)).await.unwrap_err();
    assert_eq!(edit.code(), Code::PermissionDenied, "{edit:?}");

    api.set_banned(banned(g, false)).await.unwrap();
    api.check_send(check()).await.unwrap();
    let log = api
        .list_operations(user(1, page(g, 0, 3)))
        .await
        .unwrap()
        .into_inner();
    let ops: Vec<(&str, i64)> = log
        .operations
        .iter()
        .map(|o| (o.op.as_str(), o.operator_id))
        .collect();
    assert_eq!(ops, vec![("unbanned", 0), ("banned", 0), ("admin", 1)]);

    let dismiss = pb::DismissGroupRequest { group_id: g };
    api.dismiss_group(user(1, dismiss)).await.unwrap();
    let dismissed = api.set_banned(banned(g, true)).await.unwrap_err();
    assert_eq!(dismissed.code(), Code::FailedPrecondition, "{dismissed:?}");
    let missing = api.set_banned(banned(g + 1, true)).await.unwrap_err();
    assert_eq!(missing.code(), Code::NotFound, "{missing:?}");
}

#[tokio::test]
async fn a_transfer_leaves_the_old_owner_a_member_unless_kept_as_admin() {
    let api = api().await;
    let g = team(&api).await;
    let transfer = |from: i64, to: i64, keep_as_admin: bool| {
        user(
            from,
            pb::TransferOwnerRequest {
                group_id: g,
                new_owner_id: to,
                keep_as_admin,
            },
        )
    };
    api.transfer_owner(transfer(1, 3, false)).await.unwrap();
    assert_eq!(role_of(&api, g, 1).await, pb::Role::Member as i32);
    assert_eq!(role_of(&api, g, 3).await, pb::Role::Owner as i32);
    api.transfer_owner(transfer(3, 4, true)).await.unwrap();
    assert_eq!(role_of(&api, g, 3).await, pb::Role::Admin as i32);
    assert_eq!(role_of(&api, g, 4).await, pb::Role::Owner as i32);
}
