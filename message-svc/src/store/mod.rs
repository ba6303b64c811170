//! The storage port of message-svc. Adapter: [`sql`] (sea-orm: SQLite, PostgreSQL, MySQL).

use async_trait::async_trait;
use imesh_kit::{error::StoreError, outbox::OutboxRow};

use crate::domain::{Message, Sent};

mod commits;
pub mod sql;

/// The outbox table message-svc's relay drains.
pub const OUTBOX_TABLE: &str = "message_outbox";

#[async_trait]
pub trait MessageStore: Send + Sync + 'static {
    /// The stored result of `sender`'s send with this `client_msg_id`, if there was one.
    async fn find_sent(&self, sender: i64, client_msg_id: &str)
    -> Result<Option<Sent>, StoreError>;
    /// In one transaction: stores `message`, raises its conversation's max seq (never
    /// lowers it) and queues `event` in the outbox. MUST fail with `Conflict`, storing
    /// nothing, when `(sender, client_msg_id)` or `(conversation, seq)` is already stored.
    async fn append(&self, message: &Message, event: OutboxRow) -> Result<(), StoreError>;
    /// One stored message.
    async fn message(&self, conversation_id: &str, seq: i64)
    -> Result<Option<Message>, StoreError>;
    /// Messages of a conversation with `after < seq <= up_to`, at most `limit`, newest or
    /// oldest first.
    async fn history(
        &self,
        conversation_id: &str,
        after: i64,
        up_to: i64,
        limit: u32,
        newest_first: bool,
    ) -> Result<Vec<Message>, StoreError>;
    /// In one transaction: makes the message a tombstone (content dropped, `by` and `at_ms`
    /// recorded) and queues `event`, unless it was already recalled. True when this call
    /// recalled it.
    async fn recall(
        &self,
        conversation_id: &str,
        seq: i64,
        by: i64,
        at_ms: i64,
        event: OutboxRow,
    ) -> Result<bool, StoreError>;
    /// The highest seq stored in a conversation, 0 for none.
    async fn max_seq(&self, conversation_id: &str) -> Result<i64, StoreError>;
}

#[cfg(test)]
mod tests;
