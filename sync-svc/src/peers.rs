//! The notify-svc client that carries new inbox entries to online devices, and the
//! group-svc client that answers who belongs to a group (read fanout, read receipts).

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::Bytes;
use imesh_kit::grpc::{Channel, MAX_CALL_BYTES, runs_within};
use imesh_kit::identity::{Actor, Caller};
use imesh_protos::{
    group::{
        MemberMapRequest, MemberStatus, MembershipRequest, Role,
        group_service_client::GroupServiceClient,
    },
    notify::{
        DeliverRequest, DeliverToGroupsRequest, Delivery, GroupEvent,
        notify_service_client::NotifyServiceClient,
    },
    sync::RawEntry,
};

use crate::domain::{Entry, MapMember, MemberMap, Memberships, Notifier};

pub struct NotifyNotifier {
    client: NotifyServiceClient<Channel>,
    caller: Caller,
}

impl NotifyNotifier {
    pub fn new(channel: Channel, caller: Caller) -> Self {
        Self {
            client: NotifyServiceClient::new(channel),
            caller,
        }
    }
}

#[async_trait::async_trait]
impl Notifier for NotifyNotifier {
    /// One call per [`MAX_CALL_BYTES`], one after another: a big group's batch would
    /// pass the limit notify-svc decodes, and a user's entries split across calls keep
    /// their order.
    async fn deliver(&self, deliveries: Vec<(i64, Vec<Entry>)>) -> anyhow::Result<()> {
        let deliveries: Vec<Delivery> = deliveries
            .into_iter()
            .flat_map(|(user_id, entries)| {
                let entries = entries.into_iter().map(|e| RawEntry {
                    sync_seq: e.sync_seq,
                    event: e.payload,
                });
                runs_within(entries.collect(), MAX_CALL_BYTES)
                    .into_iter()
                    .map(move |entries| Delivery { user_id, entries })
            })
            .collect();
        for deliveries in runs_within(deliveries, MAX_CALL_BYTES) {
            let request = self
                .caller
                .request(Actor::System, DeliverRequest { deliveries });
            self.client.clone().deliver(request).await?;
        }
        Ok(())
    }

    async fn deliver_to_groups(&self, events: Vec<(i64, Bytes)>) -> anyhow::Result<()> {
        let events = events
            .into_iter()
            .map(|(group_id, event)| GroupEvent { group_id, event })
            .collect();
        let request = self
            .caller
            .request(Actor::System, DeliverToGroupsRequest { events });
        self.client.clone().deliver_to_groups(request).await?;
        Ok(())
    }
}

/// How long a group's member map is reused: read counts may lag membership by this much.
const MAP_TTL: Duration = Duration::from_secs(1);
/// Past this many cached maps the cache starts over.
const MAX_MAPS: usize = 10_000;

/// [`Memberships`] backed by group-svc's `Membership` and `MemberMap`, the maps cached
/// for [`MAP_TTL`].
pub struct GroupMemberships {
    client: GroupServiceClient<Channel>,
    caller: Caller,
    maps: parking_lot::Mutex<HashMap<i64, (Instant, Arc<MemberMap>)>>,
}

impl GroupMemberships {
    pub fn new(channel: Channel, caller: Caller) -> Self {
        Self {
            client: GroupServiceClient::new(channel),
            caller,
            maps: parking_lot::Mutex::default(),
        }
    }
}

#[async_trait::async_trait]
impl Memberships for GroupMemberships {
    async fn is_member(&self, group: i64, user: i64) -> anyhow::Result<bool> {
        let request = MembershipRequest {
            group_id: group,
            user_id: user,
        };
        let found = self
            .client
            .clone()
            .membership(self.caller.request(Actor::System, request))
            .await;
        match found {
            Ok(member) => Ok(member.into_inner().status() == MemberStatus::Normal),
            Err(status) if status.code() == tonic::Code::NotFound => Ok(false),
            Err(status) => Err(status.into()),
        }
    }

    async fn member_map(&self, group: i64, fresh: bool) -> anyhow::Result<Arc<MemberMap>> {
        if !fresh
            && let Some((at, map)) = self.maps.lock().get(&group)
            && at.elapsed() < MAP_TTL
        {
            return Ok(map.clone());
        }
        let request = MemberMapRequest { group_id: group };
        let reply = self
            .client
            .clone()
            .member_map(self.caller.request(Actor::System, request))
            .await?
            .into_inner();
        let members = reply
            .user_ids
            .iter()
            .zip(&reply.map_ids)
            .zip(reply.roles())
            .map(|((user, map_id), role)| MapMember {
                user: *user,
                map_id: *map_id,
                manages: matches!(role, Role::Admin | Role::Owner),
            })
            .collect();
        let map = Arc::new(MemberMap::new(members));
        let mut maps = self.maps.lock();
        if maps.len() >= MAX_MAPS {
            maps.clear();
        }
        maps.insert(group, (Instant::now(), map.clone()));
        Ok(map)
    }
}
