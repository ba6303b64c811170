//! [`GroupMembers`] over gRPC: group-svc's `MemberIds`.

use imesh_kit::grpc::Channel;
use imesh_kit::identity::{Actor, Caller};
use imesh_protos::group::{MemberIdsRequest, group_service_client::GroupServiceClient};
use tonic::Code;

use crate::domain::ports::{GroupMembers, Members};

pub struct GrpcGroups {
    caller: Caller,
    client: GroupServiceClient<Channel>,
}

impl GrpcGroups {
    pub fn new(caller: Caller, channel: Channel) -> Self {
        Self {
            caller,
            client: GroupServiceClient::new(channel),
        }
    }
}

#[async_trait::async_trait]
impl GroupMembers for GrpcGroups {
    async fn members(&self, group: i64) -> anyhow::Result<Members> {
        let request = self
            .caller
            .request(Actor::System, MemberIdsRequest { group_id: group });
        match self.client.clone().member_ids(request).await {
            Ok(reply) => Ok(Members::List(reply.into_inner().user_ids)),
            Err(status) if status.code() == Code::NotFound => Ok(Members::Unknown),
            Err(status) if status.code() == Code::FailedPrecondition => Ok(Members::Unlisted),
            Err(status) => Err(status.into()),
        }
    }
}
