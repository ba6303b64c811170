//! Every counter key sync-svc uses, with hash tags for Redis Cluster.

/// The sync_seq counter of one user's inbox.
pub fn inbox_seq(user_id: i64) -> String {
    format!("{{u:{user_id}}}:sync")
}
