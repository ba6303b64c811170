//! gRPC handlers of group-svc: read the caller, parse the request, call the domain, convert
//! back ([`convert`]). Wire types stop here.

pub mod convert;

use std::sync::Arc;

use imesh_kit::identity::{Actor, actor};
use imesh_protos::group::{self as pb, group_service_server::GroupService};
use tonic::{Request, Response, Status};

use crate::domain::{Gate, Groups, groups::NewGroup, roster::Roster, rules::InfoEdit};
use convert::{
    group_reply, group_to_proto, kind_to_proto, member_to_proto, members_reply, role_to_proto,
    status,
};

pub struct GroupApi {
    groups: Arc<Groups>,
    gate: Arc<Gate>,
    roster: Arc<Roster>,
}

impl GroupApi {
    pub fn new(groups: Arc<Groups>, gate: Arc<Gate>, roster: Arc<Roster>) -> Self {
        Self {
            groups,
            gate,
            roster,
        }
    }

    pub fn gate(&self) -> Arc<Gate> {
        self.gate.clone()
    }

    pub fn roster(&self) -> Arc<Roster> {
        self.roster.clone()
    }

    pub fn groups(&self) -> Arc<Groups> {
        self.groups.clone()
    }
}

type Reply<T> = Result<Response<T>, Status>;

fn user_call<T>(request: Request<T>) -> Result<(i64, T), Status> {
    let me = actor(&request)?.user()?;
    Ok((me, request.into_inner()))
}

fn system_call<T>(request: Request<T>) -> Result<T, Status> {
    actor(&request)?.require_system()?;
    Ok(request.into_inner())
}

fn ok<T>(value: T) -> Reply<T> {
    Ok(Response::new(value))
}

#[tonic::async_trait]
impl GroupService for GroupApi {
    async fn create_group(
        &self,
        request: Request<pb::CreateGroupRequest>,
    ) -> Reply<pb::CreateGroupResponse> {
        let (me, r) = user_call(request)?;
        let new = NewGroup {
            kind: convert::kind_from_proto(r.r#type)?,
            join_mode: convert::join_mode_from_proto("join_mode", r.join_mode)?,
            name: r.name,
            member_ids: r.member_ids,
            max_member: r.max_member,
            avatar_url: r.avatar_url,
            announcement: r.announcement,
        };
        let (group, members) = self.groups.create(me, new).await.map_err(status)?;
        ok(pb::CreateGroupResponse {
            group: Some(group_to_proto(&group)),
            members: members.iter().map(member_to_proto).collect(),
        })
    }

    async fn get_group(
        &self,
        request: Request<pb::GetGroupRequest>,
    ) -> Reply<pb::GetGroupResponse> {
        actor(&request)?;
        let group = self
            .groups
            .get(request.into_inner().group_id)
            .await
            .map_err(status)?;
        ok(pb::GetGroupResponse {
            group: Some(group_to_proto(&group)),
        })
    }

    async fn update_group(
        &self,
        request: Request<pb::UpdateGroupRequest>,
    ) -> Reply<pb::GroupReply> {
        let (me, r) = user_call(request)?;
        let join_mode = r
            .join_mode
            .map(|m| convert::join_mode_from_proto("join_mode", m))
            .transpose()?;
        let edit = InfoEdit {
            name: r.name,
            avatar_url: r.avatar_url,
            announcement: r.announcement,
            join_mode,
        };
        ok(group_reply(
            self.groups
                .update(me, r.group_id, edit)
                .await
                .map_err(status)?,
        ))
    }

    async fn invite_members(
        &self,
        request: Request<pb::InviteMembersRequest>,
    ) -> Reply<pb::MembersReply> {
        let (me, pb::InviteMembersRequest { group_id, user_ids }) = user_call(request)?;
        ok(members_reply(
            self.groups
                .invite(me, group_id, &user_ids)
                .await
                .map_err(status)?,
        ))
    }

    async fn join_group(
        &self,
        request: Request<pb::JoinGroupRequest>,
    ) -> Reply<pb::JoinGroupResponse> {
        let (me, pb::JoinGroupRequest { group_id, message }) = user_call(request)?;
        let (group, member) = self
            .groups
            .join(me, group_id, &message)
            .await
            .map_err(status)?;
        ok(pb::JoinGroupResponse {
            group: Some(group_to_proto(&group)),
            pending: member.is_none(),
            member: member.as_ref().map(member_to_proto),
        })
    }

    async fn review_join_request(
        &self,
        request: Request<pb::ReviewJoinRequestRequest>,
    ) -> Reply<pb::MembersReply> {
        let (
            me,
            pb::ReviewJoinRequestRequest {
                group_id,
                user_id,
                approve,
            },
        ) = user_call(request)?;
        ok(members_reply(
            self.groups
                .review(me, group_id, user_id, approve)
                .await
                .map_err(status)?,
        ))
    }

    async fn list_join_requests(
        &self,
        request: Request<pb::ListJoinRequestsRequest>,
    ) -> Reply<pb::ListJoinRequestsResponse> {
        let (me, pb::ListJoinRequestsRequest { group_id }) = user_call(request)?;
        let requests = self
            .groups
            .join_requests(me, group_id)
            .await
            .map_err(status)?;
        ok(pb::ListJoinRequestsResponse {
            requests: requests.iter().map(convert::request_to_proto).collect(),
        })
    }

    async fn quit_group(&self, request: Request<pb::QuitGroupRequest>) -> Reply<pb::GroupReply> {
        let (me, pb::QuitGroupRequest { group_id }) = user_call(request)?;
        ok(group_reply(
            self.groups.quit(me, group_id).await.map_err(status)?,
        ))
    }

    async fn kick_members(
        &self,
        request: Request<pb::KickMembersRequest>,
    ) -> Reply<pb::MembersReply> {
        let (me, pb::KickMembersRequest { group_id, user_ids }) = user_call(request)?;
        ok(members_reply(
            self.groups
                .kick(me, group_id, &user_ids)
                .await
                .map_err(status)?,
        ))
    }

    async fn set_admin(&self, request: Request<pb::SetAdminRequest>) -> Reply<pb::MembersReply> {
        let (
            me,
            pb::SetAdminRequest {
                group_id,
                user_id,
                admin,
            },
        ) = user_call(request)?;
        ok(members_reply(
            self.groups
                .set_admin(me, group_id, user_id, admin)
                .await
                .map_err(status)?,
        ))
    }

    async fn transfer_owner(
        &self,
        request: Request<pb::TransferOwnerRequest>,
    ) -> Reply<pb::MembersReply> {
        let (
            me,
            pb::TransferOwnerRequest {
                group_id,
                new_owner_id,
                keep_as_admin,
            },
        ) = user_call(request)?;
        ok(members_reply(
            self.groups
                .transfer(me, group_id, new_owner_id, keep_as_admin)
                .await
                .map_err(status)?,
        ))
    }

    async fn mute_member(
        &self,
        request: Request<pb::MuteMemberRequest>,
    ) -> Reply<pb::MembersReply> {
        let (
            me,
            pb::MuteMemberRequest {
                group_id,
                user_id,
                until_ms,
            },
        ) = user_call(request)?;
        ok(members_reply(
            self.groups
                .mute(me, group_id, user_id, until_ms)
                .await
                .map_err(status)?,
        ))
    }

    async fn mute_all(&self, request: Request<pb::MuteAllRequest>) -> Reply<pb::GroupReply> {
        let (me, pb::MuteAllRequest { group_id, muted }) = user_call(request)?;
        ok(group_reply(
            self.groups
                .mute_all(me, group_id, muted)
                .await
                .map_err(status)?,
        ))
    }

    async fn dismiss_group(
        &self,
        request: Request<pb::DismissGroupRequest>,
    ) -> Reply<pb::GroupReply> {
        let (me, pb::DismissGroupRequest { group_id }) = user_call(request)?;
        ok(group_reply(
            self.groups.dismiss(me, group_id).await.map_err(status)?,
        ))
    }

    async fn set_alias(&self, request: Request<pb::SetAliasRequest>) -> Reply<pb::MembersReply> {
        let (me, pb::SetAliasRequest { group_id, alias }) = user_call(request)?;
        ok(members_reply(
            self.groups
                .set_alias(me, group_id, &alias)
                .await
                .map_err(status)?,
        ))
    }

    async fn list_my_groups(
        &self,
        request: Request<pb::ListMyGroupsRequest>,
    ) -> Reply<pb::ListMyGroupsResponse> {
        let (me, pb::ListMyGroupsRequest { cursor, limit }) = user_call(request)?;
        let (groups, next_cursor) = self
            .groups
            .my_groups(me, cursor, limit)
            .await
            .map_err(status)?;
        ok(pb::ListMyGroupsResponse {
            groups: groups.iter().map(group_to_proto).collect(),
            next_cursor,
        })
    }

    async fn list_members(
        &self,
        request: Request<pb::ListMembersRequest>,
    ) -> Reply<pb::ListMembersResponse> {
        let (
            me,
            pb::ListMembersRequest {
                group_id,
                cursor,
                limit,
            },
        ) = user_call(request)?;
        let (members, next_cursor) = self
            .groups
            .members_page(me, group_id, cursor, limit)
            .await
            .map_err(status)?;
        ok(pb::ListMembersResponse {
            members: members.iter().map(member_to_proto).collect(),
            next_cursor,
        })
    }

    async fn get_members(
        &self,
        request: Request<pb::GetMembersRequest>,
    ) -> Reply<pb::ListMembersResponse> {
        let (me, pb::GetMembersRequest { group_id, user_ids }) = user_call(request)?;
        let members = self
            .groups
            .members(me, group_id, &user_ids)
            .await
            .map_err(status)?;
        ok(pb::ListMembersResponse {
            members: members.iter().map(member_to_proto).collect(),
            next_cursor: 0,
        })
    }

    async fn search_members(
        &self,
        request: Request<pb::SearchMembersRequest>,
    ) -> Reply<pb::ListMembersResponse> {
        let (
            me,
            pb::SearchMembersRequest {
                group_id,
                query,
                limit,
            },
        ) = user_call(request)?;
        let members = self
            .groups
            .search(me, group_id, &query, limit)
            .await
            .map_err(status)?;
        ok(pb::ListMembersResponse {
            members: members.iter().map(member_to_proto).collect(),
            next_cursor: 0,
        })
    }

    async fn active_members(
        &self,
        request: Request<pb::ActiveMembersRequest>,
    ) -> Reply<pb::ListMembersResponse> {
        let (me, pb::ActiveMembersRequest { group_id, limit }) = user_call(request)?;
        let members = self
            .groups
            .active(me, group_id, limit)
            .await
            .map_err(status)?;
        ok(pb::ListMembersResponse {
            members: members.iter().map(member_to_proto).collect(),
            next_cursor: 0,
        })
    }

    async fn check_send(
        &self,
        request: Request<pb::CheckSendRequest>,
    ) -> Reply<pb::CheckSendResponse> {
        let pb::CheckSendRequest {
            group_id,
            user_id,
            needs,
        } = system_call(request)?;
        let allowed = self
            .gate
            .check(group_id, user_id, needs)
            .await
            .map_err(status)?;
        ok(pb::CheckSendResponse {
            role: role_to_proto(allowed.role) as i32,
            map_id: allowed.map_id,
            version: allowed.version,
            r#type: kind_to_proto(allowed.group.kind) as i32,
            member_count: allowed.group.member_count,
            join_seq: allowed.join_seq,
            map_bound: allowed.group.next_map_id,
        })
    }

    async fn member_map(
        &self,
        request: Request<pb::MemberMapRequest>,
    ) -> Reply<pb::MemberMapResponse> {
        let pb::MemberMapRequest { group_id } = system_call(request)?;
        let (members, version) = self.groups.member_map(group_id).await.map_err(status)?;
        ok(pb::MemberMapResponse {
            user_ids: members.iter().map(|m| m.user_id).collect(),
            map_ids: members.iter().map(|m| m.map_id).collect(),
            roles: members
                .iter()
                .map(|m| role_to_proto(m.role) as i32)
                .collect(),
            version,
        })
    }

    async fn member_ids(
        &self,
        request: Request<pb::MemberIdsRequest>,
    ) -> Reply<pb::MemberIdsResponse> {
        let pb::MemberIdsRequest { group_id } = system_call(request)?;
        let (user_ids, version) = self.groups.member_ids(group_id).await.map_err(status)?;
        ok(pb::MemberIdsResponse { user_ids, version })
    }

    async fn membership(&self, request: Request<pb::MembershipRequest>) -> Reply<pb::Member> {
        let pb::MembershipRequest { group_id, user_id } = system_call(request)?;
        let member = self
            .groups
            .membership(group_id, user_id)
            .await
            .map_err(status)?;
        ok(member_to_proto(&member))
    }

    async fn rename_members(
        &self,
        request: Request<pb::RenameMembersRequest>,
    ) -> Reply<pb::RenameMembersResponse> {
        let pb::RenameMembersRequest { names } = system_call(request)?;
        let names = names
            .into_iter()
            .map(|n| (n.user_id, n.nickname, n.version))
            .collect();
        let renamed = self.groups.rename(names).await.map_err(status)?;
        ok(pb::RenameMembersResponse {
            renamed: renamed as u32,
        })
    }

    async fn import_members(
        &self,
        request: Request<pb::ImportMembersRequest>,
    ) -> Reply<pb::ImportMembersResponse> {
        let pb::ImportMembersRequest { group_id, user_ids } = system_call(request)?;
        let added = self
            .groups
            .import(group_id, &user_ids)
            .await
            .map_err(status)?;
        ok(pb::ImportMembersResponse { added })
    }

    async fn set_banned(&self, request: Request<pb::SetBannedRequest>) -> Reply<pb::GroupReply> {
        let pb::SetBannedRequest { group_id, banned } = system_call(request)?;
        ok(group_reply(
            self.groups
                .set_banned(group_id, banned)
                .await
                .map_err(status)?,
        ))
    }

    async fn list_operations(
        &self,
        request: Request<pb::ListOperationsRequest>,
    ) -> Reply<pb::ListOperationsResponse> {
        let me = match actor(&request)? {
            Actor::User(me) => Some(me),
            Actor::System => None,
        };
        let pb::ListOperationsRequest {
            group_id,
            before_version,
            limit,
        } = request.into_inner();
        let (operations, next_before_version) = self
            .groups
            .operations(me, group_id, before_version, limit)
            .await
            .map_err(status)?;
        ok(pb::ListOperationsResponse {
            operations: operations
                .into_iter()
                .map(convert::operation_to_proto)
                .collect(),
            next_before_version,
        })
    }

    async fn recount_members(
        &self,
        request: Request<pb::RecountMembersRequest>,
    ) -> Reply<pb::RecountMembersResponse> {
        let pb::RecountMembersRequest { group_id } = system_call(request)?;
        let (stored, counted) = self.groups.recount(group_id).await.map_err(status)?;
        ok(pb::RecountMembersResponse { stored, counted })
    }
}

#[cfg(test)]
mod tests;
