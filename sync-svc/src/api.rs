//! gRPC handlers of sync-svc: wire types stop here.

use std::sync::Arc;

use imesh_kit::{error, identity};
use imesh_protos::sync::{self as pb, sync_service_server::SyncService};
use prost::Message as _;
use tonic::{Request, Response, Status};

use crate::domain::{
    Change, ConversationView, Entry, Error, Inboxes, IncomingEvent, Mark, Preview, PushSettings,
    ReadMark, ReceiptCount, Settings,
};

pub struct SyncApi {
    inboxes: Arc<Inboxes>,
}

impl SyncApi {
    pub fn new(inboxes: Arc<Inboxes>) -> Self {
        Self { inboxes }
    }
}

#[tonic::async_trait]
impl SyncService for SyncApi {
    async fn append(
        &self,
        request: Request<pb::AppendRequest>,
    ) -> Result<Response<pb::AppendResponse>, Status> {
        identity::actor(&request)?.require_system()?;
        let events = request
            .into_inner()
            .events
            .into_iter()
            .map(event_from_proto)
            .collect::<Result<_, _>>()?;
        let outcome = self.inboxes.append(events).await.map_err(status)?;
        Ok(Response::new(pb::AppendResponse {
            appended: outcome.appended,
            duplicates: outcome.duplicates,
        }))
    }

    async fn pull(
        &self,
        request: Request<pb::PullRequest>,
    ) -> Result<Response<pb::PullResponse>, Status> {
        let user = identity::actor(&request)?.user()?;
        let pb::PullRequest {
            after_sync_seq,
            limit,
        } = request.into_inner();
        let (entries, has_more) = self
            .inboxes
            .pull(user, after_sync_seq, limit)
            .await
            .map_err(status)?;
        let entries = entries
            .into_iter()
            .map(entry_to_proto)
            .collect::<Result<_, _>>()?;
        Ok(Response::new(pb::PullResponse { entries, has_more }))
    }

    async fn ack(
        &self,
        request: Request<pb::AckRequest>,
    ) -> Result<Response<pb::AckResponse>, Status> {
        let user = identity::actor(&request)?.user()?;
        let pb::AckRequest {
            device_id,
            sync_seq,
        } = request.into_inner();
        let acked = self
            .inboxes
            .ack(user, &device_id, sync_seq)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::AckResponse {
            acked_sync_seq: acked,
        }))
    }

    async fn ack_batch(
        &self,
        request: Request<pb::AckBatchRequest>,
    ) -> Result<Response<pb::AckBatchResponse>, Status> {
        identity::actor(&request)?.require_system()?;
        let acks = request
            .into_inner()
            .acks
            .into_iter()
            .map(|a| (a.user_id, a.device_id, a.sync_seq))
            .collect();
        self.inboxes.ack_many(acks).await.map_err(status)?;
        Ok(Response::new(pb::AckBatchResponse {}))
    }

    async fn mark_read(
        &self,
        request: Request<pb::MarkReadRequest>,
    ) -> Result<Response<pb::MarkReadResponse>, Status> {
        let user = identity::actor(&request)?.user()?;
        let marks = request
            .into_inner()
            .marks
            .into_iter()
            .map(|m| ReadMark {
                conversation_id: m.conversation_id,
                read_seq: m.read_seq,
            })
            .collect();
        let stored = self.inboxes.mark_read(user, marks).await.map_err(status)?;
        Ok(Response::new(pb::MarkReadResponse {
            marks: stored
                .into_iter()
                .map(|m| pb::ReadMark {
                    conversation_id: m.conversation_id,
                    read_seq: m.read_seq,
                })
                .collect(),
        }))
    }

    async fn conversations(
        &self,
        request: Request<pb::ConversationsRequest>,
    ) -> Result<Response<pb::ConversationsResponse>, Status> {
        let user = identity::actor(&request)?.user()?;
        let pb::ConversationsRequest { page_token, limit } = request.into_inner();
        let page = self
            .inboxes
            .conversations(user, &page_token, limit)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::ConversationsResponse {
            conversations: page
                .conversations
                .into_iter()
                .map(conversation_to_proto)
                .collect::<Result<_, _>>()?,
            next_page_token: page.next.map(|c| c.token()).unwrap_or_default(),
            total_unread: page.total_unread,
        }))
    }

    async fn update_conversation(
        &self,
        request: Request<pb::UpdateConversationRequest>,
    ) -> Result<Response<pb::ConversationSettings>, Status> {
        let user = identity::actor(&request)?.user()?;
        let pb::UpdateConversationRequest {
            conversation_id,
            pinned,
            muted,
        } = request.into_inner();
        let settings = self
            .inboxes
            .update_settings(user, &conversation_id, pinned, muted)
            .await
            .map_err(status)?;
        Ok(Response::new(settings_to_proto(&conversation_id, settings)))
    }

    async fn remove_conversation(
        &self,
        request: Request<pb::RemoveConversationRequest>,
    ) -> Result<Response<pb::ConversationRemoved>, Status> {
        let user = identity::actor(&request)?.user()?;
        let pb::RemoveConversationRequest { conversation_id } = request.into_inner();
        let removed_seq = self
            .inboxes
            .remove_conversation(user, &conversation_id)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::ConversationRemoved {
            conversation_id,
            removed_seq,
        }))
    }

    async fn receipt_counts(
        &self,
        request: Request<pb::ReceiptCountsRequest>,
    ) -> Result<Response<pb::ReceiptCountsResponse>, Status> {
        let actor = identity::actor(&request)?;
        let pb::ReceiptCountsRequest {
            conversation_id,
            seqs,
        } = request.into_inner();
        let counts = self
            .inboxes
            .receipt_counts(actor, &conversation_id, &seqs)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::ReceiptCountsResponse {
            counts: counts.iter().map(count_to_proto).collect(),
        }))
    }

    async fn receipt_readers(
        &self,
        request: Request<pb::ReceiptReadersRequest>,
    ) -> Result<Response<pb::ReceiptReadersResponse>, Status> {
        let actor = identity::actor(&request)?;
        let pb::ReceiptReadersRequest {
            conversation_id,
            seq,
            unread,
            cursor,
            limit,
        } = request.into_inner();
        let (user_ids, next_cursor) = self
            .inboxes
            .receipt_readers(actor, &conversation_id, seq, unread, cursor, limit)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::ReceiptReadersResponse {
            user_ids,
            next_cursor,
        }))
    }

    async fn update_push_settings(
        &self,
        request: Request<pb::PushSettings>,
    ) -> Result<Response<pb::PushSettings>, Status> {
        let user = identity::actor(&request)?.user()?;
        let pb::PushSettings {
            quiet_start_min,
            quiet_end_min,
            utc_offset_min,
            preview,
        } = request.into_inner();
        let settings = PushSettings::parse(quiet_start_min, quiet_end_min, utc_offset_min, preview)
            .map_err(status)?;
        let stored = self
            .inboxes
            .update_push_settings(user, settings)
            .await
            .map_err(status)?;
        Ok(Response::new(push_settings_to_proto(stored)))
    }

    async fn offline_targets(
        &self,
        request: Request<pb::OfflineTargetsRequest>,
    ) -> Result<Response<pb::OfflineTargetsResponse>, Status> {
        identity::actor(&request)?.require_system()?;
        let targets = request
            .into_inner()
            .targets
            .into_iter()
            .map(|t| (t.user_id, t.conversation_id))
            .collect();
        let now_ms = chrono::Utc::now().timestamp_millis();
        let decisions = self
            .inboxes
            .offline_targets(targets, now_ms)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::OfflineTargetsResponse {
            decisions: decisions
                .into_iter()
                .map(|d| pb::OfflineDecision {
                    user_id: d.user,
                    conversation_id: d.conversation_id,
                    push: d.push,
                    badge: d.badge,
                    preview: preview_to_proto(d.preview) as i32,
                })
                .collect(),
        }))
    }
}

fn push_settings_to_proto(settings: PushSettings) -> pb::PushSettings {
    pb::PushSettings {
        quiet_start_min: settings.quiet_start_min.into(),
        quiet_end_min: settings.quiet_end_min.into(),
        utc_offset_min: settings.utc_offset_min.into(),
        preview: preview_to_proto(settings.preview) as i32,
    }
}

fn preview_to_proto(preview: Preview) -> pb::Preview {
    match preview {
        Preview::Full => pb::Preview::Full,
        Preview::Sender => pb::Preview::Sender,
        Preview::Hidden => pb::Preview::Hidden,
    }
}

fn count_to_proto(count: &ReceiptCount) -> pb::ReceiptCount {
    pb::ReceiptCount {
        conversation_id: count.conversation_id.clone(),
        seq: count.seq,
        read: count.read,
        total: count.total,
    }
}

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

fn settings_to_proto(conversation_id: &str, settings: Settings) -> pb::ConversationSettings {
    pb::ConversationSettings {
        conversation_id: conversation_id.to_owned(),
        pinned: settings.pinned,
        muted: settings.muted,
    }
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

fn conversation_to_proto(view: ConversationView) -> Result<pb::Conversation, Status> {
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

fn event_from_proto(fanout: pb::Fanout) -> Result<IncomingEvent, Status> {
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

fn entry_to_proto(entry: Entry) -> Result<pb::InboxEntry, Status> {
    let event = pb::SyncEvent::decode(entry.payload).map_err(|e| error::internal(&e))?;
    Ok(pb::InboxEntry {
        sync_seq: entry.sync_seq,
        event: Some(event),
    })
}

/// The one place sync-svc errors become gRPC statuses.
fn status(err: Error) -> Status {
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
