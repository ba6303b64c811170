//! Every Redis key group-svc uses. The group id is the hash tag, so one group's keys share a
//! Redis Cluster slot.

/// The gate's view of the group: `kind|status|mute_all|version|member_count`.
pub fn info(group_id: i64) -> String {
    format!("im:g:{{{group_id}}}:info")
}

/// Hash: user → `role|map_id|mute_until_ms|join_seq|status|extra` or `-` (not a member).
pub fn members(group_id: i64) -> String {
    format!("im:g:{{{group_id}}}:m")
}

/// Set of current member ids (normal groups, at most 2,000 members).
pub fn member_ids(group_id: i64) -> String {
    format!("im:g:{{{group_id}}}:ids")
}

/// Counter: the cached entries' generation, advanced by each invalidation (fills carry it).
pub fn generation(group_id: i64) -> String {
    format!("im:g:{{{group_id}}}:gen")
}

/// Sorted set: user → last activity (ms), the most recent few only. Not dropped by
/// invalidation: activity is not derived from the database.
pub fn active(group_id: i64) -> String {
    format!("im:g:{{{group_id}}}:active")
}

/// Pub/sub channel carrying the ids of groups whose cached entries are stale.
pub const INVALIDATIONS: &str = "im:g:invalidate";

/// The roster's version marker: present while the roster is complete.
pub fn roster(group_id: i64) -> String {
    format!("im:g:{{{group_id}}}:r")
}

/// The token of the fill in progress.
pub fn roster_claim(group_id: i64) -> String {
    format!("im:g:{{{group_id}}}:rc")
}

/// Sorted set: user → map id, for the roster's members with `user % 16 == bucket`.
pub fn roster_bucket(group_id: i64, bucket: usize) -> String {
    format!("im:g:{{{group_id}}}:r:{bucket}")
}
