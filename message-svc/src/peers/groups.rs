//! group-svc, which the group-send gate asks whether a member may send, and who hears it.

use imesh_kit::grpc::Channel;
use imesh_kit::identity::{Actor, Caller};
use imesh_protos::group::{
    CheckSendRequest, GetGroupRequest, GetMembersRequest, Group, GroupStatus, GroupType,
    ListMyGroupsRequest, Member, MemberIdsRequest, MemberStatus, MembershipRequest,
    group_service_client::GroupServiceClient,
};
use tonic::Code;

use crate::domain::{Audience, GateAnswer, Gated, GroupGate, GroupRefusal, Sender};

/// [`GroupGate`] backed by group-svc's `CheckSend` and `MemberIds`.
pub struct GroupServiceGate {
    client: GroupServiceClient<Channel>,
    caller: Caller,
    /// Groups with more members than this, and every super group, use read fanout.
    write_fanout_max: u32,
}

impl GroupServiceGate {
    pub fn new(channel: Channel, caller: Caller, write_fanout_max: u32) -> Self {
        Self {
            client: GroupServiceClient::new(channel),
            caller,
            write_fanout_max,
        }
    }

    fn read_fanout(&self, kind: GroupType, member_count: u32) -> bool {
        kind == GroupType::Super || member_count > self.write_fanout_max
    }

    /// The audience of a group event once it may go out: the group itself for read fanout,
    /// else every current member.
    async fn audience_of(&self, group: i64, read_fanout: bool) -> Result<Audience, tonic::Status> {
        if read_fanout {
            return Ok(Audience::Group(group));
        }
        let ids = MemberIdsRequest { group_id: group };
        let reply = self
            .client
            .clone()
            .member_ids(self.caller.request(Actor::System, ids))
            .await?;
        Ok(Audience::Users(reply.into_inner().user_ids))
    }

    async fn group(&self, group: i64) -> Result<Group, tonic::Status> {
        let get = GetGroupRequest { group_id: group };
        let reply = self
            .client
            .clone()
            .get_group(self.caller.request(Actor::System, get))
            .await?;
        reply
            .into_inner()
            .group
            .ok_or_else(|| tonic::Status::not_found(format!("group_id: no group {group}")))
    }

    /// `user`'s member row in `group` (current or past), as the system sees it; `None` when
    /// they never were a member or there is no such group.
    async fn membership(&self, group: i64, user: i64) -> anyhow::Result<Option<Member>> {
        let request = MembershipRequest {
            group_id: group,
            user_id: user,
        };
        let mut client = self.client.clone();
        let asked = client.membership(self.caller.request(Actor::System, request));
        match asked.await {
            Ok(reply) => Ok(Some(reply.into_inner())),
            Err(status) if matches!(status.code(), Code::NotFound | Code::PermissionDenied) => {
                Ok(None)
            }
            Err(status) => Err(status.into()),
        }
    }
}

/// group-svc's refusals as the domain's; other failures are failures to ask.
fn refusal(status: tonic::Status) -> anyhow::Result<GateAnswer> {
    let why = match status.code() {
        Code::NotFound => GroupRefusal::NotFound,
        Code::PermissionDenied => GroupRefusal::Forbidden,
        Code::FailedPrecondition => GroupRefusal::Precondition,
        _ => return Err(anyhow::Error::new(status)),
    };
    Ok(Err((why, status.message().to_owned())))
}

#[async_trait::async_trait]
impl GroupGate for GroupServiceGate {
    async fn recipients(
        &self,
        group: i64,
        sender: Sender,
        needs: u32,
    ) -> anyhow::Result<GateAnswer> {
        let (read_fanout, member_count, map_bound) = match sender {
            Sender::User(user) => {
                let check = CheckSendRequest {
                    group_id: group,
                    user_id: user,
                    needs,
                };
                let checked = self
                    .client
                    .clone()
                    .check_send(self.caller.request(Actor::System, check))
                    .await;
                match checked {
                    Ok(reply) => {
                        let reply = reply.into_inner();
                        let read_fanout = self.read_fanout(reply.r#type(), reply.member_count);
                        (read_fanout, reply.member_count, reply.map_bound)
                    }
                    Err(status) => return refusal(status),
                }
            }
            // The system account writes to any live group.
            Sender::System => match self.group(group).await {
                Ok(g) if g.status() == GroupStatus::Normal => {
                    let read_fanout = self.read_fanout(g.r#type(), g.member_count);
                    (read_fanout, g.member_count, 0)
                }
                Ok(_) => {
                    let why = format!("group_id: group {group} is dismissed or banned");
                    return Ok(Err((GroupRefusal::Precondition, why)));
                }
                Err(status) => return refusal(status),
            },
        };
        match self.audience_of(group, read_fanout).await {
            Ok(audience) => Ok(Ok(Gated {
                audience,
                member_count,
                map_bound,
            })),
            Err(status) => refusal(status),
        }
    }

    async fn audience(&self, group: i64) -> anyhow::Result<Audience> {
        let g = self.group(group).await?;
        let read_fanout = self.read_fanout(g.r#type(), g.member_count);
        Ok(self.audience_of(group, read_fanout).await?)
    }

    async fn members_among(
        &self,
        group: i64,
        asker: Sender,
        users: &[i64],
    ) -> anyhow::Result<Vec<i64>> {
        let Sender::User(member) = asker else {
            // GetMembers answers members; the system asks one membership at a time.
            let mut members = Vec::new();
            for user in users {
                if self
                    .visibility(group, *user)
                    .await?
                    .is_some_and(|(_, left)| left.is_none())
                {
                    members.push(*user);
                }
            }
            return Ok(members);
        };
        let request = GetMembersRequest {
            group_id: group,
            user_ids: users.to_vec(),
        };
        let reply = self
            .client
            .clone()
            .get_members(self.caller.request(Actor::User(member), request))
            .await?;
        Ok(reply
            .into_inner()
            .members
            .into_iter()
            .filter(|m| m.status() == MemberStatus::Normal)
            .map(|m| m.user_id)
            .collect())
    }

    async fn holds(&self, group: i64, user: i64, permission: u32) -> anyhow::Result<bool> {
        Ok(self.membership(group, user).await?.is_some_and(|member| {
            member.status() == MemberStatus::Normal && member.permissions & permission == permission
        }))
    }

    async fn groups_of(&self, user: i64, max: usize) -> anyhow::Result<Vec<i64>> {
        let mut groups = Vec::new();
        let mut cursor = 0;
        while groups.len() < max {
            let request = ListMyGroupsRequest { cursor, limit: 200 };
            let page = self
                .client
                .clone()
                .list_my_groups(self.caller.request(Actor::User(user), request))
                .await?
                .into_inner();
            groups.extend(page.groups.iter().map(|g| g.group_id));
            if page.next_cursor == 0 {
                break;
            }
            cursor = page.next_cursor;
        }
        groups.truncate(max);
        Ok(groups)
    }

    async fn visibility(
        &self,
        group: i64,
        user: i64,
    ) -> anyhow::Result<Option<(i64, Option<i64>)>> {
        Ok(self.membership(group, user).await?.map(|member| {
            let until = (member.status() != MemberStatus::Normal).then_some(member.leave_seq);
            (member.join_seq, until)
        }))
    }
}
