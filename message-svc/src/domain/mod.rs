//! Sending messages: validation, the permission gate, seq and id allocation, and the one
//! transaction that stores a message with its outbox event. No tonic or sea-orm types here.

use std::sync::Arc;

use imesh_kit::{error::StoreError, ids::Snowflake, outbox::OutboxRow, seq::SeqAllocator};
use tokio::sync::Notify;

use crate::store::MessageStore;

mod types;

pub use types::{
    Content, Conversation, ConversationId, Message, Sent, Target, direct_conversation,
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
    #[error("seq: {0}")]
    RecallRefused(&'static str),
    /// group-svc refused the send (its message names the field and the reason).
    #[error("{1}")]
    GroupRefused(GroupRefusal, String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("user_id: {0}")]
    Refused(&'static str),
    #[error("relation-svc could not be asked")]
    Directory(#[source] anyhow::Error),
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

/// Who exists and who blocked whom, as relation-svc knows it.
#[async_trait::async_trait]
pub trait Directory: Send + Sync + 'static {
    async fn relation(&self, sender: i64, peer: i64) -> anyhow::Result<PeerRelation>;
}

/// Why group-svc refused a group send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupRefusal {
    NotFound,
    Forbidden,
    Precondition,
}

/// group-svc's send gate and member list, as message-svc needs them.
#[async_trait::async_trait]
pub trait GroupGate: Send + Sync + 'static {
    /// The members a message from `sender` to `group` goes to, when group-svc allows it now
    /// (membership as of the send). `Ok(Err(..))` is a refusal; `Err` a failure to ask.
    async fn recipients(
        &self,
        group: i64,
        sender: i64,
    ) -> anyhow::Result<Result<Vec<i64>, (GroupRefusal, String)>>;
    /// The group's current members (whom a recall reaches).
    async fn member_ids(&self, group: i64) -> anyhow::Result<Vec<i64>>;
    /// Whether `user` is a current member holding RECALL_OTHER.
    async fn may_recall_others(&self, group: i64, user: i64) -> anyhow::Result<bool>;
    /// The seqs of the group's conversation `user` may read: after their join seq and, once
    /// they left, up to their leave seq. `None` when they never were a member.
    async fn visibility(&self, group: i64, user: i64)
    -> anyhow::Result<Option<(i64, Option<i64>)>>;
}

/// The services message-svc asks before storing: relation-svc and group-svc.
pub struct Peers {
    pub relations: Arc<dyn Directory>,
    pub groups: Arc<dyn GroupGate>,
}

/// Most messages one history page holds.
pub const MAX_HISTORY_PAGE: u32 = 100;

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

/// Turns a stored message and its recipients into the outbox payload sync-svc receives.
pub type EncodeEvent = fn(&Message, &[i64]) -> Vec<u8>;

/// The outbox payloads message-svc writes: a new message, a recall.
#[derive(Clone, Copy)]
pub struct Encoders {
    pub message: EncodeEvent,
    pub recall: EncodeEvent,
}

pub struct Limits {
    pub max_content_bytes: usize,
    pub direct_policy: DirectPolicy,
    /// How long a sender may recall their own message.
    pub recall_window_ms: i64,
}

pub struct Messages {
    store: Arc<dyn MessageStore>,
    peers: Peers,
    seqs: Arc<SeqAllocator>,
    ids: Arc<Snowflake>,
    encode: Encoders,
    relay: Arc<Notify>,
    limits: Limits,
}

pub struct SendCommand {
    pub client_msg_id: String,
    pub to: Option<Target>,
    pub content: Option<Content>,
}

impl Messages {
    pub fn new(
        store: Arc<dyn MessageStore>,
        peers: Peers,
        seqs: Arc<SeqAllocator>,
        ids: Arc<Snowflake>,
        encode: Encoders,
        relay: Arc<Notify>,
        limits: Limits,
    ) -> Self {
        Self {
            store,
            peers,
            seqs,
            ids,
            encode,
            relay,
            limits,
        }
    }

    /// Stores a message from `sender` and queues its delivery; a repeated
    /// `(sender, client_msg_id)` returns the first send's result and stores nothing.
    pub async fn send(&self, sender: i64, command: SendCommand) -> Result<Sent, Error> {
        let client_msg_id = types::parse_client_msg_id(&command.client_msg_id)?;
        let to = command
            .to
            .ok_or_else(|| invalid("to", "set user_id or group_id"))?;
        let content = command
            .content
            .ok_or_else(|| invalid("content", "must be set"))?;
        content.validate(self.limits.max_content_bytes)?;
        if let Some(sent) = self.store.find_sent(sender, &client_msg_id).await? {
            return Ok(Sent {
                duplicate: true,
                ..sent
            });
        }
        let (conversation, recipients) = self.gate(sender, to).await?;
        let seq = self
            .seqs
            .next(&crate::keys::conversation_seq(&conversation))
            .await?;
        let message = Message {
            msg_id: self.ids.next_id(),
            conversation_id: conversation,
            seq,
            sender_id: sender,
            client_msg_id,
            content,
            server_time_ms: imesh_kit::ids::unix_ms(),
            recalled_by: 0,
            recalled_at_ms: 0,
        };
        let event = OutboxRow {
            id: message.msg_id,
            payload: (self.encode.message)(&message, &recipients),
        };
        match self.store.append(&message, event).await {
            Ok(()) => {}
            // A concurrent retry of the same send won the race: answer with its result.
            Err(StoreError::Conflict(_)) => {
                if let Some(sent) = self.store.find_sent(sender, &message.client_msg_id).await? {
                    return Ok(Sent {
                        duplicate: true,
                        ..sent
                    });
                }
                return Err(StoreError::Conflict("message".into()).into());
            }
            Err(e) => return Err(e.into()),
        }
        self.relay.notify_one();
        Ok(Sent::of(&message))
    }

    /// Decides whether `sender` may write to `to`; returns the conversation and recipients.
    async fn gate(&self, sender: i64, to: Target) -> Result<(ConversationId, Vec<i64>), Error> {
        match to {
            Target::User(peer) => {
                if peer <= 0 {
                    return Err(invalid("user_id", "must be a user id"));
                }
                if peer == sender {
                    return Err(invalid("user_id", "cannot message yourself"));
                }
                let relation = self
                    .peers
                    .relations
                    .relation(sender, peer)
                    .await
                    .map_err(Error::Directory)?;
                self.allowed(peer, relation)?;
                Ok((direct_conversation(sender, peer), vec![sender, peer]))
            }
            Target::Group(group) => {
                if group <= 0 {
                    return Err(invalid("group_id", "must be a group id"));
                }
                let recipients = self
                    .peers
                    .groups
                    .recipients(group, sender)
                    .await
                    .map_err(Error::Directory)?
                    .map_err(|(why, message)| Error::GroupRefused(why, message))?;
                Ok((Conversation::Group(group).id(), recipients))
            }
        }
    }
}

impl Messages {
    /// Recalls message `seq` of a conversation as `user`: their own within the recall
    /// window, or anyone's in a group where they hold RECALL_OTHER. Idempotent.
    pub async fn recall(
        &self,
        user: i64,
        conversation_id: &str,
        seq: i64,
    ) -> Result<Message, Error> {
        let conversation = Conversation::parse(conversation_id)?;
        let (after, until) = self.visible(user, conversation).await?;
        let found = self.store.message(conversation_id, seq).await?;
        let message = found
            .filter(|m| m.seq > after && until.is_none_or(|u| m.seq <= u))
            .ok_or(Error::NoMessage)?;
        if message.recalled_by != 0 {
            return Ok(message);
        }
        let now = imesh_kit::ids::unix_ms();
        let own_in_time = message.sender_id == user
            && now - message.server_time_ms <= self.limits.recall_window_ms;
        if !own_in_time {
            let moderator = match conversation {
                Conversation::Group(g) => self
                    .peers
                    .groups
                    .may_recall_others(g, user)
                    .await
                    .map_err(Error::Directory)?,
                Conversation::Direct(..) => false,
            };
            if !moderator {
                return Err(Error::RecallRefused(if message.sender_id == user {
                    "the recall window has passed"
                } else {
                    "only the sender, or a group admin, may recall this message"
                }));
            }
        }
        let recipients = match conversation {
            Conversation::Group(g) => self
                .peers
                .groups
                .member_ids(g)
                .await
                .map_err(Error::Directory)?,
            Conversation::Direct(a, b) => vec![a, b],
        };
        let recalled = Message {
            content: Content::Text(String::new()),
            recalled_by: user,
            recalled_at_ms: now,
            ..message
        };
        let event = OutboxRow {
            id: self.ids.next_id(),
            payload: (self.encode.recall)(&recalled, &recipients),
        };
        if !self
            .store
            .recall(conversation_id, seq, user, now, event)
            .await?
        {
            // Someone recalled it meanwhile: answer with what is stored.
            return self
                .store
                .message(conversation_id, seq)
                .await?
                .ok_or(Error::NoMessage);
        }
        self.relay.notify_one();
        Ok(recalled)
    }

    /// `user`'s view of a conversation's history before `before_seq` (0: the latest),
    /// newest first, and whether older visible messages remain.
    pub async fn history(
        &self,
        user: i64,
        conversation_id: &str,
        before_seq: i64,
        limit: u32,
    ) -> Result<(Vec<Message>, bool), Error> {
        let limit = imesh_kit::page_limit(limit, 50, MAX_HISTORY_PAGE)
            .map_err(|reason| invalid("limit", reason))?;
        let (after, until) = self
            .visible(user, Conversation::parse(conversation_id)?)
            .await?;
        let before = if before_seq > 0 {
            before_seq - 1
        } else {
            i64::MAX
        };
        let up_to = until.map_or(before, |u| u.min(before));
        let mut page = self
            .store
            .history(conversation_id, after, up_to, limit + 1)
            .await?;
        let more = page.len() > limit as usize;
        page.truncate(limit as usize);
        Ok((page, more))
    }

    /// The seq range `(after, until]` of a conversation `user` may read.
    async fn visible(
        &self,
        user: i64,
        conversation: Conversation,
    ) -> Result<(i64, Option<i64>), Error> {
        let group = match conversation {
            Conversation::Direct(a, b) if user == a || user == b => return Ok((0, None)),
            Conversation::Direct(..) => return Err(Error::NotParticipant),
            Conversation::Group(group) => group,
        };
        match self
            .peers
            .groups
            .visibility(group, user)
            .await
            .map_err(Error::Directory)?
        {
            Some(range) => Ok(range),
            None => Err(Error::NotParticipant),
        }
    }

    /// A conversation's latest stored seq (0 before its first message).
    pub async fn current_seq(&self, conversation_id: &str) -> Result<i64, Error> {
        if conversation_id.is_empty() || conversation_id.len() > 64 {
            return Err(invalid("conversation_id", "must be 1–64 characters"));
        }
        Ok(self.store.max_seq(conversation_id).await?)
    }

    /// The direct-send rules: the peer exists, neither blocked the other, and the policy.
    fn allowed(&self, peer: i64, relation: PeerRelation) -> Result<(), Error> {
        if !relation.exists {
            return Err(Error::UnknownUser(peer));
        }
        if relation.peer_blocked_sender {
            return Err(Error::Refused("this user does not accept your messages"));
        }
        if relation.sender_blocked_peer {
            return Err(Error::Refused(
                "you blocked this user; unblock them to send",
            ));
        }
        if self.limits.direct_policy == DirectPolicy::FriendsOnly && !relation.peer_lists_sender {
            return Err(Error::Refused("only friends may message this user"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
