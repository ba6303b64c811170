//! The outbox payloads relation-svc writes: each relation event becomes an encoded
//! `imesh.sync.v1.Fanout` the kit's `SyncSink` relays to sync-svc, and each nickname change
//! an encoded `imesh.group.v1.MemberName` for group-svc ([`crate::peers::groups`]).

use imesh_protos::{
    group::MemberName,
    sync::{Fanout, SyncEvent, sync_event::Kind},
};
use prost::Message as _;

use crate::{api::convert, domain::RelationEvent};

/// The outbox payload of `event`. Event ids are stable per change, so a replay by the relay
/// is recognised by sync-svc: a row change by its owner's sequence, a request change by its
/// id, state and time.
pub fn encode(event: &RelationEvent) -> Vec<u8> {
    let (event_id, recipient_ids, kind) = match event {
        RelationEvent::Friendship(row) => (
            format!("rf:{}:{}", row.owner, row.sequence),
            vec![row.owner],
            Kind::Friendship(imesh_protos::relation::FriendshipChanged {
                friendship: Some(convert::friendship_to_proto(row)),
            }),
        ),
        RelationEvent::Request(request) => (
            format!(
                "rq:{}:{}:{}",
                request.id, request.updated_at_ms, request.state as u8
            ),
            vec![request.from, request.to],
            Kind::FriendRequest(imesh_protos::relation::FriendRequestChanged {
                request: Some(convert::request_to_proto(request)),
            }),
        ),
    };
    Fanout {
        event_id,
        recipient_ids,
        event: Some(SyncEvent { kind: Some(kind) }),
        ..Fanout::default()
    }
    .encode_to_vec()
}

/// The outbox table of nickname changes.
pub const RENAME_OUTBOX_TABLE: &str = "relation_rename_outbox";

/// The outbox payload of `user`'s new nickname; `version` is the row's id, so later changes
/// win.
pub fn encode_rename(user: i64, nickname: &str, version: i64) -> Vec<u8> {
    MemberName {
        user_id: user,
        nickname: nickname.to_owned(),
        version,
    }
    .encode_to_vec()
}
