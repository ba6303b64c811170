//! gRPC handlers of message-svc: wire types stop here.

use std::sync::Arc;

use imesh_kit::{
    error,
    identity::{self, Actor},
};
use imesh_protos::message::{self as pb, message_service_server::MessageService};
use tonic::{Request, Response, Status};

use crate::{
    domain::{
        Error, GroupRefusal, HistoryPage, Mentions, Messages, NoticeCommand, NoticeOutcome,
        SendCommand, Sender, Sent, Target,
    },
    events::content_from_proto,
};

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
            messages: page.iter().map(crate::events::message_to_proto).collect(),
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
            message: Some(crate::events::message_to_proto(&message)),
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
            message: Some(crate::events::message_to_proto(&message)),
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
            pins: pins.iter().map(crate::events::pinned_to_proto).collect(),
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
            pins: pins.iter().map(crate::events::pinned_to_proto).collect(),
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
            reactions: crate::events::reactions_to_proto(&counts),
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
            messages: page
                .messages
                .iter()
                .map(crate::events::message_to_proto)
                .collect(),
            next_before_msg_id: page.next_before,
        }))
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
        Ok(Response::new(crate::events::hidden_to_proto(&hidden)))
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
        Ok(Response::new(crate::events::hidden_to_proto(&hidden)))
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

fn send_command(request: pb::SendRequest) -> SendCommand {
    let pb::SendRequest {
        client_msg_id,
        to,
        content,
        mentioned_user_ids,
        mention_all,
        receipt,
        reply_to_seq,
        forward,
    } = request;
    SendCommand {
        client_msg_id,
        to: to.map(target_from_proto),
        content: content.and_then(|c| c.kind).map(content_from_proto),
        mentions: Mentions {
            users: mentioned_user_ids,
            all: mention_all,
        },
        receipt,
        reply_to_seq,
        forward: forward.map(|f| (f.conversation_id, f.seq)),
    }
}

fn send_outcome(outcome: Result<Sent, Error>) -> pb::SendOutcome {
    match outcome {
        Ok(sent) => pb::SendOutcome {
            sent: Some(sent_to_proto(sent)),
            ..Default::default()
        },
        Err(err) => {
            let retry_after_ms = retry_after_ms(&err).unwrap_or(0);
            let refused = status(err);
            pb::SendOutcome {
                sent: None,
                code: refused.code() as i32,
                error: refused.message().to_owned(),
                retry_after_ms,
            }
        }
    }
}

fn target_from_proto(to: pb::send_request::To) -> Target {
    match to {
        pb::send_request::To::UserId(id) => Target::User(id),
        pb::send_request::To::GroupId(id) => Target::Group(id),
    }
}

fn notice_result(outcome: NoticeOutcome) -> pb::NoticeResult {
    use pb::notice_result::Target as T;
    let target = Some(match outcome.target {
        Target::User(id) => T::UserId(id),
        Target::Group(id) => T::GroupId(id),
    });
    match outcome.result {
        Ok(sent) => pb::NoticeResult {
            target,
            sent: Some(sent_to_proto(sent)),
            ..Default::default()
        },
        Err(err) => {
            let refused = status(err);
            pb::NoticeResult {
                target,
                sent: None,
                code: refused.code() as i32,
                error: refused.message().to_owned(),
            }
        }
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

/// How long a refused send should wait before its retry (the `retry-after-ms` trailer, and
/// a batch item's `retry_after_ms`).
fn retry_after_ms(err: &Error) -> Option<u64> {
    match err {
        Error::RateLimited(limited) => Some(limited.retry_after_ms),
        Error::Overloaded(behind) => Some((behind.as_millis() as u64 / 2).clamp(50, 1_000)),
        _ => None,
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
        Error::NotSender => Status::permission_denied(err.to_string()),
        Error::EditRefused(_) | Error::PinsFull | Error::ReactRecalled | Error::ReactionsFull => {
            Status::failed_precondition(err.to_string())
        }
        Error::PinRefused(_) | Error::HookRefused(_) => Status::permission_denied(err.to_string()),
        Error::HookUnavailable(ref e) => {
            tracing::error!(error = %format!("{e:#}"), "the before-send hook failed");
            Status::unavailable(err.to_string())
        }
        Error::Refused(_) | Error::NoticeForbidden => Status::permission_denied(err.to_string()),
        Error::RateLimited(_) | Error::Overloaded(_) => {
            let wait = retry_after_ms(&err).unwrap_or(0);
            let mut refused = Status::resource_exhausted(err.to_string());
            refused
                .metadata_mut()
                .insert(imesh_kit::error::RETRY_AFTER_HEADER, wait.into());
            refused
        }
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
            tracing::error!(error = %format!("{e:#}"), "a peer service call failed");
            Status::unavailable("relation-svc or group-svc is unavailable; retry later")
        }
    }
}
