//! What message-svc tells sync-svc: the outbox payload of a stored message, an encoded
//! `imesh.sync.v1.Fanout` that the kit's `SyncSink` relays.
use imesh_protos::{message as pb, sync as sync_pb};
use prost::Message as _;

use crate::domain::{Content, Message};

/// The idempotency key sync-svc dedups a message event on.
pub fn message_event_id(message: &Message) -> String {
    format!("m:{}:{}", message.conversation_id, message.seq)
}

/// The outbox payload for `message`, to be appended to each recipient's inbox.
pub fn encode_fanout(message: &Message, recipients: &[i64]) -> Vec<u8> {
    sync_pb::Fanout {
        event_id: message_event_id(message),
        recipient_ids: recipients.to_vec(),
        event: Some(sync_pb::SyncEvent {
            kind: Some(sync_pb::sync_event::Kind::Message(message_to_proto(
                message,
            ))),
        }),
    }
    .encode_to_vec()
}

pub fn message_to_proto(message: &Message) -> pb::Message {
    pb::Message {
        msg_id: message.msg_id,
        conversation_id: message.conversation_id.clone(),
        seq: message.seq,
        sender_id: message.sender_id,
        client_msg_id: message.client_msg_id.clone(),
        content: (message.recalled_by == 0).then(|| content_to_proto(&message.content)),
        server_time_ms: message.server_time_ms,
        recalled_by: message.recalled_by,
        recalled_at_ms: message.recalled_at_ms,
    }
}

pub fn content_to_proto(content: &Content) -> pb::Content {
    use pb::content::Kind;
    let kind = match content {
        Content::Text(text) => Kind::Text(pb::Text { text: text.clone() }),
        Content::Custom(json) => Kind::Custom(pb::Custom { json: json.clone() }),
    };
    pb::Content { kind: Some(kind) }
}

/// The idempotency key sync-svc dedups a recall event on.
pub fn recall_event_id(message: &Message) -> String {
    format!("r:{}:{}", message.conversation_id, message.seq)
}

/// The outbox payload telling `recipients` that `message` was recalled.
pub fn encode_recall(message: &Message, recipients: &[i64]) -> Vec<u8> {
    let recalled = pb::Recalled {
        conversation_id: message.conversation_id.clone(),
        seq: message.seq,
        msg_id: message.msg_id,
        recalled_by: message.recalled_by,
        recalled_at_ms: message.recalled_at_ms,
    };
    sync_pb::Fanout {
        event_id: recall_event_id(message),
        recipient_ids: recipients.to_vec(),
        event: Some(sync_pb::SyncEvent {
            kind: Some(sync_pb::sync_event::Kind::Recalled(recalled)),
        }),
    }
    .encode_to_vec()
}
