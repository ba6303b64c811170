//! gRPC handlers of relation-svc: read the caller, parse the request, call the domain,
//! convert back ([`convert`]). Wire types stop here.

pub mod convert;

use std::sync::Arc;

use imesh_kit::identity::{Actor, actor, client_addr};
use imesh_protos::relation::{self as pb, relation_service_server::RelationService};
use tonic::{Request, Response, Status};

use crate::domain::{Accounts, Checker, Direction, Friends, ProfileUpdate};
use convert::{friendship_to_proto, request_to_proto, status, user_to_proto};

pub struct RelationApi {
    accounts: Arc<Accounts>,
    friends: Arc<Friends>,
    checker: Arc<Checker>,
}

impl RelationApi {
    pub fn new(accounts: Arc<Accounts>, friends: Arc<Friends>, checker: Arc<Checker>) -> Self {
        Self {
            accounts,
            friends,
            checker,
        }
    }
}

type Reply<T> = Result<Response<T>, Status>;

/// The calling user and the request body.
fn user_call<T>(request: Request<T>) -> Result<(i64, T), Status> {
    let me = actor(&request)?.user()?;
    Ok((me, request.into_inner()))
}

/// The body of a call only the system actor may make.
fn admin_call<T>(request: Request<T>) -> Result<T, Status> {
    actor(&request)?.require_system()?;
    Ok(request.into_inner())
}

fn friendship_reply(row: &crate::domain::Friendship) -> Option<pb::Friendship> {
    Some(friendship_to_proto(row))
}

#[tonic::async_trait]
impl RelationService for RelationApi {
    async fn register(&self, request: Request<pb::RegisterRequest>) -> Reply<pb::RegisterResponse> {
        let source = client_addr(&request)?;
        let pb::RegisterRequest {
            username,
            password,
            nickname,
        } = request.into_inner();
        let user = self
            .accounts
            .register(&username, &password, &nickname, source)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::RegisterResponse {
            user: Some(user_to_proto(user)),
        }))
    }

    async fn login(&self, request: Request<pb::LoginRequest>) -> Reply<pb::LoginResponse> {
        let source = client_addr(&request)?;
        let pb::LoginRequest { username, password } = request.into_inner();
        let login = self
            .accounts
            .login(&username, &password, source)
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
    ) -> Reply<pb::GetUsersResponse> {
        let pb::GetUsersRequest { user_ids } = request.into_inner();
        let users = self.accounts.users(&user_ids).await.map_err(status)?;
        Ok(Response::new(pb::GetUsersResponse {
            users: users.into_iter().map(user_to_proto).collect(),
        }))
    }

    async fn update_profile(
        &self,
        request: Request<pb::UpdateProfileRequest>,
    ) -> Reply<pb::UpdateProfileResponse> {
        let (
            me,
            pb::UpdateProfileRequest {
                nickname,
                avatar_url,
                extra_json,
            },
        ) = user_call(request)?;
        let update = ProfileUpdate {
            nickname,
            avatar_url,
            extra_json,
        };
        let user = self
            .accounts
            .update_profile(me, update)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::UpdateProfileResponse {
            user: Some(user_to_proto(user)),
        }))
    }

    async fn create_user(
        &self,
        request: Request<pb::CreateUserRequest>,
    ) -> Reply<pb::CreateUserResponse> {
        let pb::CreateUserRequest { username, nickname } = admin_call(request)?;
        let user = self
            .accounts
            .create_without_password(&username, &nickname)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::CreateUserResponse {
            user: Some(user_to_proto(user)),
        }))
    }

    async fn issue_token(
        &self,
        request: Request<pb::IssueTokenRequest>,
    ) -> Reply<pb::IssueTokenResponse> {
        let pb::IssueTokenRequest { user_id } = admin_call(request)?;
        let issued = self.accounts.issue_token(user_id).await.map_err(status)?;
        Ok(Response::new(pb::IssueTokenResponse {
            token: issued.token,
            expires_at_ms: issued.expires_at_ms,
        }))
    }

    async fn set_disabled(
        &self,
        request: Request<pb::SetDisabledRequest>,
    ) -> Reply<pb::SetDisabledResponse> {
        let pb::SetDisabledRequest { user_id, disabled } = admin_call(request)?;
        let user = self
            .accounts
            .set_disabled(user_id, disabled)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::SetDisabledResponse {
            user: Some(user_to_proto(user)),
        }))
    }

    async fn send_friend_request(
        &self,
        request: Request<pb::SendFriendRequestRequest>,
    ) -> Reply<pb::SendFriendRequestResponse> {
        let (
            me,
            pb::SendFriendRequestRequest {
                to_user_id,
                message,
                add_source,
            },
        ) = user_call(request)?;
        let sent = self
            .friends
            .send_request(me, to_user_id, &message, &add_source)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::SendFriendRequestResponse {
            request: sent.request.as_ref().map(request_to_proto),
            friends: sent.friends,
        }))
    }

    async fn respond_friend_request(
        &self,
        request: Request<pb::RespondFriendRequestRequest>,
    ) -> Reply<pb::RespondFriendRequestResponse> {
        let (me, pb::RespondFriendRequestRequest { request_id, accept }) = user_call(request)?;
        let answered = self
            .friends
            .respond(me, request_id, accept)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::RespondFriendRequestResponse {
            request: Some(request_to_proto(&answered)),
        }))
    }

    async fn list_friend_requests(
        &self,
        request: Request<pb::ListFriendRequestsRequest>,
    ) -> Reply<pb::ListFriendRequestsResponse> {
        let (
            me,
            pb::ListFriendRequestsRequest {
                direction,
                cursor,
                limit,
            },
        ) = user_call(request)?;
        let direction = match pb::Direction::try_from(direction) {
            Ok(pb::Direction::Received) => Direction::Received,
            Ok(pb::Direction::Sent) => Direction::Sent,
            Err(_) => {
                return Err(imesh_kit::error::invalid(
                    "direction",
                    "must be RECEIVED or SENT",
                ));
            }
        };
        let (page, next_cursor) = self
            .friends
            .requests(me, direction, cursor, limit)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::ListFriendRequestsResponse {
            requests: page.iter().map(request_to_proto).collect(),
            next_cursor,
        }))
    }

    async fn delete_friend(
        &self,
        request: Request<pb::DeleteFriendRequest>,
    ) -> Reply<pb::DeleteFriendResponse> {
        let (me, pb::DeleteFriendRequest { peer_id }) = user_call(request)?;
        let row = self.friends.delete(me, peer_id).await.map_err(status)?;
        Ok(Response::new(pb::DeleteFriendResponse {
            friendship: friendship_reply(&row),
        }))
    }

    async fn set_remark(
        &self,
        request: Request<pb::SetRemarkRequest>,
    ) -> Reply<pb::SetRemarkResponse> {
        let (me, pb::SetRemarkRequest { peer_id, remark }) = user_call(request)?;
        let row = self
            .friends
            .set_remark(me, peer_id, &remark)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::SetRemarkResponse {
            friendship: friendship_reply(&row),
        }))
    }

    async fn block(&self, request: Request<pb::BlockRequest>) -> Reply<pb::BlockResponse> {
        let (me, pb::BlockRequest { peer_id }) = user_call(request)?;
        let row = self
            .friends
            .set_blocked(me, peer_id, true)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::BlockResponse {
            friendship: friendship_reply(&row),
        }))
    }

    async fn unblock(&self, request: Request<pb::UnblockRequest>) -> Reply<pb::BlockResponse> {
        let (me, pb::UnblockRequest { peer_id }) = user_call(request)?;
        let row = self
            .friends
            .set_blocked(me, peer_id, false)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::BlockResponse {
            friendship: friendship_reply(&row),
        }))
    }

    async fn list_friends(
        &self,
        request: Request<pb::ListFriendsRequest>,
    ) -> Reply<pb::ListFriendsResponse> {
        let (
            me,
            pb::ListFriendsRequest {
                after_sequence,
                limit,
            },
        ) = user_call(request)?;
        let (rows, has_more) = self
            .friends
            .changes(me, after_sequence, limit)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::ListFriendsResponse {
            friendships: rows.iter().map(friendship_to_proto).collect(),
            has_more,
        }))
    }

    async fn check_relations(
        &self,
        request: Request<pb::CheckRelationsRequest>,
    ) -> Reply<pb::CheckRelationsResponse> {
        let caller = actor(&request)?;
        let pb::CheckRelationsRequest { user_id, peer_ids } = request.into_inner();
        let user = match caller {
            Actor::User(me) => me,
            Actor::System if user_id > 0 => user_id,
            Actor::System => {
                return Err(imesh_kit::error::invalid(
                    "user_id",
                    "the system actor must name a user",
                ));
            }
        };
        let found = self.checker.check(user, &peer_ids).await.map_err(status)?;
        Ok(Response::new(pb::CheckRelationsResponse {
            relations: found
                .into_iter()
                .map(convert::peer_relation_to_proto)
                .collect(),
        }))
    }

    async fn check_pairs(
        &self,
        request: Request<pb::CheckPairsRequest>,
    ) -> Reply<pb::CheckPairsResponse> {
        actor(&request)?.require_system()?;
        let pairs: Vec<(i64, i64)> = request
            .into_inner()
            .pairs
            .iter()
            .map(|p| (p.user_id, p.peer_id))
            .collect();
        let found = self.checker.check_pairs(&pairs).await.map_err(status)?;
        Ok(Response::new(pb::CheckPairsResponse {
            relations: found
                .into_iter()
                .map(convert::peer_relation_to_proto)
                .collect(),
        }))
    }
}

#[cfg(test)]
mod tests;
