//! The relation chain's rules, with no tonic or sea-orm types: accounts ([`accounts`]),
//! friendships and requests ([`friends`], whose decisions are the pure functions of
//! [`plan`]), and the relation check of every direct send ([`check`]).

pub mod accounts;
pub mod check;
pub mod friends;
mod local_cache;
pub mod plan;
pub mod ports;
pub mod throttle;

pub use local_cache::LocalCache;
pub use ports::{
    Attempts, Direction, EdgeCache, EncodeEvent, FriendStore, Hit, NewUser, Plan, ProfileUpdate,
    Sessions, StoredUser, UserStore,
};

use imesh_kit::error::StoreError;

pub use accounts::Accounts;
pub use check::Checker;
pub use friends::Friends;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub id: i64,
    pub username: String,
    pub nickname: String,
    pub created_at_ms: i64,
    pub avatar_url: String,
    /// A JSON object (or empty).
    pub extra_json: String,
    pub disabled: bool,
    /// Tokens issued at an older version are refused.
    pub token_version: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FriendStatus {
    #[default]
    None,
    Friend,
    Deleted,
}

/// What `owner` has recorded about `peer`: one row of the double-written pair.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Friendship {
    pub owner: i64,
    pub peer: i64,
    pub status: FriendStatus,
    pub blocked: bool,
    pub remark: String,
    pub add_source: String,
    pub extra_json: String,
    /// The owner's change sequence at this row's last change.
    pub sequence: i64,
    pub updated_at_ms: i64,
}

impl Friendship {
    pub fn is_friend(&self) -> bool {
        self.status == FriendStatus::Friend
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestState {
    Pending,
    Accepted,
    Rejected,
    Expired,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FriendRequest {
    pub id: i64,
    pub from: i64,
    pub to: i64,
    pub message: String,
    pub add_source: String,
    pub state: RequestState,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// What a relation change tells users' devices (through sync-svc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelationEvent {
    /// To the row's owner.
    Friendship(Friendship),
    /// To both ends of the request.
    Request(FriendRequest),
}

/// Everything that can go wrong in a relation-svc operation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    #[error("username: already taken")]
    UsernameTaken,
    #[error("username or password is wrong")]
    BadCredentials,
    #[error("{0}: no such user")]
    UnknownUser(&'static str),
    #[error("request_id: no such friend request")]
    UnknownRequest,
    #[error("{0}")]
    Forbidden(&'static str),
    #[error("{0}")]
    Precondition(&'static str),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("hashing a password failed: {0}")]
    Hashing(String),
    /// Too many attempts: refused before any work, retryable after the wait.
    #[error("{what}; retry in {retry_after_ms} ms")]
    Throttled {
        what: &'static str,
        retry_after_ms: u64,
    },
    #[error("issuing a token failed")]
    Token(#[source] anyhow::Error),
}

pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Error {
    Error::Invalid {
        field,
        reason: reason.into(),
    }
}

/// A JSON object of at most `max` bytes, or empty.
pub(crate) fn parse_extra_json(
    field: &'static str,
    raw: &str,
    max: usize,
) -> Result<String, Error> {
    if raw.is_empty() {
        return Ok(String::new());
    }
    if raw.len() > max {
        return Err(invalid(field, format!("must be at most {max} bytes")));
    }
    match serde_json::from_str::<serde_json::Value>(raw) {
        Ok(serde_json::Value::Object(_)) => Ok(raw.to_owned()),
        Ok(_) => Err(invalid(field, "must be a JSON object")),
        Err(e) => Err(invalid(field, format!("not valid JSON: {e}"))),
    }
}

/// A peer id the caller names: positive and not the caller.
pub(crate) fn parse_peer(field: &'static str, me: i64, peer: i64) -> Result<i64, Error> {
    if peer <= 0 {
        return Err(invalid(field, "must be a user id"));
    }
    if peer == me {
        return Err(invalid(field, "must not be yourself"));
    }
    Ok(peer)
}

/// At most `max` characters.
pub(crate) fn parse_text(field: &'static str, raw: &str, max: usize) -> Result<String, Error> {
    if raw.chars().count() > max {
        return Err(invalid(field, format!("must be at most {max} characters")));
    }
    Ok(raw.to_owned())
}
