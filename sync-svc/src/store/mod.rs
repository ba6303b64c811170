//! The storage port of sync-svc. Adapter: [`sql`] (sea-orm: SQLite, PostgreSQL, MySQL).

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use bytes::Bytes;
use imesh_kit::error::StoreError;

use crate::domain::{ConversationView, Cursor, Entry, Mark, PushSettings, Receipt, Settings};

pub mod sql;

/// An event stored once, referenced by one inbox entry per recipient.
#[derive(Debug, Clone)]
pub struct StoredEvent {
    pub id: i64,
    pub event_id: String,
    pub payload: Bytes,
    /// Who gets an inbox entry: each user once.
    pub recipients: Vec<i64>,
    pub mark: Option<Mark>,
    /// The app server's webhook payload of the event, queued with it when webhooks are on.
    pub hook: Option<Vec<u8>>,
}

/// The outbox table of the app server's after-event webhooks.
pub const WEBHOOK_TABLE: &str = "webhook_outbox";

#[async_trait]
pub trait InboxStore: Send + Sync + 'static {
    /// The ids among `event_ids` already appended.
    async fn known_events(&self, event_ids: &[&str]) -> Result<HashSet<String>, StoreError>;
    /// Stores the events and their inbox entries in one transaction, with what their marks
    /// do to conversation state: a message raises the conversation's latest seq (its last
    /// message follows the highest seq), gives every recipient a read state starting just
    /// before it, raises the sender's read seq to it and flags the mentioned; a recall of the
    /// latest message marks it recalled; a message asking for receipts gets the next free
    /// slot of its conversation's arena. Each recipient's entries get the next `sync_seq`s
    /// of their inbox, in event order; returns them by event and recipient. A user's
    /// entries become visible in `sync_seq` order, however many appends run at once. MUST
    /// fail with `Conflict`, storing nothing, when an event id already exists.
    async fn append(&self, events: &[StoredEvent]) -> Result<Vec<Vec<i64>>, StoreError>;
    /// Up to `limit` of `user`'s entries with `sync_seq > after`, in order.
    async fn entries(&self, user: i64, after: i64, limit: u32) -> Result<Vec<Entry>, StoreError>;
    /// Drops the events with a row id below `event_id` (older than the retention) and their
    /// inbox entries; returns how many entries went.
    async fn purge_before(&self, event_id: i64) -> Result<u64, StoreError>;
    /// Raises the device's cursor to at least `sync_seq` and returns the stored value.
    async fn ack(&self, user: i64, device: &str, sync_seq: i64) -> Result<i64, StoreError>;
    /// Raises each `(user, device)` cursor to at least its seq, in one statement per chunk;
    /// a device named twice keeps the higher seq.
    async fn ack_many(&self, acks: &[(i64, String, i64)]) -> Result<(), StoreError>;
    /// `(conversation, read_seq, latest_seq)` of each of `conversations` `user` has a read
    /// state in.
    async fn read_states(
        &self,
        user: i64,
        conversations: &[&str],
    ) -> Result<Vec<(String, i64, i64)>, StoreError>;
    /// The latest seq of each of `conversations` that has any message.
    async fn latest_seqs(&self, conversations: &[&str]) -> Result<Vec<(String, i64)>, StoreError>;
    /// Raises `user`'s read seq in each conversation to at least the given seq, opening the
    /// read state where there is none.
    async fn raise_read(&self, user: i64, marks: &[(String, i64)]) -> Result<(), StoreError>;
    /// Up to `limit` of `user`'s conversations after `after`, by last activity, newest first
    /// (`peer_read_seq` left 0), leaving out those with nothing newer than their removed seq.
    async fn conversations(
        &self,
        user: i64,
        after: Option<&Cursor>,
        limit: u32,
    ) -> Result<Vec<ConversationView>, StoreError>;
    /// The read seq of each `(user, conversation)`, by conversation.
    async fn read_seqs(&self, of: &[(i64, String)]) -> Result<HashMap<String, i64>, StoreError>;
    /// Sets the given fields of `user`'s settings of a conversation they have a read state
    /// in; returns the stored settings.
    async fn update_settings(
        &self,
        user: i64,
        conversation_id: &str,
        pinned: Option<bool>,
        muted: Option<bool>,
    ) -> Result<Settings, StoreError>;
    /// Raises `user`'s removed seq of a conversation they have a read state in to at least
    /// `seq` (never lowers it); returns the stored removed seq.
    async fn remove_conversation(
        &self,
        user: i64,
        conversation_id: &str,
        seq: i64,
    ) -> Result<i64, StoreError>;
    /// Each of `users`' sum of unread counts outside muted and removed conversations (the
    /// badge), 0 for those with none.
    async fn unread_totals(&self, users: &[i64]) -> Result<HashMap<i64, i64>, StoreError>;
    /// `user`'s badge, as [`InboxStore::unread_totals`].
    async fn total_unread(&self, user: i64) -> Result<i64, StoreError> {
        let totals = self.unread_totals(&[user]).await?;
        Ok(totals.get(&user).copied().unwrap_or(0))
    }
    /// The push settings of those of `users` who stored any.
    async fn push_settings(&self, users: &[i64]) -> Result<HashMap<i64, PushSettings>, StoreError>;
    /// Replaces `user`'s push settings.
    async fn set_push_settings(&self, user: i64, settings: &PushSettings)
    -> Result<(), StoreError>;
    /// The `(user, conversation)` pairs among `of` the user muted.
    async fn muted_among(&self, of: &[(i64, String)])
    -> Result<HashSet<(i64, String)>, StoreError>;
    /// The receipt messages among `seqs` of a conversation, by seq.
    async fn receipts(&self, conversation: &str, seqs: &[i64]) -> Result<Vec<Receipt>, StoreError>;
    /// The receipt messages with `after < seq <= upto`, by seq.
    async fn receipts_between(
        &self,
        conversation: &str,
        after: i64,
        upto: i64,
    ) -> Result<Vec<Receipt>, StoreError>;
    /// For each `(user, conversation, upto)`: the receipt messages past the user's read seq
    /// up to `upto` (none without a read state), as `(user, conversation, receipt)` by seq.
    async fn receipts_unread_by(
        &self,
        asks: &[(i64, &str, i64)],
    ) -> Result<Vec<(i64, String, Receipt)>, StoreError>;
    /// `(user, read_seq)` of everyone with a read state in the conversation.
    async fn readers(&self, conversation: &str) -> Result<Vec<(i64, i64)>, StoreError>;
}

#[cfg(test)]
mod tests;
