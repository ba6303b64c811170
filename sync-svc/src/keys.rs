//! Every Redis key sync-svc uses, with hash tags for Redis Cluster.

/// The read-receipt bitmap arena of one conversation (a Redis string).
pub fn receipt_bits(conversation_id: &str) -> String {
    format!("{{r:{conversation_id}}}:bits")
}

/// Scratch space beside a conversation's arena, in its slot, for merging a rebuild.
pub fn receipt_merge(conversation_id: &str) -> String {
    format!("{{r:{conversation_id}}}:merge")
}
