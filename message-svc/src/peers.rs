//! Clients of the services message-svc asks before storing a message.

use imesh_kit::identity::{Actor, Caller};
use imesh_protos::{
    group::{
        CheckSendRequest, GetGroupRequest, GroupStatus, MemberIdsRequest, MemberStatus,
        MembershipRequest, Permission, group_service_client::GroupServiceClient,
    },
    relation::{
        CheckRelationsRequest, GetUsersRequest, Relation,
        relation_service_client::RelationServiceClient,
    },
};
use tonic::{Code, transport::Channel};

use crate::domain::{Directory, GateAnswer, GroupGate, GroupRefusal, PeerRelation, Sender};

/// [`Directory`] backed by relation-svc's cached `CheckRelations`.
pub struct RelationDirectory {
    client: RelationServiceClient<Channel>,
    caller: Caller,
}

impl RelationDirectory {
    pub fn new(channel: Channel, caller: Caller) -> Self {
        Self {
            client: RelationServiceClient::new(channel),
            caller,
        }
    }
}

#[async_trait::async_trait]
impl Directory for RelationDirectory {
    async fn relation(&self, sender: i64, peer: i64) -> anyhow::Result<PeerRelation> {
        let request = self.caller.request(
            Actor::System,
            CheckRelationsRequest {
                user_id: sender,
                peer_ids: vec![peer],
            },
        );
        let reply = self
            .client
            .clone()
            .check_relations(request)
            .await?
            .into_inner();
        let Some(found) = reply.relations.into_iter().find(|r| r.peer_id == peer) else {
            anyhow::bail!("relation-svc answered without peer {peer}");
        };
        let relation = found.relation();
        Ok(PeerRelation {
            exists: found.exists,
            peer_lists_sender: matches!(relation, Relation::Both | Relation::TheirsOnly),
            sender_blocked_peer: found.blocked_by_me,
            peer_blocked_sender: found.blocked_me,
        })
    }

    async fn existing(&self, users: &[i64]) -> anyhow::Result<Vec<i64>> {
        let request = self.caller.request(
            Actor::System,
            GetUsersRequest {
                user_ids: users.to_vec(),
            },
        );
        let reply = self.client.clone().get_users(request).await?.into_inner();
        Ok(reply
            .users
            .into_iter()
            .filter(|u| !u.disabled)
            .map(|u| u.user_id)
            .collect())
    }
}

/// [`GroupGate`] backed by group-svc's `CheckSend` and `MemberIds`.
pub struct GroupServiceGate {
    client: GroupServiceClient<Channel>,
    caller: Caller,
}

impl GroupServiceGate {
    pub fn new(channel: Channel, caller: Caller) -> Self {
        Self {
            client: GroupServiceClient::new(channel),
            caller,
        }
    }
}

#[async_trait::async_trait]
impl GroupGate for GroupServiceGate {
    async fn recipients(
        &self,
        group: i64,
        sender: Sender,
        needs: u32,
    ) -> anyhow::Result<GateAnswer> {
        let refusal = |status: tonic::Status| {
            let why = match status.code() {
                Code::NotFound => GroupRefusal::NotFound,
                Code::PermissionDenied => GroupRefusal::Forbidden,
                Code::FailedPrecondition => GroupRefusal::Precondition,
                _ => return Err(anyhow::Error::new(status)),
            };
            Ok(Err((why, status.message().to_owned())))
        };
        let mut client = self.client.clone();
        match sender {
            Sender::User(user) => {
                let check = CheckSendRequest {
                    group_id: group,
                    user_id: user,
                    needs,
                };
                let checked = client.check_send(self.caller.request(Actor::System, check));
                if let Err(status) = checked.await {
                    return refusal(status);
                }
            }
            // The system account writes to any live group.
            Sender::System => {
                let get = GetGroupRequest { group_id: group };
                let found = client
                    .get_group(self.caller.request(Actor::System, get))
                    .await;
                let alive = match found {
                    Ok(reply) => reply
                        .into_inner()
                        .group
                        .is_some_and(|g| g.status() == GroupStatus::Normal),
                    Err(status) => return refusal(status),
                };
                if !alive {
                    let why = format!("group_id: group {group} is dismissed or banned");
                    return Ok(Err((GroupRefusal::Precondition, why)));
                }
            }
        }
        let ids = MemberIdsRequest { group_id: group };
        match client
            .member_ids(self.caller.request(Actor::System, ids))
            .await
        {
            Ok(reply) => Ok(Ok(reply.into_inner().user_ids)),
            Err(status) => refusal(status),
        }
    }

    async fn member_ids(&self, group: i64) -> anyhow::Result<Vec<i64>> {
        let request = self
            .caller
            .request(Actor::System, MemberIdsRequest { group_id: group });
        Ok(self
            .client
            .clone()
            .member_ids(request)
            .await?
            .into_inner()
            .user_ids)
    }

    async fn may_recall_others(&self, group: i64, user: i64) -> anyhow::Result<bool> {
        let request = MembershipRequest {
            group_id: group,
            user_id: user,
        };
        match self
            .client
            .clone()
            .membership(self.caller.request(Actor::System, request))
            .await
        {
            Ok(reply) => {
                let member = reply.into_inner();
                Ok(member.status() == MemberStatus::Normal
                    && member.permissions & Permission::RecallOther as u32 != 0)
            }
            Err(status) if matches!(status.code(), Code::NotFound | Code::PermissionDenied) => {
                Ok(false)
            }
            Err(status) => Err(status.into()),
        }
    }

    async fn visibility(
        &self,
        group: i64,
        user: i64,
    ) -> anyhow::Result<Option<(i64, Option<i64>)>> {
        let request = MembershipRequest {
            group_id: group,
            user_id: user,
        };
        match self
            .client
            .clone()
            .membership(self.caller.request(Actor::System, request))
            .await
        {
            Ok(reply) => {
                let member = reply.into_inner();
                let until = (member.status() != MemberStatus::Normal).then_some(member.leave_seq);
                Ok(Some((member.join_seq, until)))
            }
            Err(status) if matches!(status.code(), Code::NotFound | Code::PermissionDenied) => {
                Ok(None)
            }
            Err(status) => Err(status.into()),
        }
    }
}
