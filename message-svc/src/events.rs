//! What message-svc tells sync-svc: the outbox payload of a stored message, an encoded
//! `imesh.sync.v1.Fanout` that the kit's `SyncSink` relays.

use imesh_protos::{message as pb, sync as sync_pb};
use prost::Message as _;

use crate::{
    api::convert::{content_to_proto, hidden_to_proto, message_to_proto, reactions_to_proto},
    domain::{Audience, Hidden, Message, MovedReactions, PinChange, ReactionChange, ReactionCount},
};

/// The outbox payload carrying `kind` to `audience`: its recipients' inboxes, or a
/// read-fanout group; sync-svc dedups it on `event_id`.
fn fanout(
    event_id: String,
    audience: &Audience,
    receipt_map_bound: u32,
    kind: sync_pb::sync_event::Kind,
) -> Vec<u8> {
    let (recipient_ids, read_fanout_group_id) = match audience {
        Audience::Users(users) => (users.clone(), 0),
        Audience::Group(group) => (Vec::new(), *group),
    };
    sync_pb::Fanout {
        event_id,
        recipient_ids,
        read_fanout_group_id,
        receipt_map_bound,
        event: Some(sync_pb::SyncEvent { kind: Some(kind) }),
    }
    .encode_to_vec()
}

/// The idempotency key sync-svc dedups a message event on: its msg id, which grows with
/// time, so each commit's new keys land together at the end of sync-svc's event index
/// rather than on a page of their own per conversation.
fn message_event_id(message: &Message) -> String {
    format!("m:{}", message.msg_id)
}

/// The outbox payload for `message`, to be appended to each recipient's inbox.
pub fn encode_fanout(message: &Message, audience: &Audience) -> Vec<u8> {
    fanout(
        message_event_id(message),
        audience,
        message.receipt_bound,
        sync_pb::sync_event::Kind::Message(message_to_proto(message)),
    )
}

/// A short stable tag of a text for event ids (emojis may be any bytes a collation folds).
fn tag(text: &str) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one(text)
}

/// The outbox payload telling `audience` that a user reacted to a message or took it back.
pub fn encode_reaction(change: &ReactionChange, audience: &Audience) -> Vec<u8> {
    let event_id = format!(
        "r:{}:{}:{}:{}:{}:{:x}",
        change.conversation_id,
        change.seq,
        change.user_id,
        change.at_ms,
        change.added,
        tag(&change.emoji)
    );
    let changed = pb::ReactionChanged {
        conversation_id: change.conversation_id.clone(),
        seq: change.seq,
        emoji: change.emoji.clone(),
        user_id: change.user_id,
        added: change.added,
        at_ms: change.at_ms,
    };
    fanout(
        event_id,
        audience,
        0,
        sync_pb::sync_event::Kind::Reaction(changed),
    )
}

/// The outbox payload telling a large group's `audience` a message's reaction counts.
pub fn encode_reaction_counts(
    moved: &MovedReactions,
    counts: &[ReactionCount],
    audience: &Audience,
) -> Vec<u8> {
    let event_id = format!(
        "rc:{}:{}:{}:{}",
        moved.conversation_id,
        moved.seq,
        imesh_kit::ids::unix_ms(),
        moved.changes
    );
    let counts = pb::ReactionCounts {
        conversation_id: moved.conversation_id.clone(),
        seq: moved.seq,
        reactions: reactions_to_proto(counts),
    };
    fanout(
        event_id,
        audience,
        0,
        sync_pb::sync_event::Kind::ReactionCounts(counts),
    )
}

/// The idempotency key sync-svc dedups a recall event on.
pub fn recall_event_id(message: &Message) -> String {
    format!("r:{}:{}", message.conversation_id, message.seq)
}

/// The outbox payload telling `recipients` that `message` was recalled.
pub fn encode_recall(message: &Message, audience: &Audience) -> Vec<u8> {
    let recalled = pb::Recalled {
        conversation_id: message.conversation_id.clone(),
        seq: message.seq,
        msg_id: message.msg_id,
        recalled_by: message.recalled_by,
        recalled_at_ms: message.recalled_at_ms,
    };
    fanout(
        recall_event_id(message),
        audience,
        0,
        sync_pb::sync_event::Kind::Recalled(recalled),
    )
}

/// The outbox payload telling `audience` that `message` now reads as its latest version;
/// sync-svc dedups it per version.
pub fn encode_edit(message: &Message, audience: &Audience) -> Vec<u8> {
    let edited = pb::Edited {
        conversation_id: message.conversation_id.clone(),
        seq: message.seq,
        msg_id: message.msg_id,
        content: Some(content_to_proto(&message.content)),
        version: message.version,
        edited_at_ms: message.edited_at_ms,
    };
    let event_id = format!(
        "e:{}:{}:{}",
        message.conversation_id, message.seq, message.version
    );
    fanout(
        event_id,
        audience,
        0,
        sync_pb::sync_event::Kind::Edited(edited),
    )
}

/// The outbox payload telling `audience` that a message was pinned or unpinned.
pub fn encode_pin(change: &PinChange, audience: &Audience) -> Vec<u8> {
    let pin = change.pin;
    let changed = pb::PinChanged {
        conversation_id: change.conversation_id.clone(),
        seq: pin.seq,
        pinned: change.pinned,
        by: pin.pinned_by,
        at_ms: pin.pinned_at_ms,
    };
    let event_id = format!(
        "p:{}:{}:{}:{}",
        change.conversation_id, pin.seq, pin.pinned_at_ms, change.pinned
    );
    fanout(
        event_id,
        audience,
        0,
        sync_pb::sync_event::Kind::Pin(changed),
    )
}

/// The outbox payload telling `hidden.user`'s devices what they hid from their view.
pub fn encode_hidden(hidden: &Hidden) -> Vec<u8> {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    let seqs_hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(&hidden.seqs);
    let event_id = format!(
        "h:{}:{}:{}:{seqs_hash:x}",
        hidden.user, hidden.conversation_id, hidden.cleared_seq
    );
    fanout(
        event_id,
        &Audience::Users(vec![hidden.user]),
        0,
        sync_pb::sync_event::Kind::Hidden(hidden_to_proto(hidden)),
    )
}
