//! The message domain's value types and their parsing rules.

use super::{Content, Error, invalid};

/// A conversation: `d:<lo>:<hi>` between two users, `g:<group>` for a group, `s:<user>` for
/// the notices the system account sends a user.
pub type ConversationId = String;

/// The one conversation between two users, whichever of them writes.
pub fn direct_conversation(a: i64, b: i64) -> ConversationId {
    Conversation::Direct(a.min(b), a.max(b)).id()
}

/// A conversation id taken apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conversation {
    /// Between two users, the lower id first.
    Direct(i64, i64),
    Group(i64),
    /// From the system account to one user.
    Notices(i64),
}

impl Conversation {
    pub fn parse(raw: &str) -> Result<Self, Error> {
        let ids =
            |rest: &str| -> Vec<i64> { rest.split(':').map(|p| p.parse().unwrap_or(0)).collect() };
        let parsed = match raw.split_once(':') {
            Some(("d", rest)) => match ids(rest).as_slice() {
                &[a, b] if 0 < a && a < b => Some(Self::Direct(a, b)),
                _ => None,
            },
            Some(("g", rest)) => rest.parse().ok().filter(|g| *g > 0).map(Self::Group),
            Some(("s", rest)) => rest.parse().ok().filter(|u| *u > 0).map(Self::Notices),
            _ => None,
        };
        parsed.ok_or_else(|| {
            invalid(
                "conversation_id",
                "must be d:<user>:<user> (lower id first), g:<group> or s:<user>",
            )
        })
    }

    pub fn id(self) -> ConversationId {
        match self {
            Self::Direct(a, b) => format!("d:{a}:{b}"),
            Self::Group(g) => format!("g:{g}"),
            Self::Notices(u) => format!("s:{u}"),
        }
    }
}

/// Who sends: a user, or the system account (internal callers), stored as sender 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sender {
    User(i64),
    System,
}

impl Sender {
    pub fn id(self) -> i64 {
        match self {
            Self::User(id) => id,
            Self::System => 0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    User(i64),
    Group(i64),
}

/// Whom a group message mentions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mentions {
    pub users: Vec<i64>,
    /// @all.
    pub all: bool,
}

impl Mentions {
    pub fn is_empty(&self) -> bool {
        self.users.is_empty() && !self.all
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub msg_id: i64,
    pub conversation_id: ConversationId,
    pub seq: i64,
    pub sender_id: i64,
    pub client_msg_id: String,
    pub content: Content,
    pub mentions: Mentions,
    /// 0, or for a message asking for read receipts the group's map bound when it was sent
    /// (members with a lower map id could read it).
    pub receipt_bound: u32,
    pub server_time_ms: i64,
    /// Who recalled it (0: not recalled); a recalled message keeps no content.
    pub recalled_by: i64,
    pub recalled_at_ms: i64,
    /// 1 as sent, one more per edit; when it was last edited (0: never).
    pub version: i32,
    pub edited_at_ms: i64,
    pub reply: Option<Reply>,
    pub forwarded: Option<Forwarded>,
    /// Its reactions as one reader sees them (filled in by history; empty elsewhere).
    pub reactions: Vec<ReactionCount>,
}

/// How many reacted to a message with `emoji`; `mine` when the reader is among them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReactionCount {
    pub emoji: String,
    pub count: i64,
    pub mine: bool,
}

/// One user's reaction to a message, added or taken back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReactionChange {
    pub conversation_id: ConversationId,
    pub seq: i64,
    pub emoji: String,
    pub user_id: i64,
    pub added: bool,
    pub at_ms: i64,
}

/// What a reaction change came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReactOutcome {
    Changed,
    /// It was so already (added twice, or taken back when absent).
    Unchanged,
    /// The emoji would be one more than a message may carry.
    Full,
}

/// A message whose reactions moved in a conversation that hears of them coalesced, and
/// how many changes its mark has counted (a flush forgets the mark only at that count).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MovedReactions {
    pub conversation_id: ConversationId,
    pub seq: i64,
    pub changes: i64,
}

/// A pinned message of a conversation: who pinned it, when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pin {
    pub seq: i64,
    pub pinned_by: i64,
    pub pinned_at_ms: i64,
}

/// A pin as a member reads it: the pin and its message as it reads now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedMessage {
    pub pin: Pin,
    pub message: Message,
}

/// A message pinned or unpinned, as members' devices are told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinChange {
    pub conversation_id: ConversationId,
    pub pin: Pin,
    pub pinned: bool,
}

/// Messages hidden from one user's view of a conversation: `seqs`, and everything up to
/// `cleared_seq` (0: none cleared by this change).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hidden {
    pub conversation_id: ConversationId,
    pub user: i64,
    pub seqs: Vec<i64>,
    pub cleared_seq: i64,
}

/// What a pin came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinOutcome {
    Pinned,
    AlreadyPinned,
    /// The conversation holds the most pins it may.
    Full,
}

/// What a reply quotes: an earlier message of its conversation, as it was when quoted.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Reply {
    pub seq: i64,
    pub sender_id: i64,
    pub excerpt: String,
    /// Set when read back if the quoted message was recalled since; never stored.
    #[serde(skip)]
    pub recalled: bool,
}

/// Where a forwarded message first came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Forwarded {
    pub msg_id: i64,
    pub sender_id: i64,
    pub server_time_ms: i64,
}

/// The acknowledgement of a send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    pub msg_id: i64,
    pub conversation_id: ConversationId,
    pub seq: i64,
    pub server_time_ms: i64,
    /// True when this answers a retry of an earlier send.
    pub duplicate: bool,
}

impl Sent {
    pub fn of(message: &Message) -> Self {
        Self {
            msg_id: message.msg_id,
            conversation_id: message.conversation_id.clone(),
            seq: message.seq,
            server_time_ms: message.server_time_ms,
            duplicate: false,
        }
    }
}

pub(super) fn parse_client_msg_id(raw: &str) -> Result<String, Error> {
    if raw.is_empty() || raw.len() > 64 || raw.chars().any(char::is_control) {
        return Err(invalid(
            "client_msg_id",
            "must be 1–64 printable characters",
        ));
    }
    Ok(raw.to_owned())
}
