//! The sink every service's outbox relays to: rows whose payloads are encoded
//! `imesh.sync.v1.Fanout`s, appended to their recipients' inboxes by sync-svc's `Append`
//! (idempotent per event id, as [`Sink`] requires).
//!
//! Each event goes to the sync-svc replica that owns its conversation ([`Keyed`]), so one
//! replica appends and pushes a conversation's events, in the order they were relayed,
//! however many replicas run.

use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};

use crate::grpc::{Keyed, MAX_CALL_BYTES, Replica, runs_within};
use imesh_protos::sync::{
    AppendRequest, Fanout, sync_event::Kind, sync_service_client::SyncServiceClient,
};
use prost::Message as _;

use super::{OutboxRow, Sink};
use crate::identity::{Actor, Caller};

pub struct SyncSink {
    replicas: Keyed,
    caller: Caller,
}

impl SyncSink {
    pub fn new(replicas: Keyed, caller: Caller) -> Self {
        Self { replicas, caller }
    }

    /// Appends `events` on one replica in calls of at most MAX_CALL_BYTES, one after
    /// another (order kept): a batch of long messages to large groups would pass what
    /// sync-svc decodes, fail whole, and be retried whole for ever. Append is idempotent,
    /// so a retry after a partial failure is safe.
    async fn append(&self, replica: Replica, events: Vec<Fanout>) -> anyhow::Result<()> {
        let mut client = SyncServiceClient::new(replica.channel.clone());
        for events in runs_within(events, MAX_CALL_BYTES) {
            let request = self.caller.request(Actor::System, AppendRequest { events });
            if let Err(status) = client.append(request).await {
                // The relay tries again; the replica's keys go to the next one meanwhile.
                self.replicas.unreachable(&replica, &status);
                return Err(status.into());
            }
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Sink for SyncSink {
    async fn deliver(&self, rows: &[OutboxRow]) -> anyhow::Result<()> {
        let mut events = Vec::with_capacity(rows.len());
        for row in rows {
            match Fanout::decode(row.payload.as_slice()) {
                Ok(event) => events.push(event),
                // Never happens for rows this version wrote; dropping beats blocking forever.
                Err(e) => {
                    tracing::error!(outbox_id = row.id, error = %e, "undecodable outbox row dropped")
                }
            }
        }
        let shares = self.replicas.split(events, route_key);
        let calls = shares
            .into_iter()
            .map(|(replica, events)| self.append(replica, events));
        futures::future::try_join_all(calls).await?;
        Ok(())
    }
}

/// The key that picks an event's sync-svc replica: its conversation's; a group change's
/// group conversation's (`g:<id>`), so one replica pushes a group's changes and messages
/// in the order they reach it; otherwise (friendships, friend requests, presence) its
/// lowest recipient, which is the same for every event between the same users.
fn route_key(fanout: &Fanout) -> u64 {
    let hasher = BuildHasherDefault::<DefaultHasher>::default();
    let kind = fanout.event.as_ref().and_then(|event| event.kind.as_ref());
    let conversation = match kind {
        Some(Kind::Message(m)) => &m.conversation_id,
        Some(Kind::Recalled(e)) => &e.conversation_id,
        Some(Kind::Read(e)) => &e.conversation_id,
        Some(Kind::Advanced(e)) => &e.conversation_id,
        Some(Kind::Settings(e)) => &e.conversation_id,
        Some(Kind::Receipt(e)) => &e.conversation_id,
        Some(Kind::Typing(e)) => &e.conversation_id,
        Some(Kind::Edited(e)) => &e.conversation_id,
        Some(Kind::Pin(e)) => &e.conversation_id,
        Some(Kind::Hidden(e)) => &e.conversation_id,
        Some(Kind::Reaction(e)) => &e.conversation_id,
        Some(Kind::ReactionCounts(e)) => &e.conversation_id,
        Some(Kind::Removed(e)) => &e.conversation_id,
        Some(Kind::Group(e)) => {
            let group = e.group.as_ref().map_or(0, |g| g.group_id);
            return hasher.hash_one(("c", crate::ids::group_conversation(group).as_str()));
        }
        Some(Kind::Friendship(_) | Kind::FriendRequest(_) | Kind::Presence(_)) | None => {
            let lowest = fanout.recipient_ids.iter().min();
            return hasher.hash_one(("u", lowest));
        }
    };
    hasher.hash_one(("c", conversation.as_str()))
}

#[cfg(test)]
mod tests {
    use imesh_protos::{group, message, sync::SyncEvent};

    use super::*;

    fn fanout(kind: Kind, recipients: Vec<i64>) -> Fanout {
        Fanout {
            recipient_ids: recipients,
            event: Some(SyncEvent { kind: Some(kind) }),
            ..Default::default()
        }
    }

    #[test]
    fn a_groups_changes_take_the_replica_of_its_messages() {
        let in_group = |id: &str| {
            let message = message::Message {
                conversation_id: id.into(),
                ..Default::default()
            };
            route_key(&fanout(Kind::Message(message), vec![1, 2]))
        };
        let change = |group_id| {
            let changed = group::GroupChanged {
                group: Some(group::Group {
                    group_id,
                    ..Default::default()
                }),
                ..Default::default()
            };
            route_key(&fanout(Kind::Group(changed), vec![3]))
        };
        assert_eq!(change(7), in_group("g:7"));
        assert_ne!(change(7), in_group("g:8"));
        let friends = |recipients| {
            let changed = imesh_protos::relation::FriendshipChanged::default();
            route_key(&fanout(Kind::Friendship(changed), recipients))
        };
        assert_eq!(friends(vec![5, 9]), friends(vec![9, 5]), "either way round");
    }
}
