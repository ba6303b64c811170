//! gRPC handlers of message-svc: wire types stop here.

use std::sync::Arc;

use imesh_kit::{error, identity};
use imesh_protos::message::{self as pb, message_service_server::MessageService};
use tonic::{Request, Response, Status};

use crate::domain::{Content, Error, GroupRefusal, Messages, SendCommand, Sent, Target};

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
        let sender = identity::actor(&request)?.user()?;
        let pb::SendRequest {
            client_msg_id,
            to,
            content,
        } = request.into_inner();
        let command = SendCommand {
            client_msg_id,
            to: to.map(target_from_proto),
            content: content.and_then(|c| c.kind).map(content_from_proto),
        };
        let sent = self.messages.send(sender, command).await.map_err(status)?;
        Ok(Response::new(sent_to_proto(sent)))
    }

    async fn history(
        &self,
        request: Request<pb::HistoryRequest>,
    ) -> Result<Response<pb::HistoryResponse>, Status> {
        let user = identity::actor(&request)?.user()?;
        let pb::HistoryRequest {
            conversation_id,
            before_seq,
            limit,
        } = request.into_inner();
        let (page, has_more) = self
            .messages
            .history(user, &conversation_id, before_seq, limit)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::HistoryResponse {
            messages: page.iter().map(crate::events::message_to_proto).collect(),
            has_more,
        }))
    }

    async fn recall(
        &self,
        request: Request<pb::RecallRequest>,
    ) -> Result<Response<pb::RecallResponse>, Status> {
        let user = identity::actor(&request)?.user()?;
        let pb::RecallRequest {
            conversation_id,
            seq,
        } = request.into_inner();
        let message = self
            .messages
            .recall(user, &conversation_id, seq)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::RecallResponse {
            message: Some(crate::events::message_to_proto(&message)),
        }))
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

fn target_from_proto(to: pb::send_request::To) -> Target {
    match to {
        pb::send_request::To::UserId(id) => Target::User(id),
        pb::send_request::To::GroupId(id) => Target::Group(id),
    }
}

fn content_from_proto(kind: pb::content::Kind) -> Content {
    match kind {
        pb::content::Kind::Text(pb::Text { text }) => Content::Text(text),
        pb::content::Kind::Custom(pb::Custom { json }) => Content::Custom(json),
    }
}

fn sent_to_proto(sent: Sent) -> pb::SendResponse {
    pb::SendResponse {
        msg_id: sent.msg_id,
        conversation_id: sent.conversation_id,
        seq: sent.seq,
        server_time_ms: sent.server_time_ms,
        duplicate: sent.duplicate,
    }
}

/// The one place message-svc errors become gRPC statuses.
fn status(err: Error) -> Status {
    match err {
        Error::Invalid { field, reason } => error::invalid(field, reason),
        Error::TooLarge { .. } => Status::invalid_argument(err.to_string()),
        Error::UnknownUser(_) => Status::not_found(err.to_string()),
        Error::NotParticipant | Error::RecallRefused(_) => {
            Status::permission_denied(err.to_string())
        }
        Error::NoMessage => Status::not_found(err.to_string()),
        Error::Refused(_) => Status::permission_denied(err.to_string()),
        Error::GroupRefused(why, ref message) => match why {
            GroupRefusal::NotFound => Status::not_found(message.clone()),
            GroupRefusal::Forbidden => Status::permission_denied(message.clone()),
            GroupRefusal::Precondition => Status::failed_precondition(message.clone()),
        },
        Error::Store(imesh_kit::error::StoreError::Unavailable(ref e)) => {
            error::unavailable(e.as_ref())
        }
        Error::Store(ref e) => error::internal(e),
        Error::Directory(ref e) => {
            tracing::error!(error = %format!("{e:#}"), "relation-svc call failed");
            Status::unavailable("relation-svc is unavailable; retry later")
        }
    }
}
