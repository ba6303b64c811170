//! message-svc's wire mapping: requests to domain commands, domain types to their protos
//! (shared with [`crate::events`]), and errors to statuses.

use imesh_kit::error;
use imesh_protos::message as pb;
use tonic::Status;

use crate::domain::{
    Content, Download, Error, GroupRefusal, Hidden, Media, MediaKind, Mentions, Message, Notice,
    NoticeOutcome, PinnedMessage, ReactionCount, SendCommand, Sent, Target, Ticket, UploadKind,
    UploadRequest, UploadTarget,
};

pub(crate) fn send_command(request: pb::SendRequest) -> SendCommand {
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

pub(crate) fn send_outcome(outcome: Result<Sent, Error>) -> pb::SendOutcome {
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

pub(crate) fn notice_result(outcome: NoticeOutcome) -> pb::NoticeResult {
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

pub(crate) fn sent_to_proto(sent: Sent) -> pb::SendResponse {
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
pub(crate) fn status(err: Error) -> Status {
    match err {
        Error::Invalid { field, reason } => error::invalid(field, reason),
        Error::TooLarge { .. } => Status::invalid_argument(err.to_string()),
        Error::UnknownUser(_) => Status::not_found(err.to_string()),
        Error::NotParticipant | Error::RecallRefused(_) => {
            Status::permission_denied(err.to_string())
        }
        Error::NoMessage | Error::NoObject => Status::not_found(err.to_string()),
        Error::Precondition(..) | Error::FilesOff => Status::failed_precondition(err.to_string()),
        Error::Blobs(ref e) => {
            tracing::error!(error = %format!("{e:#}"), "object storage failed");
            Status::unavailable("object storage is unavailable; retry later")
        }
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

pub fn message_to_proto(message: &Message) -> pb::Message {
    pb::Message {
        msg_id: message.msg_id,
        conversation_id: message.conversation_id.clone(),
        seq: message.seq,
        sender_id: message.sender_id,
        client_msg_id: message.client_msg_id.clone(),
        content: (message.recalled_by == 0).then(|| content_to_proto(&message.content)),
        server_time_ms: message.server_time_ms,
        recalled_by: message.recalled_by,
        recalled_at_ms: message.recalled_at_ms,
        mentioned_user_ids: message.mentions.users.clone(),
        mention_all: message.mentions.all,
        receipt: message.receipt_bound > 0,
        version: message.version,
        edited_at_ms: message.edited_at_ms,
        reply: message.reply.as_ref().map(|r| pb::Reply {
            seq: r.seq,
            sender_id: r.sender_id,
            excerpt: r.excerpt.clone(),
            recalled: r.recalled,
        }),
        forwarded: message.forwarded.map(|f| pb::Forwarded {
            msg_id: f.msg_id,
            sender_id: f.sender_id,
            server_time_ms: f.server_time_ms,
        }),
        reactions: reactions_to_proto(&message.reactions),
    }
}

pub fn reactions_to_proto(counts: &[ReactionCount]) -> Vec<pb::ReactionCount> {
    counts
        .iter()
        .map(|c| pb::ReactionCount {
            emoji: c.emoji.clone(),
            count: c.count,
            mine: c.mine,
        })
        .collect()
}

pub fn content_to_proto(content: &Content) -> pb::Content {
    use pb::content::Kind;
    let kind = match content {
        Content::Text(text) => Kind::Text(pb::Text { text: text.clone() }),
        Content::Custom(json) => Kind::Custom(pb::Custom { json: json.clone() }),
        Content::Media(kind, media) => {
            let media = media_to_proto(media.clone());
            match kind {
                MediaKind::Image => Kind::Image(media),
                MediaKind::File => Kind::File(media),
                MediaKind::Audio => Kind::Audio(media),
                MediaKind::Video => Kind::Video(media),
            }
        }
        Content::Notice(Notice { code, text, json }) => Kind::Notice(pb::Notice {
            code: code.clone(),
            text: text.clone(),
            json: json.clone(),
        }),
    };
    pb::Content { kind: Some(kind) }
}

pub fn content_from_proto(kind: pb::content::Kind) -> Content {
    use pb::content::Kind;
    match kind {
        Kind::Text(pb::Text { text }) => Content::Text(text),
        Kind::Custom(pb::Custom { json }) => Content::Custom(json),
        Kind::Image(m) => Content::Media(MediaKind::Image, media_from_proto(m)),
        Kind::File(m) => Content::Media(MediaKind::File, media_from_proto(m)),
        Kind::Audio(m) => Content::Media(MediaKind::Audio, media_from_proto(m)),
        Kind::Video(m) => Content::Media(MediaKind::Video, media_from_proto(m)),
        Kind::Notice(pb::Notice { code, text, json }) => {
            Content::Notice(Notice { code, text, json })
        }
    }
}

fn media_to_proto(media: Media) -> pb::Media {
    let Media {
        url,
        size_bytes,
        mime_type,
        width,
        height,
        duration_ms,
        name,
        thumbnail_url,
        object_key,
        thumbnail_key,
    } = media;
    pb::Media {
        url,
        size_bytes,
        mime_type,
        width,
        height,
        duration_ms,
        name,
        thumbnail_url,
        object_key,
        thumbnail_key,
    }
}

fn media_from_proto(media: pb::Media) -> Media {
    let pb::Media {
        url,
        size_bytes,
        mime_type,
        width,
        height,
        duration_ms,
        name,
        thumbnail_url,
        object_key,
        thumbnail_key,
    } = media;
    Media {
        url,
        size_bytes,
        mime_type,
        width,
        height,
        duration_ms,
        name,
        thumbnail_url,
        object_key,
        thumbnail_key,
    }
}

pub fn pinned_to_proto(pinned: &PinnedMessage) -> pb::Pinned {
    pb::Pinned {
        seq: pinned.pin.seq,
        pinned_by: pinned.pin.pinned_by,
        pinned_at_ms: pinned.pin.pinned_at_ms,
        message: Some(message_to_proto(&pinned.message)),
    }
}

pub fn hidden_to_proto(hidden: &Hidden) -> pb::HiddenForMe {
    pb::HiddenForMe {
        conversation_id: hidden.conversation_id.clone(),
        seqs: hidden.seqs.clone(),
        cleared_seq: hidden.cleared_seq,
    }
}

pub fn upload_request(request: pb::CreateUploadRequest) -> UploadRequest {
    use pb::UploadKind as K;
    let kind = match request.kind() {
        K::Unspecified => None,
        K::Image => Some(UploadKind::Image),
        K::File => Some(UploadKind::File),
        K::Audio => Some(UploadKind::Audio),
        K::Video => Some(UploadKind::Video),
    };
    UploadRequest {
        kind,
        mime_type: request.mime_type,
        size_bytes: request.size_bytes,
        thumbnail_size_bytes: request.thumbnail_size_bytes,
        thumbnail_mime_type: request.thumbnail_mime_type,
    }
}

pub fn ticket_to_proto(ticket: Ticket) -> pb::CreateUploadResponse {
    let target = |t: UploadTarget| pb::UploadTarget {
        object_key: t.key,
        url: t.url,
        headers: t.headers.into_iter().collect(),
    };
    pb::CreateUploadResponse {
        object: Some(target(ticket.object)),
        thumbnail: ticket.thumbnail.map(target),
        expires_at_ms: ticket.expires_at_ms,
    }
}

pub fn download_to_proto(download: Download) -> pb::GetDownloadResponse {
    pb::GetDownloadResponse {
        url: download.url,
        thumbnail_url: download.thumbnail_url.unwrap_or_default(),
        expires_at_ms: download.expires_at_ms,
    }
}
