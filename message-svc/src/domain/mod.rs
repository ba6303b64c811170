//! Sending messages: validation, the permission gate, rate limits, seq and id allocation, and
//! the one transaction that stores a message with its outbox event; reading them back and
//! recalling them. No tonic or sea-orm types here.

use std::sync::Arc;

use imesh_kit::{error::StoreError, ids::Snowflake, outbox::Backlog, seq::SeqAllocator};
use tokio::sync::Notify;

mod content;
mod files;
pub mod ports;
mod rate;
mod react;
mod read;
mod search;
mod send;
mod types;

pub use content::{Content, Media, MediaKind, Notice};
pub use files::{Download, FileRules, Files, KindLimit, Ticket, UploadRequest, UploadTarget};
pub use ports::{
    Audience, BeforeSend, BeforeSendHook, Blobs, Directory, FileStore, GateAnswer, Gated,
    GroupGate, GroupRefusal, MessageStore, Peers, Queued, Upload, UploadKind, Verdict,
};
pub use rate::{RateLimited, RateLimits};
pub use read::HistoryPage;
pub use search::{SearchPage, SearchScope};
pub use send::{NoticeCommand, NoticeOutcome, NoticeTarget, SendCommand};
pub use types::{
    Conversation, ConversationId, Forwarded, Hidden, Mentions, Message, MovedReactions, Pin,
    PinChange, PinOutcome, PinnedMessage, ReactOutcome, ReactionChange, ReactionCount, Reply,
    Sender, Sent, Target, direct_conversation,
};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    #[error("content: {size} bytes is over the limit of {limit} bytes")]
    TooLarge { size: usize, limit: usize },
    #[error("user_id: no user {0}")]
    UnknownUser(i64),
    #[error("conversation_id: you are not in this conversation")]
    NotParticipant,
    #[error("seq: no such message")]
    NoMessage,
    #[error("seq: the message holds no uploaded object")]
    NoObject,
    /// A field names something not ready for this use yet.
    #[error("{0}: {1}")]
    Precondition(&'static str, &'static str),
    #[error("files: this deployment keeps no files (message-svc's files.store is off)")]
    FilesOff,
    #[error("object storage could not be reached")]
    Blobs(#[source] anyhow::Error),
    #[error("seq: {0}")]
    RecallRefused(&'static str),
    #[error("seq: only the sender may edit a message")]
    NotSender,
    #[error("seq: {0}")]
    EditRefused(&'static str),
    #[error("conversation_id: {0}")]
    PinRefused(&'static str),
    #[error("seq: the conversation has {MAX_PINS} pins already; unpin one first")]
    PinsFull,
    #[error("seq: a recalled message takes no reactions")]
    ReactRecalled,
    #[error("emoji: the message carries {MAX_EMOJIS} different reactions already")]
    ReactionsFull,
    /// The app server's before-send hook refused the message, for this reason.
    #[error("content: refused by the app server: {0}")]
    HookRefused(String),
    /// The before-send hook could not be asked and it fails closed.
    #[error("the app server's before-send hook did not answer")]
    HookUnavailable(#[source] anyhow::Error),
    #[error("content.notice: only internal callers (the system actor) send notices")]
    NoticeForbidden,
    #[error(transparent)]
    RateLimited(#[from] RateLimited),
    /// group-svc refused the send (its message names the field and the reason).
    #[error("{1}")]
    GroupRefused(GroupRefusal, String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("user_id: {0}")]
    Refused(&'static str),
    #[error("relation-svc or group-svc could not be asked")]
    Directory(#[source] anyhow::Error),
    /// Delivery is too far behind to take more now.
    #[error("send: delivery is {} ms behind; retry after the wait", .0.as_millis())]
    Overloaded(std::time::Duration),
}

pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Error {
    Error::Invalid {
        field,
        reason: reason.into(),
    }
}

/// What relation-svc knows of a direct conversation's two ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PeerRelation {
    /// The peer exists and is not disabled.
    pub exists: bool,
    /// The peer has the sender in their friend list.
    pub peer_lists_sender: bool,
    pub sender_blocked_peer: bool,
    pub peer_blocked_sender: bool,
}

/// Most messages one history page holds.
pub const MAX_HISTORY_PAGE: u32 = 100;
/// Most members one message mentions by id.
pub const MAX_MENTIONS: usize = 100;
/// The permission bit @all needs (group-svc's AT_ALL).
pub const AT_ALL: u32 = 128;
/// The permission bit recalling others' messages needs (group-svc's RECALL_OTHER).
pub const RECALL_OTHER: u32 = 2;
/// The permission bit pinning needs (group-svc's PIN).
pub const PIN: u32 = 256;
/// Most messages one conversation keeps pinned.
pub const MAX_PINS: usize = 50;
/// Most messages one DeleteForMe hides.
pub const MAX_HIDE: usize = 100;
/// Most different emojis one message carries.
pub const MAX_EMOJIS: usize = 20;
/// Longest emoji (or shortcode) a reaction names, in bytes.
pub const MAX_EMOJI_BYTES: usize = 32;

/// Who may start a direct conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DirectPolicy {
    /// Anyone not blocked.
    #[default]
    Anyone,
    /// Only users the peer lists as friends.
    FriendsOnly,
}

/// Turns a stored message and its audience into the outbox payload sync-svc receives.
pub type EncodeEvent = fn(&Message, &Audience) -> Vec<u8>;

/// The outbox payloads message-svc writes: a new message, a recall, an edit, a pin, a
/// hide, a reaction and a large group's reaction counts.
#[derive(Clone, Copy)]
pub struct Encoders {
    pub message: EncodeEvent,
    pub recall: EncodeEvent,
    pub edit: EncodeEvent,
    pub pin: fn(&PinChange, &Audience) -> Vec<u8>,
    pub hidden: fn(&Hidden) -> Vec<u8>,
    pub reaction: fn(&ReactionChange, &Audience) -> Vec<u8>,
    pub reaction_counts: fn(&MovedReactions, &[ReactionCount], &Audience) -> Vec<u8>,
}

pub struct Limits {
    pub max_content_bytes: usize,
    pub direct_policy: DirectPolicy,
    /// How long a sender may recall their own message.
    pub recall_window_ms: i64,
    /// How long a sender may edit their own message.
    pub edit_window_ms: i64,
    /// Largest group whose messages may ask for read receipts.
    pub receipt_max_members: u32,
    /// Sends are refused while the outbox relay has been behind for longer than this.
    pub max_relay_lag: std::time::Duration,
    /// Groups with more members hear of reactions as coalesced counts.
    pub reaction_coalesce_members: usize,
}

pub struct Messages {
    store: Arc<dyn MessageStore>,
    peers: Peers,
    seqs: Arc<SeqAllocator>,
    /// Held from taking seqs until their messages are queued for the store's writer, so
    /// the writer commits this process's messages in seq order.
    numbering: tokio::sync::Mutex<()>,
    ids: Arc<Snowflake>,
    encode: Encoders,
    relay: Arc<Notify>,
    backlog: Backlog,
    limits: Limits,
    rates: RateLimits,
    files: Files,
}

/// What [`Messages`] is built from besides its store and peers.
pub struct Parts {
    pub seqs: Arc<SeqAllocator>,
    pub ids: Arc<Snowflake>,
    pub encode: Encoders,
    /// Woken after an event stored outside the group commit (a recall) so the outbox relay
    /// runs at once; the group commit hands its events to the relay itself.
    pub relay: Arc<Notify>,
    /// How far behind the outbox relay is.
    pub backlog: Backlog,
    pub limits: Limits,
    pub rates: RateLimits,
    pub files: Files,
}

impl Messages {
    pub fn new(store: Arc<dyn MessageStore>, peers: Peers, parts: Parts) -> Self {
        let Parts {
            seqs,
            ids,
            encode,
            relay,
            backlog,
            limits,
            rates,
            files,
        } = parts;
        Self {
            store,
            peers,
            seqs,
            numbering: tokio::sync::Mutex::new(()),
            ids,
            encode,
            relay,
            backlog,
            limits,
            rates,
            files,
        }
    }

    /// A conversation's latest stored seq (0 before its first message).
    pub async fn current_seq(&self, conversation_id: &str) -> Result<i64, Error> {
        if conversation_id.is_empty() || conversation_id.len() > 64 {
            return Err(invalid("conversation_id", "must be 1–64 characters"));
        }
        Ok(self.store.max_seq(conversation_id).await?)
    }
}

#[cfg(test)]
mod tests;
