//! Sending messages: validation, the permission gate, seq and id allocation, and the one
//! transaction that stores a message with its outbox event. No tonic or sea-orm types here.

use std::sync::Arc;

use imesh_kit::{error::StoreError, ids::Snowflake, outbox::OutboxRow, seq::SeqAllocator};
use tokio::sync::Notify;

use crate::store::MessageStore;

mod types;

pub use types::{Content, ConversationId, Message, Sent, Target, direct_conversation};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    #[error("content: {size} bytes is over the limit of {limit} bytes")]
    TooLarge { size: usize, limit: usize },
    #[error("user_id: no user {0}")]
    UnknownUser(i64),
    #[error("group_id: group conversations are not served by this version yet")]
    GroupsUnsupported,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("relation-svc could not be asked")]
    Directory(#[source] anyhow::Error),
}

pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Error {
    Error::Invalid {
        field,
        reason: reason.into(),
    }
}

/// Who exists, as relation-svc knows it.
#[async_trait::async_trait]
pub trait Directory: Send + Sync + 'static {
    /// The ids among `ids` that belong to existing users.
    async fn existing(&self, ids: &[i64]) -> anyhow::Result<Vec<i64>>;
}

/// Turns a stored message and its recipients into the outbox payload sync-svc receives.
pub type EncodeEvent = fn(&Message, &[i64]) -> Vec<u8>;

pub struct Limits {
    pub max_content_bytes: usize,
}

pub struct Messages {
    store: Arc<dyn MessageStore>,
    directory: Arc<dyn Directory>,
    seqs: Arc<SeqAllocator>,
    ids: Arc<Snowflake>,
    encode: EncodeEvent,
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
        directory: Arc<dyn Directory>,
        seqs: Arc<SeqAllocator>,
        ids: Arc<Snowflake>,
        encode: EncodeEvent,
        relay: Arc<Notify>,
        limits: Limits,
    ) -> Self {
        Self {
            store,
            directory,
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
        };
        let event = OutboxRow {
            id: message.msg_id,
            payload: (self.encode)(&message, &recipients),
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
                let existing = self
                    .directory
                    .existing(&[peer])
                    .await
                    .map_err(Error::Directory)?;
                if !existing.contains(&peer) {
                    return Err(Error::UnknownUser(peer));
                }
                Ok((direct_conversation(sender, peer), vec![sender, peer]))
            }
            Target::Group(_) => Err(Error::GroupsUnsupported),
        }
    }
}

#[cfg(test)]
mod tests;
