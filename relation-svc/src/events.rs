//! What relation-svc tells users' devices: each relation event becomes an outbox payload, an
//! encoded `imesh.sync.v1.Fanout` the kit's `SyncSink` relays to sync-svc.

use imesh_protos::sync::{Fanout, SyncEvent, sync_event::Kind};
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
