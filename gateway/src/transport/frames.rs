//! Building server frames: replies, errors, and pushes written without decoding their events.

use bytes::Bytes;
use imesh_protos::{
    gateway::{self as pb, server_frame::Body},
    sync::RawEntry,
};
use prost::Message as _;
use tonic::{Code, Status};

pub fn encode(request_id: u64, body: Body) -> Bytes {
    pb::ServerFrame {
        request_id,
        body: Some(body),
    }
    .encode_to_vec()
    .into()
}

/// An error frame; `fatal` frames are followed by the connection closing.
pub fn error(request_id: u64, code: Code, message: impl Into<String>, fatal: bool) -> Bytes {
    error_frame(request_id, code, message.into(), fatal, 0)
}

/// The fatal error a drain closes connections with.
pub fn shutting_down() -> Bytes {
    error(
        0,
        Code::Unavailable,
        "gateway shutting down; reconnect",
        true,
    )
}

/// A service's answer to a client request, as an error frame (with the wait a rate limit
/// asked for, from the `retry-after-ms` trailer).
pub fn status(request_id: u64, status: &Status) -> Bytes {
    status_with_wait(request_id, status, retry_after_ms(status))
}

/// The wait a status names in its `retry-after-ms` metadata, 0 when none.
pub fn retry_after_ms(status: &Status) -> u64 {
    status
        .metadata()
        .get(imesh_kit::error::RETRY_AFTER_HEADER)
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(0)
}

/// An error frame for `status` that names how long to wait before retrying.
pub fn status_with_wait(request_id: u64, status: &Status, retry_after_ms: u64) -> Bytes {
    let message = status.message().to_owned();
    error_frame(request_id, status.code(), message, false, retry_after_ms)
}

/// A frame refused by the connection's rate limit: try again after `wait`.
pub fn throttled(request_id: u64, per_sec: u32, wait: std::time::Duration) -> Bytes {
    let message = format!("frames: more than {per_sec} per second on this connection");
    let wait_ms = wait.as_millis().max(1) as u64;
    error_frame(request_id, Code::ResourceExhausted, message, false, wait_ms)
}

/// A connection or session refused at admission: a fatal error naming the limit, the
/// answer to `request_id` (the auth frame's, or 0 before one was read).
pub fn refused(request_id: u64, refused: &crate::admission::Refused) -> Bytes {
    let wait_ms = refused.retry_after.as_millis() as u64;
    error_frame(
        request_id,
        refused.code(),
        refused.message.clone(),
        true,
        wait_ms,
    )
}

fn error_frame(
    request_id: u64,
    code: Code,
    message: String,
    fatal: bool,
    retry_after_ms: u64,
) -> Bytes {
    let field = if code == Code::InvalidArgument {
        message
            .split_once(": ")
            .map(|(f, _)| f.to_owned())
            .filter(|f| !f.contains(' '))
            .unwrap_or_default()
    } else {
        String::new()
    };
    encode(
        request_id,
        Body::Error(pb::Error {
            code: code as u32,
            message,
            field,
            fatal,
            retry_after_ms,
        }),
    )
}

/// A push of inbox entries, byte-for-byte a `ServerFrame { push }`.
pub fn push(entries: Vec<RawEntry>) -> Bytes {
    pb::PushFrame {
        request_id: 0,
        push: Some(pb::RawPush { entries }),
    }
    .encode_to_vec()
    .into()
}

#[cfg(test)]
mod tests {
    use imesh_protos::{
        message::{Content, Message, Text, content},
        sync::{InboxEntry, SyncEvent, sync_event},
    };

    use super::*;

    #[test]
    fn a_raw_push_decodes_as_a_server_frame_push() {
        // A real event: an empty one would encode to no bytes and decode as no event at all.
        let message = Message {
            msg_id: 11,
            conversation_id: "d:1:2".into(),
            seq: 3,
            sender_id: 1,
            client_msg_id: "c1".into(),
            content: Some(Content {
                kind: Some(content::Kind::Text(Text { text: "hi".into() })),
            }),
            server_time_ms: 1_700_000_000_000,
            ..Message::default()
        };
        let event = SyncEvent {
            kind: Some(sync_event::Kind::Message(message)),
        };
        let raw = RawEntry {
            sync_seq: 7,
            event: event.encode_to_vec().into(),
        };
        let frame = pb::ServerFrame::decode(push(vec![raw])).unwrap();
        let Some(Body::Push(p)) = frame.body else {
            panic!("not a push: {frame:?}")
        };
        assert_eq!(
            p.entries,
            vec![InboxEntry {
                sync_seq: 7,
                event: Some(event)
            }]
        );
    }

    #[test]
    fn invalid_argument_errors_name_their_field() {
        let frame = pb::ServerFrame::decode(status(
            3,
            &Status::invalid_argument("content.text: must not be empty"),
        ))
        .unwrap();
        let Some(Body::Error(e)) = frame.body else {
            panic!()
        };
        assert_eq!(
            (frame.request_id, e.code, e.field.as_str(), e.fatal),
            (3, 3, "content.text", false)
        );
    }
}
