//! gRPC handlers of sync-svc: wire types stop here.

use std::sync::Arc;

use imesh_kit::identity;
use imesh_protos::sync::{self as pb, sync_service_server::SyncService};
use tonic::{Request, Response, Status};

use self::convert::{
    conversation_to_proto, count_to_proto, entry_to_proto, event_from_proto, preview_to_proto,
    push_settings_to_proto, settings_to_proto, status,
};
use crate::domain::{Inboxes, PushSettings, ReadMark};

pub mod convert;

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
