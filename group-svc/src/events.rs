//! What group-svc tells members' devices: each change becomes an outbox payload, an encoded
//! `imesh.sync.v1.Fanout` the kit's `SyncSink` relays to sync-svc. The event id is the group
//! and its version, stable across relay retries.

use imesh_protos::{
    group::GroupChanged,
    sync::{Fanout, SyncEvent, sync_event::Kind},
};
use prost::Message as _;

use crate::{
    api::convert::{group_to_proto, member_to_proto},
    domain::GroupEvent,
};

pub fn encode(event: &GroupEvent) -> Vec<u8> {
    let changed = GroupChanged {
        group: Some(group_to_proto(&event.group)),
        op: event.op.to_owned(),
        operator_id: event.operator,
        members: event.members.iter().map(member_to_proto).collect(),
    };
    Fanout {
        event_id: format!("g:{}:{}", event.group.id, event.group.version),
        recipient_ids: event.recipients.clone(),
        event: Some(SyncEvent {
            kind: Some(Kind::Group(changed)),
        }),
        ..Fanout::default()
    }
    .encode_to_vec()
}
