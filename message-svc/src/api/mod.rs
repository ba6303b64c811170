//! gRPC handlers of message-svc: wire types stop here.

use std::sync::Arc;

use imesh_kit::{
    error,
    identity::{self, Actor},
};
use imesh_protos::message::{self as pb, message_service_server::MessageService};
use tonic::{Request, Response, Status};

use self::convert::{
    content_from_proto, download_to_proto, hidden_to_proto, message_to_proto, notice_result,
    pinned_to_proto, reactions_to_proto, send_command, send_outcome, sent_to_proto, status,
    ticket_to_proto, upload_request,
};
use crate::domain::{HistoryPage, Messages, NoticeCommand, Sender};

pub mod convert;

/// Who calls: a user, or the system actor (internal callers and operators).
fn sender<T>(request: &Request<T>) -> Result<Sender, Status> {
    Ok(match identity::actor(request)? {
        Actor::User(id) => Sender::User(id),
        Actor::System => Sender::System,
    })
}

pub struct MessageApi {
    messages: Arc<Messages>,
}

impl MessageApi {
    pub fn new(messages: Arc<Messages>) -> Self {
        Self { messages }
    }
}

#[tonic::async_trait]
impl MessageService for MessageApi {
    async fn send(
        &self,
        request: Request<pb::SendRequest>,
    ) -> Result<Response<pb::SendResponse>, Status> {
        let sender = sender(&request)?;
        let command = send_command(request.into_inner());
        let sent = self.messages.send(sender, command).await.map_err(status)?;
        Ok(Response::new(sent_to_proto(sent)))
    }

    async fn send_batch(
        &self,
        request: Request<pb::SendBatchRequest>,
    ) -> Result<Response<pb::SendBatchResponse>, Status> {
        identity::actor(&request)?.require_system()?;
        let mut sends = Vec::new();
        for pb::BatchedSend { sender_id, send } in request.into_inner().sends {
            if sender_id <= 0 {
                return Err(error::invalid("sends.sender_id", "must be a user id"));
            }
            let send = send.ok_or_else(|| error::invalid("sends.send", "must be set"))?;
            sends.push((Sender::User(sender_id), send_command(send)));
        }
        let outcomes = self.messages.send_batch(sends).await.map_err(status)?;
        Ok(Response::new(pb::SendBatchResponse {
            outcomes: outcomes.into_iter().map(send_outcome).collect(),
        }))
    }

    async fn send_notice(
        &self,
        request: Request<pb::SendNoticeRequest>,
    ) -> Result<Response<pb::SendNoticeResponse>, Status> {
        identity::actor(&request)?.require_system()?;
        let pb::SendNoticeRequest {
            client_msg_id,
            user_ids,
            group_ids,
            content,
        } = request.into_inner();
        let command = NoticeCommand {
            client_msg_id,
            users: user_ids,
            groups: group_ids,
            content: content.and_then(|c| c.kind).map(content_from_proto),
        };
        let outcomes = self.messages.send_notice(command).await.map_err(status)?;
        Ok(Response::new(pb::SendNoticeResponse {
            results: outcomes.into_iter().map(notice_result).collect(),
        }))
    }

    async fn history(
        &self,
        request: Request<pb::HistoryRequest>,
    ) -> Result<Response<pb::HistoryResponse>, Status> {
        let reader = sender(&request)?;
        let pb::HistoryRequest {
            conversation_id,
            before_seq,
            limit,
            after_seq,
        } = request.into_inner();
        let page = match (before_seq, after_seq) {
            (b, _) if b < 0 => return Err(error::invalid("before_seq", "must not be negative")),
            (_, a) if a < 0 => return Err(error::invalid("after_seq", "must not be negative")),
            (0, 0) => HistoryPage::Before(0),
            (b, 0) => HistoryPage::Before(b),
            (0, a) => HistoryPage::After(a),
            _ => {
                return Err(error::invalid(
                    "after_seq",
                    "set before_seq or after_seq, not both",
                ));
            }
        };
        let (page, has_more) = self
            .messages
            .history(reader, &conversation_id, page, limit)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::HistoryResponse {
            messages: page.iter().map(message_to_proto).collect(),
            has_more,
        }))
    }

    async fn recall(
        &self,
        request: Request<pb::RecallRequest>,
    ) -> Result<Response<pb::RecallResponse>, Status> {
        let by = sender(&request)?;
        let pb::RecallRequest {
            conversation_id,
            seq,
        } = request.into_inner();
        let message = self
            .messages
            .recall(by, &conversation_id, seq)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::RecallResponse {
            message: Some(message_to_proto(&message)),
        }))
    }

    async fn edit(
        &self,
        request: Request<pb::EditRequest>,
    ) -> Result<Response<pb::EditResponse>, Status> {
        let by = sender(&request)?;
        let pb::EditRequest {
            conversation_id,
            seq,
            content,
        } = request.into_inner();
        let content = content.and_then(|c| c.kind).map(content_from_proto);
        let message = self
            .messages
            .edit(by, &conversation_id, seq, content)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::EditResponse {
            message: Some(message_to_proto(&message)),
        }))
    }

    async fn pin(
        &self,
        request: Request<pb::PinRequest>,
    ) -> Result<Response<pb::PinsResponse>, Status> {
        let by = sender(&request)?;
        let pb::PinRequest {
            conversation_id,
            seq,
            unpin,
        } = request.into_inner();
        let pins = self
            .messages
            .pin(by, &conversation_id, seq, unpin)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::PinsResponse {
            pins: pins.iter().map(pinned_to_proto).collect(),
        }))
    }

    async fn list_pins(
        &self,
        request: Request<pb::ListPinsRequest>,
    ) -> Result<Response<pb::PinsResponse>, Status> {
        let by = sender(&request)?;
        let pb::ListPinsRequest { conversation_id } = request.into_inner();
        let pins = self
            .messages
            .pins(by, &conversation_id)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::PinsResponse {
            pins: pins.iter().map(pinned_to_proto).collect(),
        }))
    }

    async fn react(
        &self,
        request: Request<pb::ReactRequest>,
    ) -> Result<Response<pb::ReactionsResponse>, Status> {
        let by = sender(&request)?;
        let pb::ReactRequest {
            conversation_id,
            seq,
            emoji,
            remove,
        } = request.into_inner();
        let counts = self
            .messages
            .react(by, &conversation_id, seq, &emoji, remove)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::ReactionsResponse {
            conversation_id,
            seq,
            reactions: reactions_to_proto(&counts),
        }))
    }

    async fn list_reactors(
        &self,
        request: Request<pb::ListReactorsRequest>,
    ) -> Result<Response<pb::ListReactorsResponse>, Status> {
        let by = sender(&request)?;
        let pb::ListReactorsRequest {
            conversation_id,
            seq,
            emoji,
            after_user_id,
            limit,
        } = request.into_inner();
        let (user_ids, has_more) = self
            .messages
            .reactors(by, &conversation_id, seq, &emoji, after_user_id, limit)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::ListReactorsResponse {
            user_ids,
            has_more,
        }))
    }

    async fn search(
        &self,
        request: Request<pb::SearchRequest>,
    ) -> Result<Response<pb::SearchResponse>, Status> {
        let by = sender(&request)?;
        let pb::SearchRequest {
            query,
            conversation_id,
            before_msg_id,
            limit,
        } = request.into_inner();
        let page = self
            .messages
            .search(by, &query, &conversation_id, before_msg_id, limit)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::SearchResponse {
            messages: page.messages.iter().map(message_to_proto).collect(),
            next_before_msg_id: page.next_before,
        }))
    }

    async fn create_upload(
        &self,
        request: Request<pb::CreateUploadRequest>,
    ) -> Result<Response<pb::CreateUploadResponse>, Status> {
        let by = sender(&request)?;
        let ticket = self
            .messages
            .create_upload(by, upload_request(request.into_inner()))
            .await
            .map_err(status)?;
        Ok(Response::new(ticket_to_proto(ticket)))
    }

    async fn get_download(
        &self,
        request: Request<pb::GetDownloadRequest>,
    ) -> Result<Response<pb::GetDownloadResponse>, Status> {
        let by = sender(&request)?;
        let pb::GetDownloadRequest {
            conversation_id,
            seq,
        } = request.into_inner();
        let download = self
            .messages
            .download(by, &conversation_id, seq)
            .await
            .map_err(status)?;
        Ok(Response::new(download_to_proto(download)))
    }

    async fn delete_for_me(
        &self,
        request: Request<pb::DeleteForMeRequest>,
    ) -> Result<Response<pb::HiddenForMe>, Status> {
        let by = sender(&request)?;
        let pb::DeleteForMeRequest {
            conversation_id,
            seqs,
        } = request.into_inner();
        let hidden = self
            .messages
            .delete_for_me(by, &conversation_id, seqs)
            .await
            .map_err(status)?;
        Ok(Response::new(hidden_to_proto(&hidden)))
    }

    async fn clear_history(
        &self,
        request: Request<pb::ClearHistoryRequest>,
    ) -> Result<Response<pb::HiddenForMe>, Status> {
        let by = sender(&request)?;
        let pb::ClearHistoryRequest { conversation_id } = request.into_inner();
        let hidden = self
            .messages
            .clear_history(by, &conversation_id)
            .await
            .map_err(status)?;
        Ok(Response::new(hidden_to_proto(&hidden)))
    }

    async fn conversation_seq(
        &self,
        request: Request<pb::ConversationSeqRequest>,
    ) -> Result<Response<pb::ConversationSeqResponse>, Status> {
        identity::actor(&request)?.require_system()?;
        let pb::ConversationSeqRequest { conversation_id } = request.into_inner();
        let seq = self
            .messages
            .current_seq(&conversation_id)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::ConversationSeqResponse { seq }))
    }
}
