//! gRPC handlers of group-svc: wire types stop here.

use std::sync::Arc;

use imesh_kit::{error, identity};
use imesh_protos::group::{self as pb, group_service_server::GroupService};
use tonic::{Request, Response, Status};

use crate::domain::{Error, Group, Groups, Member, Role};

pub struct GroupApi {
    groups: Arc<Groups>,
}

impl GroupApi {
    pub fn new(groups: Arc<Groups>) -> Self {
        Self { groups }
    }
}

#[tonic::async_trait]
impl GroupService for GroupApi {
    async fn create_group(
        &self,
        request: Request<pb::CreateGroupRequest>,
    ) -> Result<Response<pb::CreateGroupResponse>, Status> {
        let owner = identity::actor(&request)?.user()?;
        let pb::CreateGroupRequest { name, member_ids } = request.into_inner();
        let (group, members) = self
            .groups
            .create(owner, &name, &member_ids)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::CreateGroupResponse {
            group: Some(group_to_proto(group)),
            members: members.into_iter().map(member_to_proto).collect(),
        }))
    }

    async fn get_group(
        &self,
        request: Request<pb::GetGroupRequest>,
    ) -> Result<Response<pb::GetGroupResponse>, Status> {
        identity::actor(&request)?;
        let group = self
            .groups
            .get(request.into_inner().group_id)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::GetGroupResponse {
            group: Some(group_to_proto(group)),
        }))
    }
}

fn group_to_proto(g: Group) -> pb::Group {
    pb::Group {
        group_id: g.id,
        name: g.name,
        owner_id: g.owner_id,
        member_count: g.member_count,
        created_at_ms: g.created_at_ms,
        version: g.version,
    }
}

fn member_to_proto(m: Member) -> pb::Member {
    let role = match m.role {
        Role::Member => pb::Role::Member,
        Role::Admin => pb::Role::Admin,
        Role::Owner => pb::Role::Owner,
    };
    pb::Member {
        user_id: m.user_id,
        role: role as i32,
        map_id: m.map_id,
        joined_at_ms: m.joined_at_ms,
    }
}

/// The one place group-svc errors become gRPC statuses.
fn status(err: Error) -> Status {
    match err {
        Error::Invalid { field, reason } => error::invalid(field, reason),
        Error::NotFound(_) => Status::not_found(err.to_string()),
        Error::Store(imesh_kit::error::StoreError::Unavailable(ref e)) => {
            error::unavailable(e.as_ref())
        }
        Error::Store(ref e) => error::internal(e),
    }
}
