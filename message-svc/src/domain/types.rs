//! The message domain's value types and their parsing rules.

use super::{Error, invalid};

/// A conversation: `d:<lo>:<hi>` between two users, `g:<group>` for a group.
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
            _ => None,
        };
        parsed.ok_or_else(|| {
            invalid(
                "conversation_id",
                "must be d:<user>:<user> (lower id first) or g:<group>",
            )
        })
    }

    pub fn id(self) -> ConversationId {
        match self {
            Self::Direct(a, b) => format!("d:{a}:{b}"),
            Self::Group(g) => format!("g:{g}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    User(i64),
    Group(i64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    Text(String),
    /// Application JSON, opaque to imesh.
    Custom(String),
}

impl Content {
    pub fn validate(&self, limit: usize) -> Result<(), Error> {
        let (field, body) = match self {
            Self::Text(text) => ("content.text", text),
            Self::Custom(json) => ("content.custom.json", json),
        };
        if body.trim().is_empty() {
            return Err(invalid(field, "must not be empty"));
        }
        if body.len() > limit {
            return Err(Error::TooLarge {
                size: body.len(),
                limit,
            });
        }
        if let Self::Custom(json) = self {
            serde_json::from_str::<serde::de::IgnoredAny>(json)
                .map_err(|e| invalid(field, format!("is not JSON: {e}")))?;
        }
        Ok(())
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
    pub server_time_ms: i64,
    /// Who recalled it (0: not recalled); a recalled message keeps no content.
    pub recalled_by: i64,
    pub recalled_at_ms: i64,
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
