//! The notify-svc client that carries new inbox entries to online devices, and the
//! group-svc client that answers who belongs to a read-fanout group.

use bytes::Bytes;
use imesh_kit::identity::{Actor, Caller};
use imesh_protos::{
    group::{MemberStatus, MembershipRequest, group_service_client::GroupServiceClient},
    notify::{
        DeliverRequest, DeliverToGroupsRequest, Delivery, GroupEvent,
        notify_service_client::NotifyServiceClient,
    },
    sync::RawEntry,
};
use tonic::transport::Channel;

use crate::domain::{Entry, Memberships, Notifier};

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
    async fn deliver(&self, deliveries: Vec<(i64, Vec<Entry>)>) -> anyhow::Result<()> {
        let deliveries = deliveries
            .into_iter()
            .map(|(user_id, entries)| Delivery {
                user_id,
                entries: entries
                    .into_iter()
                    .map(|e| RawEntry {
                        sync_seq: e.sync_seq,
                        event: e.payload,
                    })
                    .collect(),
            })
            .collect();
        let request = self
            .caller
            .request(Actor::System, DeliverRequest { deliveries });
        self.client.clone().deliver(request).await?;
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

/// [`Memberships`] backed by group-svc's `Membership`.
pub struct GroupMemberships {
    client: GroupServiceClient<Channel>,
    caller: Caller,
}

impl GroupMemberships {
    pub fn new(channel: Channel, caller: Caller) -> Self {
        Self {
            client: GroupServiceClient::new(channel),
            caller,
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
}
