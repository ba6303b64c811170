//! Every port the domain needs, with the types that cross it: the inbox store
//! ([`InboxStore`], adapter `crate::store::sql`), the receipt bitmaps ([`ReceiptBits`],
//! adapters `crate::bits`), and the services it calls ([`Notifier`]: notify-svc,
//! [`Memberships`]: group-svc; adapters `crate::peers`). Adapters depend on the domain,
//! never the other way.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use async_trait::async_trait;
use bytes::Bytes;
use imesh_kit::error::StoreError;

use super::{ConversationView, Cursor, Entry, Mark, MemberMap, PushSettings, Receipt, Settings};

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

/// Read-receipt bitmaps: one byte string (an arena) per conversation holding every receipt
/// message's bitmap over the members' map ids in its own slot, so a message costs its
/// bitmap's bytes and nothing per key. Byte 0 marks the arena as built: an arena created
/// by a lone SETBIT (after a flush or an expiry) reads as not built, and the domain
/// rebuilds it from the read watermarks. Bits only ever turn on, so a rebuild merges with
/// OR and loses no concurrent read. Bit `n` is the most significant bit of byte `n / 8`
/// first, as Redis numbers them.
#[async_trait]
pub trait ReceiptBits: Send + Sync + 'static {
    /// Sets each bit of the conversation's arena; returns, per bit, whether it was clear.
    async fn set(&self, conversation_id: &str, bits: &[u64]) -> Result<Vec<bool>, StoreError>;
    /// Bytes `[start, start + len)` of the arena, zero past its end; `None` while it is
    /// not built.
    async fn read(
        &self,
        conversation_id: &str,
        start: u64,
        len: u64,
    ) -> Result<Option<Vec<u8>>, StoreError>;
    /// ORs `bytes` into the arena from byte `start` and marks it built.
    async fn merge(
        &self,
        conversation_id: &str,
        start: u64,
        bytes: &[u8],
    ) -> Result<(), StoreError>;
}

/// Who belongs to a group now (group-svc), for reads of read-fanout conversations.
#[async_trait]
pub trait Memberships: Send + Sync + 'static {
    async fn is_member(&self, group: i64, user: i64) -> anyhow::Result<bool>;
    /// The current members of a group that is not a super group, by map id; `fresh` skips
    /// any cache.
    async fn member_map(&self, group: i64, fresh: bool) -> anyhow::Result<Arc<MemberMap>>;
}

/// Where new entries go to reach online devices (notify-svc).
#[async_trait]
pub trait Notifier: Send + Sync + 'static {
    async fn deliver(&self, deliveries: Vec<(i64, Vec<Entry>)>) -> anyhow::Result<()>;
    /// As [`Notifier::deliver`], returning only once the deliveries have been pushed (or
    /// failed to be), even from a notifier that queues them ([`super::Queued`]).
    async fn deliver_and_wait(&self, deliveries: Vec<(i64, Vec<Entry>)>) -> anyhow::Result<()> {
        self.deliver(deliveries).await
    }
    /// Live events of read-fanout groups, `(group, encoded event)`, for their online members.
    async fn deliver_to_groups(&self, events: Vec<(i64, Bytes)>) -> anyhow::Result<()>;
}

/// The value of the built marker in byte 0.
pub const BUILT: u8 = 1;

/// Whether bit `n` of `bytes` (bit 0 leading byte 0) is set; false past the end.
pub fn is_set(bytes: &[u8], n: u64) -> bool {
    bytes
        .get((n / 8) as usize)
        .is_some_and(|b| b & (0x80 >> (n % 8)) != 0)
}

/// Sets bit `n` of `bytes`, growing them with zeros as needed; returns whether it was clear.
pub fn set_bit(bytes: &mut Vec<u8>, n: u64) -> bool {
    let byte = (n / 8) as usize;
    if bytes.len() <= byte {
        bytes.resize(byte + 1, 0);
    }
    let mask = 0x80 >> (n % 8);
    let was_clear = bytes[byte] & mask == 0;
    bytes[byte] |= mask;
    was_clear
}
