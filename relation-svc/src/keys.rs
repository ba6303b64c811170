//! Every Redis key relation-svc uses. The user id is the hash tag, so one user's keys share a
//! Redis Cluster slot.

/// The hash of `owner`'s relation rows: field `<peer>` → `status|blocked`, plus
/// [`ACCOUNT_FIELD`] → the owner's account state (present exactly when the hash is loaded).
pub fn friends(owner: i64) -> String {
    format!("im:friend:{{{owner}}}")
}

/// Counter: the generation of `owner`'s hash, advanced by each invalidation (fills carry
/// it). Shares the hash's slot.
pub fn friends_generation(owner: i64) -> String {
    format!("im:friend:{{{owner}}}:gen")
}

pub const ACCOUNT_FIELD: &str = "_";
