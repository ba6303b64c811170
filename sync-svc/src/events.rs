//! The events sync-svc makes itself, encoded for devices (the domain's
//! [`Encoders`](crate::domain::Encoders)), and the app server's webhook payloads.

use imesh_protos::sync as pb;
use prost::Message as _;

use crate::{
    api::convert::{count_to_proto, settings_to_proto},
    domain::{ReceiptCount, Settings},
};

/// The encoded ReceiptCount event (the domain's [`crate::domain::EncodeReceipt`]).
pub fn encode_receipt(count: &ReceiptCount) -> bytes::Bytes {
    pb::SyncEvent {
        kind: Some(pb::sync_event::Kind::Receipt(count_to_proto(count))),
    }
    .encode_to_vec()
    .into()
}

/// The proto encoders of the events sync-svc makes itself.
pub const ENCODERS: crate::domain::Encoders = crate::domain::Encoders {
    read: encode_read,
    advanced: encode_advanced,
    settings: encode_settings,
    removed: encode_removed,
    receipt: encode_receipt,
    webhook: webhook_payload,
};

/// The app server's webhook payload of an appended event: `{"event_id", "type", "data"}`,
/// `data` in the proto3 JSON mapping, for messages stored, edited and recalled, group
/// changes and friendship changes; `None` for the other kinds.
pub fn webhook_payload(event_id: &str, payload: &[u8]) -> Option<Vec<u8>> {
    use pb::sync_event::Kind;
    let event = pb::SyncEvent::decode(payload).ok()?;
    let (kind, data) = match event.kind? {
        Kind::Message(m) => ("message.stored", serde_json::to_value(m)),
        Kind::Edited(e) => ("message.edited", serde_json::to_value(e)),
        Kind::Recalled(r) => ("message.recalled", serde_json::to_value(r)),
        Kind::Group(g) => ("group.changed", serde_json::to_value(g)),
        Kind::Friendship(f) => ("friendship.changed", serde_json::to_value(f)),
        _ => return None,
    };
    let body = serde_json::json!({ "event_id": event_id, "type": kind, "data": data.ok()? });
    serde_json::to_vec(&body).ok()
}

/// The encoded ConversationRemoved event (the domain's [`crate::domain::EncodeRemoved`]).
pub fn encode_removed(conversation_id: &str, removed_seq: i64) -> bytes::Bytes {
    pb::SyncEvent {
        kind: Some(pb::sync_event::Kind::Removed(pb::ConversationRemoved {
            conversation_id: conversation_id.to_owned(),
            removed_seq,
        })),
    }
    .encode_to_vec()
    .into()
}

/// The encoded ReadMoved event (the domain's [`crate::domain::EncodeRead`]).
pub fn encode_read(conversation_id: &str, user: i64, read_seq: i64) -> bytes::Bytes {
    pb::SyncEvent {
        kind: Some(pb::sync_event::Kind::Read(pb::ReadMoved {
            conversation_id: conversation_id.to_owned(),
            user_id: user,
            read_seq,
        })),
    }
    .encode_to_vec()
    .into()
}

/// The encoded ConversationSettings event (the domain's [`crate::domain::EncodeSettings`]).
pub fn encode_settings(conversation_id: &str, settings: Settings) -> bytes::Bytes {
    pb::SyncEvent {
        kind: Some(pb::sync_event::Kind::Settings(settings_to_proto(
            conversation_id,
            settings,
        ))),
    }
    .encode_to_vec()
    .into()
}

/// The encoded ConversationAdvanced hint (the domain's [`crate::domain::EncodeAdvanced`]).
pub fn encode_advanced(conversation_id: &str, latest_seq: i64) -> bytes::Bytes {
    pb::SyncEvent {
        kind: Some(pb::sync_event::Kind::Advanced(pb::ConversationAdvanced {
            conversation_id: conversation_id.to_owned(),
            latest_seq,
        })),
    }
    .encode_to_vec()
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(kind: pb::sync_event::Kind) -> Vec<u8> {
        pb::SyncEvent { kind: Some(kind) }.encode_to_vec()
    }

    #[test]
    fn webhooks_carry_message_group_and_friendship_events_typed_with_their_data() {
        use imesh_protos::message as m;
        use pb::sync_event::Kind;
        let edited = Kind::Edited(m::Edited {
            conversation_id: "d:1:2".into(),
            seq: 4,
            version: 2,
            ..Default::default()
        });
        let body = webhook_payload("e:d:1:2:4:2", &payload(edited)).unwrap();
        let event: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(event["type"], "message.edited");
        assert_eq!(event["event_id"], "e:d:1:2:4:2");
        assert_eq!(event["data"]["seq"], "4", "the proto3 JSON mapping");
        let recalled = Kind::Recalled(m::Recalled {
            seq: 3,
            ..Default::default()
        });
        let body = webhook_payload("r", &payload(recalled)).unwrap();
        let event: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(event["type"], "message.recalled");
        let typing = Kind::Typing(pb::Typing::default());
        assert_eq!(
            webhook_payload("t", &payload(typing)),
            None,
            "not for the app server"
        );
        assert_eq!(webhook_payload("x", b"not a proto \xff"), None);
    }
}
