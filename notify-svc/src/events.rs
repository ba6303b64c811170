//! The events notify-svc pushes and reads, between their wire form (a `SyncEvent`) and the
//! domain: the codec functions of [`crate::domain::ports`].

use bytes::Bytes;
use imesh_protos::{
    message::content,
    sync::{PresenceChanged, SyncEvent, Typing, sync_event::Kind},
};
use prost::Message as _;

use crate::domain::ports::OfflineMessage;

/// The encoded Typing event (the domain's [`EncodeTyping`](crate::domain::ports::EncodeTyping)).
pub fn encode_typing(conversation_id: &str, user: i64) -> Bytes {
    encode(Kind::Typing(Typing {
        conversation_id: conversation_id.to_owned(),
        user_id: user,
    }))
}

/// The encoded PresenceChanged event (the domain's
/// [`EncodePresence`](crate::domain::ports::EncodePresence)).
pub fn encode_presence(user: i64, platforms: &[String]) -> Bytes {
    encode(Kind::Presence(PresenceChanged {
        user_id: user,
        online: !platforms.is_empty(),
        platforms: platforms.to_vec(),
    }))
}

fn encode(kind: Kind) -> Bytes {
    SyncEvent { kind: Some(kind) }.encode_to_vec().into()
}

/// The message an encoded event holds, if it holds one (the domain's
/// [`DecodeMessage`](crate::domain::ports::DecodeMessage)).
pub fn decode_message(event: &Bytes) -> Option<OfflineMessage> {
    let Ok(SyncEvent {
        kind: Some(Kind::Message(message)),
    }) = SyncEvent::decode(event.clone())
    else {
        return None;
    };
    let kind = message.content.and_then(|c| c.kind);
    let body = match &kind {
        Some(content::Kind::Text(t)) => t.text.clone(),
        Some(content::Kind::Image(_)) => "[image]".into(),
        Some(content::Kind::File(f)) => format!("[file] {}", f.name),
        Some(content::Kind::Audio(_)) => "[voice]".into(),
        Some(content::Kind::Video(_)) => "[video]".into(),
        Some(content::Kind::Custom(_)) | Some(content::Kind::Notice(_)) | None => {
            "[message]".into()
        }
    };
    Some(OfflineMessage {
        conversation_id: message.conversation_id,
        msg_id: message.msg_id,
        seq: message.seq,
        sender_id: message.sender_id,
        sent_at_ms: message.server_time_ms,
        notice: matches!(kind, Some(content::Kind::Notice(_)) | None),
        body,
    })
}
