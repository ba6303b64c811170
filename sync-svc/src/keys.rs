//! Every counter key sync-svc uses, with hash tags for Redis Cluster.

/// The sync_seq counter of one user's inbox.
pub fn inbox_seq(user_id: i64) -> String {
    format!("{{u:{user_id}}}:sync")
}

/// The read-receipt bitmap arena of one conversation (a Redis string).
pub fn receipt_bits(conversation_id: &str) -> String {
    format!("{{r:{conversation_id}}}:bits")
}

/// Scratch space beside a conversation's arena, in its slot, for merging a rebuild.
pub fn receipt_merge(conversation_id: &str) -> String {
    format!("{{r:{conversation_id}}}:merge")
}
