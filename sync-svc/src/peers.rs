//! The notify-svc client that carries new inbox entries to online devices.

use imesh_kit::identity::{Actor, Caller};
use imesh_protos::{
    notify::{DeliverRequest, Delivery, notify_service_client::NotifyServiceClient},
    sync::RawEntry,
};
use tonic::transport::Channel;

use crate::domain::{Entry, Notifier};

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
}
