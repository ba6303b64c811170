//! Every port the domain needs, with the types that cross it: the message store
//! ([`MessageStore`], adapter `crate::store::sql`), the uploads' records ([`FileStore`], the
//! same adapter) and their bytes ([`Blobs`], adapters `crate::store::blobs`), relation-svc ([`Directory`]), group-svc
//! ([`GroupGate`]) and the app server's before-send hook ([`BeforeSend`]) (adapters
//! `crate::peers`, `crate::hooks`). Adapters depend on the domain, never the other way.

use std::sync::Arc;

use async_trait::async_trait;
use imesh_kit::{error::StoreError, outbox::OutboxRow};
use tokio::sync::oneshot;

use super::{
    Content, Hidden, MediaKind, Message, MovedReactions, PeerRelation, Pin, PinOutcome,
    ReactOutcome, ReactionChange, ReactionCount, SearchScope, Sender, Sent,
};

/// Who exists and who blocked whom, as relation-svc knows it.
#[async_trait]
pub trait Directory: Send + Sync + 'static {
    /// What each `(sender, peer)` pair's relation allows, in the order asked (at most
    /// [`imesh_protos::MAX_SEND_BATCH`] pairs).
    async fn relations(&self, pairs: &[(i64, i64)]) -> anyhow::Result<Vec<PeerRelation>>;
    /// The ids among `users` that exist and are not disabled.
    async fn existing(&self, users: &[i64]) -> anyhow::Result<Vec<i64>>;
}

/// Why group-svc refused a group send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupRefusal {
    NotFound,
    Forbidden,
    Precondition,
}

/// Whom an event reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Audience {
    /// Write fanout: an inbox entry for each of these users.
    Users(Vec<i64>),
    /// Read fanout (super groups, groups above the write-fanout size): the event stays in
    /// the group's conversation, which members read back themselves.
    Group(i64),
}

/// group-svc's answer to "may this go out, and to whom", or a refusal.
pub type GateAnswer = Result<Gated, (GroupRefusal, String)>;

/// A group send group-svc allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gated {
    pub audience: Audience,
    pub member_count: u32,
    /// Members with a map id below this joined before the decision.
    pub map_bound: u32,
}

impl Gated {
    /// A direct or notice conversation: no group, no map.
    pub(super) fn direct(users: Vec<i64>) -> Self {
        Self {
            audience: Audience::Users(users),
            member_count: 0,
            map_bound: 0,
        }
    }
}

/// group-svc's send gate and member list, as message-svc needs them.
#[async_trait]
pub trait GroupGate: Send + Sync + 'static {
    /// Whom a message from `sender` to `group` goes to, when group-svc allows it now with
    /// the permission bits `needs` (membership as of the send). The system account writes
    /// to any live group. `Ok(Err(..))` is a refusal; `Err` a failure to ask.
    async fn recipients(
        &self,
        group: i64,
        sender: Sender,
        needs: u32,
    ) -> anyhow::Result<GateAnswer>;
    /// Whom an event of the group's reaches now (a recall).
    async fn audience(&self, group: i64) -> anyhow::Result<Audience>;
    /// The current members among `users`, as `asker` (a member, or the system) sees them.
    async fn members_among(
        &self,
        group: i64,
        asker: Sender,
        users: &[i64],
    ) -> anyhow::Result<Vec<i64>>;
    /// Whether `user` is a current member holding every bit of `permission`.
    async fn holds(&self, group: i64, user: i64, permission: u32) -> anyhow::Result<bool>;
    /// The groups `user` belongs to now, at most `max`.
    async fn groups_of(&self, user: i64, max: usize) -> anyhow::Result<Vec<i64>>;
    /// The seqs of the group's conversation `user` may read: after their join seq and, once
    /// they left, up to their leave seq. `None` when they never were a member.
    async fn visibility(&self, group: i64, user: i64)
    -> anyhow::Result<Option<(i64, Option<i64>)>>;
}

/// The services message-svc asks before storing: relation-svc and group-svc, and the
/// company's app server when a before-send hook is set.
pub struct Peers {
    pub relations: Arc<dyn Directory>,
    pub groups: Arc<dyn GroupGate>,
    pub before_send: Option<BeforeSendHook>,
}

/// The app server's say on a user's message before it is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Refused, with the reason the sender sees.
    Reject(String),
    /// Stored with this content instead (checked as sent content is).
    Replace(Content),
}

/// The app server's before-send hook.
#[async_trait]
pub trait BeforeSend: Send + Sync + 'static {
    /// The verdict on `message` (no msg id or seq yet); `Err` when it could not be asked.
    async fn check(&self, message: &Message) -> anyhow::Result<Verdict>;
}

/// A before-send hook and what a send does when it cannot be asked.
#[derive(Clone)]
pub struct BeforeSendHook {
    pub hook: Arc<dyn BeforeSend>,
    /// Store the message anyway (true) or refuse it with UNAVAILABLE (false).
    pub fail_open: bool,
}

#[async_trait]
pub trait MessageStore: Send + Sync + 'static {
    /// The stored result of `sender`'s send with this `client_msg_id`, if there was one.
    async fn find_sent(
        &self,
        sender: i64,
        client_msg_id: &str,
    ) -> Result<Option<Sent>, StoreError> {
        Ok(self
            .find_sent_many(&[(sender, client_msg_id)])
            .await?
            .remove(0))
    }
    /// [`Self::find_sent`] for many `(sender, client_msg_id)` keys in one query: one answer
    /// per key, in order.
    async fn find_sent_many(&self, keys: &[(i64, &str)]) -> Result<Vec<Option<Sent>>, StoreError>;
    /// In one transaction: stores `message`, raises its conversation's max seq (never
    /// lowers it) and queues `event` in the outbox. MUST fail with `Conflict`, storing
    /// nothing, when `(sender, client_msg_id)` or `(conversation, seq)` is already stored.
    async fn append(&self, message: &Message, event: OutboxRow) -> Result<(), StoreError> {
        let appends = [(message.clone(), event)];
        self.append_many(&appends).await.outcomes().await.remove(0)
    }
    /// Queues [`Self::append`] of each `(message, event)`; returns once they are queued,
    /// with their outcomes to wait for, one by one in order. The appends MUST be committed
    /// in the order queued, by every caller (an earlier one's outbox event is never
    /// visible after a later one's), and one's conflict MUST NOT refuse the others. A
    /// message whose seq is not above its conversation's committed max seq (another
    /// process committed a later seq first) MUST be refused with `Unavailable`, storing
    /// nothing: a conversation's messages become visible in seq order. An adapter given
    /// the relay's hand-off passes the committed events to it in commit order.
    async fn append_many(&self, appends: &[(Message, OutboxRow)]) -> Queued;
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
    /// In one transaction: gives a message not recalled `content` as its `version` (only
    /// if it is at `version - 1`, so of two concurrent edits one wins), recording `at_ms`,
    /// and queues `event`. True when this call edited it.
    async fn edit(
        &self,
        conversation_id: &str,
        seq: i64,
        content: &Content,
        version: i32,
        at_ms: i64,
        event: OutboxRow,
    ) -> Result<bool, StoreError>;
    /// In one transaction: pins `pin.seq` and queues `event`, unless it is pinned already
    /// or the conversation holds `max` pins (then nothing is written).
    async fn pin(
        &self,
        conversation_id: &str,
        pin: Pin,
        max: usize,
        event: OutboxRow,
    ) -> Result<PinOutcome, StoreError>;
    /// In one transaction: unpins `seq` and queues `event`; false (nothing written) when it
    /// was not pinned.
    async fn unpin(
        &self,
        conversation_id: &str,
        seq: i64,
        event: OutboxRow,
    ) -> Result<bool, StoreError>;
    /// A conversation's pins, newest first.
    async fn pins(&self, conversation_id: &str) -> Result<Vec<Pin>, StoreError>;
    /// The stored messages among `seqs` of a conversation, in seq order.
    async fn messages_at(
        &self,
        conversation_id: &str,
        seqs: &[i64],
    ) -> Result<Vec<Message>, StoreError>;
    /// In one transaction: hides `hidden.seqs` and everything up to `hidden.cleared_seq`
    /// (never lowering an earlier clear) from `hidden.user`'s view, and queues `event`.
    async fn hide(&self, hidden: &Hidden, event: OutboxRow) -> Result<(), StoreError>;
    /// How far `user` cleared a conversation (0: never), and the seqs among `after < seq
    /// <= up_to` they hid one by one.
    async fn hidden_for(
        &self,
        user: i64,
        conversation_id: &str,
        after: i64,
        up_to: i64,
    ) -> Result<(i64, std::collections::HashSet<i64>), StoreError>;
    /// Which of `seqs` of a conversation are recalled.
    async fn recalled_among(
        &self,
        conversation_id: &str,
        seqs: &[i64],
    ) -> Result<std::collections::HashSet<i64>, StoreError>;
    /// In one transaction: adds or takes back `change.user_id`'s reaction, keeps the
    /// message's counts, and queues `event` — or, with none, marks the message's reactions
    /// moved for [`Self::moved_reactions`]. Unchanged (nothing written) when it was so
    /// already; Full (nothing written) when the emoji would be the message's `max_emojis +
    /// 1`th. Changes to one message are serialized, so the bound holds under concurrency.
    async fn react(
        &self,
        change: &ReactionChange,
        max_emojis: usize,
        event: Option<OutboxRow>,
    ) -> Result<ReactOutcome, StoreError>;
    /// The reaction counts of `seqs` of a conversation by seq (messages without any left
    /// out), most reacted first, then by emoji; `mine` for `reader` (0: nobody).
    async fn reactions(
        &self,
        conversation_id: &str,
        seqs: &[i64],
        reader: i64,
    ) -> Result<std::collections::HashMap<i64, Vec<ReactionCount>>, StoreError>;
    /// Up to `limit` users who reacted to a message with `emoji`, ids above `after`,
    /// ascending.
    async fn reactors(
        &self,
        conversation_id: &str,
        seq: i64,
        emoji: &str,
        after: i64,
        limit: u32,
    ) -> Result<Vec<i64>, StoreError>;
    /// Up to `limit` messages marked as having moved reactions.
    async fn moved_reactions(&self, limit: usize) -> Result<Vec<MovedReactions>, StoreError>;
    /// In one transaction: queues `events` and drops the marks of `moved` that counted no
    /// change since they were read (a later change keeps its mark for the next flush).
    async fn forget_moved(
        &self,
        moved: &[MovedReactions],
        events: Vec<OutboxRow>,
    ) -> Result<(), StoreError>;
    /// Up to `limit` text messages within `scope` that hold every one of `terms` (lower
    /// case words) as the backend's full-text index splits words, not recalled, with a msg
    /// id below `before` (0: any), newest first.
    async fn search(
        &self,
        terms: &[String],
        scope: &SearchScope,
        before: i64,
        limit: u32,
    ) -> Result<Vec<Message>, StoreError>;
    /// The highest seq stored in a conversation, 0 for none.
    async fn max_seq(&self, conversation_id: &str) -> Result<i64, StoreError>;
}

/// Appends queued for the writer, in order: `None` for one the stopped writer refused.
pub struct Queued(Vec<Option<oneshot::Receiver<Result<(), StoreError>>>>);

impl Queued {
    /// Each queued append's outcome to come, in order; `None` for one refused at once.
    pub fn new(outcomes: Vec<Option<oneshot::Receiver<Result<(), StoreError>>>>) -> Self {
        Self(outcomes)
    }

    /// Waits for each append's outcome, in the order queued.
    pub async fn outcomes(self) -> Vec<Result<(), StoreError>> {
        let stopped = || StoreError::Unavailable(anyhow::anyhow!("the message writer stopped"));
        let mut results = Vec::with_capacity(self.0.len());
        for outcome in self.0 {
            results.push(match outcome {
                Some(outcome) => outcome.await.unwrap_or_else(|_| Err(stopped())),
                None => Err(stopped()),
            });
        }
        results
    }
}

/// What an upload ticket was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UploadKind {
    Image,
    File,
    Audio,
    Video,
    /// A preview uploaded beside one of the others.
    Thumbnail,
}

impl From<MediaKind> for UploadKind {
    fn from(kind: MediaKind) -> Self {
        match kind {
            MediaKind::Image => Self::Image,
            MediaKind::File => Self::File,
            MediaKind::Audio => Self::Audio,
            MediaKind::Video => Self::Video,
        }
    }
}

/// One object an upload ticket made room for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    /// `<owner>/<32 hex digits>`.
    pub key: String,
    pub owner: i64,
    pub kind: UploadKind,
    pub mime_type: String,
    pub size_bytes: i64,
    pub created_at_ms: i64,
    /// Its bytes were seen in storage at the declared size (checked at its first use).
    pub stored: bool,
}

/// The record of uploads, beside the messages that reference them: the message store
/// keeps each stored message's object keys with it (written, recalled and edited in the
/// message's own transaction), so "no message references it" is a query.
#[async_trait]
pub trait FileStore: Send + Sync + 'static {
    async fn add_uploads(&self, uploads: &[Upload]) -> Result<(), StoreError>;
    /// The uploads among `keys` (missing ones left out).
    async fn uploads(&self, keys: &[&str]) -> Result<Vec<Upload>, StoreError>;
    async fn mark_stored(&self, key: &str) -> Result<(), StoreError>;
    /// Up to `limit` keys of uploads created before `before_ms` that no stored message
    /// references.
    async fn unreferenced(&self, before_ms: i64, limit: u32) -> Result<Vec<String>, StoreError>;
    /// Forgets the upload unless a message references it now; true when it did.
    async fn forget_unreferenced(&self, key: &str) -> Result<bool, StoreError>;
}

/// Object storage: the bytes of uploads, reached by clients through signed URLs.
#[async_trait]
pub trait Blobs: Send + Sync + 'static {
    /// A URL that takes a PUT of exactly `size` bytes of `mime` at `key` for `ttl`, and the
    /// headers the PUT must carry.
    fn upload_url(
        &self,
        key: &str,
        size: i64,
        mime: &str,
        ttl: std::time::Duration,
    ) -> (String, Vec<(String, String)>);
    /// A URL that serves the object at `key` as `mime` for `ttl`.
    fn download_url(&self, key: &str, mime: &str, ttl: std::time::Duration) -> String;
    /// The stored object's length, `None` when there is none.
    async fn size(&self, key: &str) -> anyhow::Result<Option<i64>>;
    /// Deletes the object; deleting one that is not there succeeds.
    async fn delete(&self, key: &str) -> anyhow::Result<()>;
}
