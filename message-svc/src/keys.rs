//! Every counter and cache key message-svc uses, with hash tags for Redis Cluster.

/// The seq counter of one conversation.
pub fn conversation_seq(conversation_id: &str) -> String {
    format!("{{c:{conversation_id}}}:seq")
}
