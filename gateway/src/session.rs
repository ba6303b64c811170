//! One authenticated device's requests, whatever transport carries them.

use bytes::Bytes;
use imesh_kit::token::{TokenError, Tokens, Verified};
use imesh_protos::{
    gateway::{self as pb, client_frame, server_frame::Body},
    notify::Device,
};
use prost::Message as _;
use tonic::Code;

use crate::{peers::backends::Backends, peers::sends::Outlet, transport::frames};

/// Checks a connection's first frame: it MUST be `auth` with a valid token and device id.
/// On failure, returns the fatal error frame to send before closing (echoing the frame's
/// request id when it could be read).
pub fn authenticate(tokens: &Tokens, frame: &[u8]) -> Result<(u64, Verified, pb::Auth), Bytes> {
    let frame = pb::ClientFrame::decode(frame).map_err(|_| {
        frames::error(
            0,
            Code::Unauthenticated,
            "auth: the first frame must be an auth ClientFrame",
            true,
        )
    })?;
    let request_id = frame.request_id;
    let fatal = |code, message: &str| frames::error(request_id, code, message, true);
    let Some(client_frame::Body::Auth(auth)) = frame.body else {
        return Err(fatal(
            Code::Unauthenticated,
            "auth: the first frame must be auth",
        ));
    };
    let user = tokens.verify(&auth.token).map_err(|e| match e {
        TokenError::Expired => fatal(Code::Unauthenticated, "auth.token: expired; log in again"),
        TokenError::Invalid => fatal(Code::Unauthenticated, "auth.token: not a valid token"),
    })?;
    if auth.device_id.is_empty() || auth.device_id.len() > 64 || auth.device_id.contains('|') {
        return Err(fatal(
            Code::InvalidArgument,
            "auth.device_id: must be 1–64 characters without '|'",
        ));
    }
    if auth.platform.len() > 32 || auth.platform.contains('|') {
        return Err(fatal(
            Code::InvalidArgument,
            "auth.platform: must be at most 32 characters without '|'",
        ));
    }
    Ok((request_id, user, auth))
}

/// An authenticated device.
#[derive(Clone)]
pub struct Session {
    pub device: Device,
    /// The super groups whose live events this connection receives (re-listed when the
    /// user's memberships change).
    pub super_groups: std::sync::Arc<parking_lot::Mutex<std::sync::Arc<[i64]>>>,
    pub backends: std::sync::Arc<Backends>,
    /// Where the answers of this connection's sends go.
    pub outlet: std::sync::Arc<Outlet>,
}

/// The span one client request is traced under (`gateway/send`, `gateway/pull`, …): the
/// root of the trace its service calls continue, when traces are exported.
pub fn request_span(frame: &pb::ClientFrame, user: i64) -> tracing::Span {
    use client_frame::Body as In;
    // Nothing would read it: spare every frame the span's bookkeeping.
    if !imesh_kit::telemetry::exporting() {
        return tracing::Span::none();
    }
    let kind = match &frame.body {
        None => "gateway/empty",
        Some(In::Auth(_)) => "gateway/auth",
        Some(In::Ping(_)) => "gateway/ping",
        Some(In::Send(_)) => "gateway/send",
        Some(In::Pull(_)) => "gateway/pull",
        Some(In::History(_)) => "gateway/history",
        Some(In::Recall(_)) => "gateway/recall",
        Some(In::Edit(_)) => "gateway/edit",
        Some(In::Pin(_)) => "gateway/pin",
        Some(In::ListPins(_)) => "gateway/list_pins",
        Some(In::DeleteForMe(_)) => "gateway/delete_for_me",
        Some(In::ClearHistory(_)) => "gateway/clear_history",
        Some(In::React(_)) => "gateway/react",
        Some(In::Search(_)) => "gateway/search",
        Some(In::CreateUpload(_)) => "gateway/create_upload",
        Some(In::GetDownload(_)) => "gateway/get_download",
        Some(In::ListReactors(_)) => "gateway/list_reactors",
        Some(In::MarkRead(_)) => "gateway/mark_read",
        Some(In::Conversations(_)) => "gateway/conversations",
        Some(In::UpdateConversation(_)) => "gateway/update_conversation",
        Some(In::RemoveConversation(_)) => "gateway/remove_conversation",
        Some(In::ReceiptCounts(_)) => "gateway/receipt_counts",
        Some(In::ReceiptReaders(_)) => "gateway/receipt_readers",
        Some(In::Presence(_)) => "gateway/presence",
        Some(In::PushSettings(_)) => "gateway/push_settings",
        Some(In::Typing(_)) => "gateway/typing",
        Some(In::Relation(_)) => "gateway/relation",
        Some(In::Group(_)) => "gateway/group",
        Some(In::Ack(_)) => "gateway/ack",
    };
    let span = tracing::info_span!(
        "client",
        otel.name = kind,
        otel.kind = "server",
        rpc.service = "gateway",
        user,
        request_id = frame.request_id,
        trace_id = tracing::field::Empty,
    );
    imesh_kit::telemetry::record_trace_id(&span);
    span
}

impl Session {
    pub fn user(&self) -> i64 {
        self.device.user_id
    }

    /// The super groups this connection follows now.
    pub fn super_groups(&self) -> std::sync::Arc<[i64]> {
        self.super_groups.lock().clone()
    }

    /// Queues a send in the order it was read; its ack comes later through the outlet.
    /// Returns the error frame to write now when it is refused at once.
    pub fn send(
        &self,
        request_id: u64,
        request: imesh_protos::message::SendRequest,
        span: tracing::Span,
    ) -> Option<Bytes> {
        let sends = &self.backends.sends;
        sends.offer((self.user(), request_id, request), &self.outlet, span)
    }

    /// A send the connection's frame limit refused: it holds its conversation as any
    /// refused send does.
    pub fn send_throttled(
        &self,
        request: &imesh_protos::message::SendRequest,
        wait: std::time::Duration,
    ) {
        self.backends.sends.throttled(request, &self.outlet, wait);
    }

    /// Records a cumulative ack (coalesced on its way to sync-svc); an error frame for a
    /// bad one.
    pub fn ack(&self, request_id: u64, pb::Ack { sync_seq }: pb::Ack) -> Option<Bytes> {
        if sync_seq < 0 {
            let why = "ack.sync_seq: must not be negative";
            return Some(frames::error(request_id, Code::InvalidArgument, why, false));
        }
        let acks = &self.backends.acks;
        acks.ack(self.user(), &self.device.device_id, sync_seq);
        None
    }

    /// Handles one decoded client frame; returns the reply to write, if it has one.
    pub async fn handle(&self, frame: pb::ClientFrame) -> Option<Bytes> {
        use client_frame::Body as In;
        let id = frame.request_id;
        let reply = match frame.body {
            None => {
                return Some(frames::error(
                    id,
                    Code::InvalidArgument,
                    "body: must be set",
                    false,
                ));
            }
            Some(In::Auth(_)) => {
                return Some(frames::error(
                    id,
                    Code::FailedPrecondition,
                    "auth: already authenticated",
                    false,
                ));
            }
            Some(In::Ping(_)) => Ok(Body::Pong(pb::Pong {})),
            Some(In::Send(request)) => return self.send(id, request, tracing::Span::current()),
            Some(In::Pull(request)) => self
                .backends
                .pull(self.user(), request)
                .await
                .map(Body::Pull),
            Some(In::History(request)) => self
                .backends
                .history(self.user(), request)
                .await
                .map(Body::History),
            Some(In::Recall(request)) => self
                .backends
                .recall(self.user(), request)
                .await
                .map(Body::Recall),
            Some(In::Edit(request)) => self
                .backends
                .edit(self.user(), request)
                .await
                .map(Body::Edit),
            Some(In::Pin(request)) => self
                .backends
                .pin(self.user(), request)
                .await
                .map(Body::Pins),
            Some(In::ListPins(request)) => self
                .backends
                .list_pins(self.user(), request)
                .await
                .map(Body::Pins),
            Some(In::DeleteForMe(request)) => self
                .backends
                .delete_for_me(self.user(), request)
                .await
                .map(Body::Hidden),
            Some(In::ClearHistory(request)) => self
                .backends
                .clear_history(self.user(), request)
                .await
                .map(Body::Hidden),
            Some(In::Search(request)) => self
                .backends
                .search(self.user(), request)
                .await
                .map(Body::Search),
            Some(In::CreateUpload(request)) => self
                .backends
                .create_upload(self.user(), request)
                .await
                .map(Body::Upload),
            Some(In::GetDownload(request)) => self
                .backends
                .get_download(self.user(), request)
                .await
                .map(Body::Download),
            Some(In::React(request)) => self
                .backends
                .react(self.user(), request)
                .await
                .map(Body::Reactions),
            Some(In::ListReactors(request)) => self
                .backends
                .list_reactors(self.user(), request)
                .await
                .map(Body::Reactors),
            Some(In::MarkRead(request)) => self
                .backends
                .mark_read(self.user(), request)
                .await
                .map(Body::MarkRead),
            Some(In::Conversations(request)) => self
                .backends
                .conversations(self.user(), request)
                .await
                .map(Body::Conversations),
            Some(In::RemoveConversation(request)) => self
                .backends
                .remove_conversation(self.user(), request)
                .await
                .map(Body::Removed),
            Some(In::UpdateConversation(request)) => self
                .backends
                .update_conversation(self.user(), request)
                .await
                .map(Body::ConversationSettings),
            Some(In::ReceiptCounts(request)) => self
                .backends
                .receipt_counts(self.user(), request)
                .await
                .map(Body::ReceiptCounts),
            Some(In::ReceiptReaders(request)) => self
                .backends
                .receipt_readers(self.user(), request)
                .await
                .map(Body::ReceiptReaders),
            Some(In::Presence(request)) => self
                .backends
                .presence(self.user(), request)
                .await
                .map(Body::Presence),
            Some(In::Relation(call)) => {
                crate::peers::calls::relation(&self.backends, self.user(), call)
                    .await
                    .map(Body::Relation)
            }
            Some(In::Group(call)) => crate::peers::calls::group(&self.backends, self.user(), call)
                .await
                .map(Body::Group),
            Some(In::Typing(request)) => self
                .backends
                .typing(self.user(), request)
                .await
                .map(Body::Typing),
            Some(In::PushSettings(request)) => self
                .backends
                .update_push_settings(self.user(), request)
                .await
                .map(Body::PushSettings),
            Some(In::Ack(ack)) => return self.ack(id, ack),
        };
        Some(match reply {
            Ok(body) => frames::encode(id, body),
            Err(status) => frames::status(id, &status),
        })
    }
}
