//! Friend and group operations from clients: every relation-svc and group-svc call a user
//! may make, forwarded as the connected user (the services authorize it as they would any
//! caller). Admin and internal calls are not reachable from here.

use imesh_kit::identity::{Actor, Caller};
use imesh_protos::gateway::{
    GroupCall, GroupResult, RelationCall, RelationResult, group_call, group_result, relation_call,
    relation_result,
};
use tonic::{Request, Status};

use crate::peers::backends::Backends;

fn as_user<T>(caller: &Caller, user: i64, message: T) -> Request<T> {
    caller.request(Actor::User(user), message)
}

/// Forwards one relation call as `user`.
pub async fn relation(
    backends: &Backends,
    user: i64,
    call: RelationCall,
) -> Result<RelationResult, Status> {
    use relation_call::Call as C;
    use relation_result::Result as R;
    let call = call
        .call
        .ok_or_else(|| Status::invalid_argument("relation.call: must be set"))?;
    let (mut c, caller) = (backends.relation.clone(), &backends.caller);
    let result = match call {
        C::GetUsers(m) => R::GetUsers(c.get_users(as_user(caller, user, m)).await?.into_inner()),
        C::UpdateProfile(m) => R::UpdateProfile(
            c.update_profile(as_user(caller, user, m))
                .await?
                .into_inner(),
        ),
        C::SendFriendRequest(m) => R::SendFriendRequest(
            c.send_friend_request(as_user(caller, user, m))
                .await?
                .into_inner(),
        ),
        C::RespondFriendRequest(m) => R::RespondFriendRequest(
            c.respond_friend_request(as_user(caller, user, m))
                .await?
                .into_inner(),
        ),
        C::ListFriendRequests(m) => R::ListFriendRequests(
            c.list_friend_requests(as_user(caller, user, m))
                .await?
                .into_inner(),
        ),
        C::DeleteFriend(m) => R::DeleteFriend(
            c.delete_friend(as_user(caller, user, m))
                .await?
                .into_inner(),
        ),
        C::SetRemark(m) => R::SetRemark(c.set_remark(as_user(caller, user, m)).await?.into_inner()),
        C::Block(m) => R::Block(c.block(as_user(caller, user, m)).await?.into_inner()),
        C::Unblock(m) => R::Unblock(c.unblock(as_user(caller, user, m)).await?.into_inner()),
        C::ListFriends(m) => {
            R::ListFriends(c.list_friends(as_user(caller, user, m)).await?.into_inner())
        }
        C::CheckRelations(m) => R::CheckRelations(
            c.check_relations(as_user(caller, user, m))
                .await?
                .into_inner(),
        ),
    };
    Ok(RelationResult {
        result: Some(result),
    })
}

/// Forwards one group call as `user`.
pub async fn group(backends: &Backends, user: i64, call: GroupCall) -> Result<GroupResult, Status> {
    use group_call::Call as C;
    use group_result::Result as R;
    let call = call
        .call
        .ok_or_else(|| Status::invalid_argument("group.call: must be set"))?;
    let (mut c, caller) = (backends.group.clone(), &backends.caller);
    let result = match call {
        C::CreateGroup(m) => {
            R::CreateGroup(c.create_group(as_user(caller, user, m)).await?.into_inner())
        }
        C::GetGroup(m) => R::GetGroup(c.get_group(as_user(caller, user, m)).await?.into_inner()),
        C::UpdateGroup(m) => {
            R::UpdateGroup(c.update_group(as_user(caller, user, m)).await?.into_inner())
        }
        C::InviteMembers(m) => R::InviteMembers(
            c.invite_members(as_user(caller, user, m))
                .await?
                .into_inner(),
        ),
        C::JoinGroup(m) => R::JoinGroup(c.join_group(as_user(caller, user, m)).await?.into_inner()),
        C::ReviewJoinRequest(m) => R::ReviewJoinRequest(
            c.review_join_request(as_user(caller, user, m))
                .await?
                .into_inner(),
        ),
        C::ListJoinRequests(m) => R::ListJoinRequests(
            c.list_join_requests(as_user(caller, user, m))
                .await?
                .into_inner(),
        ),
        C::QuitGroup(m) => R::QuitGroup(c.quit_group(as_user(caller, user, m)).await?.into_inner()),
        C::KickMembers(m) => {
            R::KickMembers(c.kick_members(as_user(caller, user, m)).await?.into_inner())
        }
        C::SetAdmin(m) => R::SetAdmin(c.set_admin(as_user(caller, user, m)).await?.into_inner()),
        C::TransferOwner(m) => R::TransferOwner(
            c.transfer_owner(as_user(caller, user, m))
                .await?
                .into_inner(),
        ),
        C::MuteMember(m) => {
            R::MuteMember(c.mute_member(as_user(caller, user, m)).await?.into_inner())
        }
        C::MuteAll(m) => R::MuteAll(c.mute_all(as_user(caller, user, m)).await?.into_inner()),
        C::DismissGroup(m) => R::DismissGroup(
            c.dismiss_group(as_user(caller, user, m))
                .await?
                .into_inner(),
        ),
        C::SetAlias(m) => R::SetAlias(c.set_alias(as_user(caller, user, m)).await?.into_inner()),
        C::ListMyGroups(m) => R::ListMyGroups(
            c.list_my_groups(as_user(caller, user, m))
                .await?
                .into_inner(),
        ),
        C::ListMembers(m) => {
            R::ListMembers(c.list_members(as_user(caller, user, m)).await?.into_inner())
        }
        C::GetMembers(m) => {
            R::GetMembers(c.get_members(as_user(caller, user, m)).await?.into_inner())
        }
        C::SearchMembers(m) => R::SearchMembers(
            c.search_members(as_user(caller, user, m))
                .await?
                .into_inner(),
        ),
        C::ActiveMembers(m) => R::ActiveMembers(
            c.active_members(as_user(caller, user, m))
                .await?
                .into_inner(),
        ),
        C::ListOperations(m) => R::ListOperations(
            c.list_operations(as_user(caller, user, m))
                .await?
                .into_inner(),
        ),
    };
    Ok(GroupResult {
        result: Some(result),
    })
}
