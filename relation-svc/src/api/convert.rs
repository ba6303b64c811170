//! Domain ↔ wire conversions of relation-svc, and the one place its errors become statuses.

use imesh_kit::error::{self, StoreError};
use imesh_protos::relation as pb;
use tonic::Status;

use crate::domain::{
    Error, FriendRequest, FriendStatus, Friendship, RequestState, User,
    check::{PeerRelation, Relation},
};

pub fn user_to_proto(user: User) -> pb::User {
    pb::User {
        user_id: user.id,
        username: user.username,
        nickname: user.nickname,
        created_at_ms: user.created_at_ms,
        avatar_url: user.avatar_url,
        extra_json: user.extra_json,
        disabled: user.disabled,
        token_version: user.token_version,
    }
}

pub fn friendship_to_proto(row: &Friendship) -> pb::Friendship {
    let status = match row.status {
        FriendStatus::None => pb::FriendStatus::None,
        FriendStatus::Friend => pb::FriendStatus::Friend,
        FriendStatus::Deleted => pb::FriendStatus::Deleted,
    };
    pb::Friendship {
        owner_id: row.owner,
        peer_id: row.peer,
        status: status as i32,
        blocked: row.blocked,
        remark: row.remark.clone(),
        add_source: row.add_source.clone(),
        extra_json: row.extra_json.clone(),
        sequence: row.sequence,
        updated_at_ms: row.updated_at_ms,
    }
}

pub fn request_to_proto(request: &FriendRequest) -> pb::FriendRequest {
    let state = match request.state {
        RequestState::Pending => pb::RequestState::Pending,
        RequestState::Accepted => pb::RequestState::Accepted,
        RequestState::Rejected => pb::RequestState::Rejected,
        RequestState::Expired => pb::RequestState::Expired,
    };
    pb::FriendRequest {
        request_id: request.id,
        from_user_id: request.from,
        to_user_id: request.to,
        message: request.message.clone(),
        add_source: request.add_source.clone(),
        state: state as i32,
        created_at_ms: request.created_at_ms,
        updated_at_ms: request.updated_at_ms,
    }
}

pub fn peer_relation_to_proto(r: PeerRelation) -> pb::PeerRelation {
    let relation = match r.relation {
        Relation::None => pb::Relation::None,
        Relation::Both => pb::Relation::Both,
        Relation::MineOnly => pb::Relation::MineOnly,
        Relation::TheirsOnly => pb::Relation::TheirsOnly,
    };
    pb::PeerRelation {
        peer_id: r.peer,
        exists: r.exists,
        relation: relation as i32,
        blocked_by_me: r.blocked_by_me,
        blocked_me: r.blocked_me,
    }
}

/// The one place relation-svc errors become gRPC statuses.
pub fn status(err: Error) -> Status {
    match err {
        Error::Invalid { field, reason } => error::invalid(field, reason),
        Error::UsernameTaken => Status::already_exists(err.to_string()),
        Error::BadCredentials => Status::unauthenticated(err.to_string()),
        Error::UnknownUser(_) | Error::UnknownRequest => Status::not_found(err.to_string()),
        Error::Forbidden(_) => Status::permission_denied(err.to_string()),
        Error::Precondition(_) => Status::failed_precondition(err.to_string()),
        Error::Store(StoreError::Unavailable(ref e)) => error::unavailable(e.as_ref()),
        Error::Store(ref e) => error::internal(e),
        Error::Throttled { retry_after_ms, .. } => {
            let mut refused = Status::resource_exhausted(err.to_string());
            refused
                .metadata_mut()
                .insert(error::RETRY_AFTER_HEADER, retry_after_ms.into());
            refused
        }
        Error::Hashing(_) | Error::Token(_) => error::internal(&err),
    }
}
