//! gRPC handlers of relation-svc: wire types stop here.

use std::sync::Arc;

use imesh_kit::error;
use imesh_protos::relation::{self as pb, relation_service_server::RelationService};
use tonic::{Request, Response, Status};

use crate::domain::{Accounts, Error, User};

pub struct RelationApi {
    accounts: Arc<Accounts>,
}

impl RelationApi {
    pub fn new(accounts: Arc<Accounts>) -> Self {
        Self { accounts }
    }
}

#[tonic::async_trait]
impl RelationService for RelationApi {
    async fn register(
        &self,
        request: Request<pb::RegisterRequest>,
    ) -> Result<Response<pb::RegisterResponse>, Status> {
        let pb::RegisterRequest {
            username,
            password,
            nickname,
        } = request.into_inner();
        let user = self
            .accounts
            .register(&username, &password, &nickname)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::RegisterResponse {
            user: Some(user_to_proto(user)),
        }))
    }

    async fn login(
        &self,
        request: Request<pb::LoginRequest>,
    ) -> Result<Response<pb::LoginResponse>, Status> {
        let pb::LoginRequest { username, password } = request.into_inner();
        let login = self
            .accounts
            .login(&username, &password)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::LoginResponse {
            token: login.token,
            expires_at_ms: login.expires_at_ms,
            user: Some(user_to_proto(login.user)),
        }))
    }

    async fn get_users(
        &self,
        request: Request<pb::GetUsersRequest>,
    ) -> Result<Response<pb::GetUsersResponse>, Status> {
        let pb::GetUsersRequest { user_ids } = request.into_inner();
        let users = self.accounts.users(&user_ids).await.map_err(status)?;
        Ok(Response::new(pb::GetUsersResponse {
            users: users.into_iter().map(user_to_proto).collect(),
        }))
    }
}

fn user_to_proto(user: User) -> pb::User {
    pb::User {
        user_id: user.id,
        username: user.username,
        nickname: user.nickname,
        created_at_ms: user.created_at_ms,
    }
}

/// The one place relation-svc errors become gRPC statuses.
fn status(err: Error) -> Status {
    match err {
        Error::Invalid { field, reason } => error::invalid(field, reason),
        Error::UsernameTaken => Status::already_exists(err.to_string()),
        Error::BadCredentials => Status::unauthenticated(err.to_string()),
        Error::Store(imesh_kit::error::StoreError::Unavailable(ref e)) => {
            error::unavailable(e.as_ref())
        }
        Error::Store(ref e) => error::internal(e),
        Error::Hashing(_) | Error::Token(_) => error::internal(&err),
    }
}
