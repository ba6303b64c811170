//! sync-svc's wire mapping: domain types to and from their protos, and errors to statuses.

use imesh_kit::error;
use imesh_protos::sync as pb;
use prost::Message as _;
use tonic::Status;

use crate::domain::{
    Change, ConversationView, Entry, Error, IncomingEvent, Mark, Preview, PushSettings,
    ReceiptCount, Settings,
};

pub(crate) fn push_settings_to_proto(settings: PushSettings) -> pb::PushSettings {
    pb::PushSettings {
        quiet_start_min: settings.quiet_start_min.into(),
        quiet_end_min: settings.quiet_end_min.into(),
        utc_offset_min: settings.utc_offset_min.into(),
        preview: preview_to_proto(settings.preview) as i32,
    }
}

pub(crate) fn preview_to_proto(preview: Preview) -> pb::Preview {
    match preview {
        Preview::Full => pb::Preview::Full,
        Preview::Sender => pb::Preview::Sender,
        Preview::Hidden => pb::Preview::Hidden,
    }
}

pub(crate) fn count_to_proto(count: &ReceiptCount) -> pb::ReceiptCount {
    pb::ReceiptCount {
        conversation_id: count.conversation_id.clone(),
        seq: count.seq,
        read: count.read,
        total: count.total,
    }
}

pub(crate) fn settings_to_proto(
    conversation_id: &str,
    settings: Settings,
) -> pb::ConversationSettings {
    pb::ConversationSettings {
        conversation_id: conversation_id.to_owned(),
        pinned: settings.pinned,
        muted: settings.muted,
    }
}

/// What a message or recall event does to its conversation's state; `receipt_bound` is
/// its Fanout's.
fn mark_of(event: &pb::SyncEvent, receipt_bound: u32) -> Option<Mark> {
    use pb::sync_event::Kind;
    match event.kind.as_ref()? {
        Kind::Message(m) => Some(Mark {
            conversation_id: m.conversation_id.clone(),
            seq: m.seq,
            change: Change::Message {
                sender: m.sender_id,
                time_ms: m.server_time_ms,
                mentioned: m.mentioned_user_ids.clone(),
                mention_all: m.mention_all,
                receipt_bound,
            },
        }),
        Kind::Recalled(r) => Some(Mark {
            conversation_id: r.conversation_id.clone(),
            seq: r.seq,
            change: Change::Recall {
                by: r.recalled_by,
                at_ms: r.recalled_at_ms,
            },
        }),
        Kind::Edited(e) => Some(Mark {
            conversation_id: e.conversation_id.clone(),
            seq: e.seq,
            change: Change::Edit {
                event: event.encode_to_vec().into(),
            },
        }),
        _ => None,
    }
}

pub(crate) fn conversation_to_proto(view: ConversationView) -> Result<pb::Conversation, Status> {
    let unread = view.unread();
    let event = pb::SyncEvent::decode(view.last_event).map_err(|e| error::internal(&e))?;
    let last_message = match event.kind {
        Some(pb::sync_event::Kind::Message(mut m)) => {
            if let Ok(pb::SyncEvent {
                kind: Some(pb::sync_event::Kind::Edited(edited)),
            }) = pb::SyncEvent::decode(view.last_edit.clone())
                && edited.seq == m.seq
            {
                m.content = edited.content;
                m.version = edited.version;
                m.edited_at_ms = edited.edited_at_ms;
            }
            if view.last_recalled_by != 0 {
                m.content = None;
                m.recalled_by = view.last_recalled_by;
                m.recalled_at_ms = view.last_recalled_at_ms;
            }
            Some(m)
        }
        _ => None,
    };
    Ok(pb::Conversation {
        conversation_id: view.conversation_id,
        latest_seq: view.latest_seq,
        read_seq: view.read_seq,
        unread,
        mentioned: view.mentioned,
        last_message,
        updated_at_ms: view.updated_at_ms,
        peer_read_seq: view.peer_read_seq,
        pinned: view.settings.pinned,
        muted: view.settings.muted,
    })
}

pub(crate) fn event_from_proto(fanout: pb::Fanout) -> Result<IncomingEvent, Status> {
    let pb::Fanout {
        event_id,
        recipient_ids,
        event,
        read_fanout_group_id,
        receipt_map_bound,
    } = fanout;
    let event = event
        .filter(|e| e.kind.is_some())
        .ok_or_else(|| error::invalid("events.event", "must be set"))?;
    Ok(IncomingEvent {
        event_id,
        recipients: recipient_ids,
        read_fanout_group: (read_fanout_group_id != 0).then_some(read_fanout_group_id),
        payload: event.encode_to_vec().into(),
        mark: mark_of(&event, receipt_map_bound),
    })
}

pub(crate) fn entry_to_proto(entry: Entry) -> Result<pb::InboxEntry, Status> {
    let event = pb::SyncEvent::decode(entry.payload).map_err(|e| error::internal(&e))?;
    Ok(pb::InboxEntry {
        sync_seq: entry.sync_seq,
        event: Some(event),
    })
}

/// The one place sync-svc errors become gRPC statuses.
pub(crate) fn status(err: Error) -> Status {
    match err {
        Error::Invalid { field, reason } => error::invalid(field, reason),
        Error::Store(imesh_kit::error::StoreError::Conflict(_)) => {
            Status::aborted("a concurrent append of the same event won; retry")
        }
        Error::Store(imesh_kit::error::StoreError::Unavailable(ref e)) => {
            error::unavailable(e.as_ref())
        }
        Error::Store(ref e) => error::internal(e),
        Error::NoConversation | Error::NoReceipt(_) => Status::not_found(err.to_string()),
        Error::Forbidden(_) => Status::permission_denied(err.to_string()),
        Error::Groups(ref e) => {
            tracing::error!(error = %format!("{e:#}"), "group-svc call failed");
            Status::unavailable("group-svc is unavailable; retry later")
        }
    }
}
