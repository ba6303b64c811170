//! The services a gateway calls on a user's behalf.

use imesh_kit::{
    grpc,
    identity::{Actor, Caller},
};
use imesh_protos::{
    message::{SendRequest, SendResponse, message_service_client::MessageServiceClient},
    notify::{Device, OfflineRequest, OnlineRequest, notify_service_client::NotifyServiceClient},
    sync::{AckRequest, PullRequest, PullResponse, sync_service_client::SyncServiceClient},
};
use tonic::{Status, transport::Channel};

#[derive(Clone)]
pub struct Backends {
    caller: Caller,
    message: MessageServiceClient<Channel>,
    sync: SyncServiceClient<Channel>,
    notify: NotifyServiceClient<Channel>,
}

impl Backends {
    pub fn new(
        caller: Caller,
        message_addr: &str,
        sync_addr: &str,
        notify_addr: &str,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            caller,
            message: MessageServiceClient::new(grpc::channel(message_addr)?),
            sync: SyncServiceClient::new(grpc::channel(sync_addr)?),
            notify: NotifyServiceClient::new(grpc::channel(notify_addr)?),
        })
    }

    pub async fn send(&self, user: i64, request: SendRequest) -> Result<SendResponse, Status> {
        Ok(self
            .message
            .clone()
            .send(self.caller.request(Actor::User(user), request))
            .await?
            .into_inner())
    }

    pub async fn pull(&self, user: i64, request: PullRequest) -> Result<PullResponse, Status> {
        Ok(self
            .sync
            .clone()
            .pull(self.caller.request(Actor::User(user), request))
            .await?
            .into_inner())
    }

    pub async fn ack(&self, user: i64, device_id: String, sync_seq: i64) -> Result<(), Status> {
        let request = self.caller.request(
            Actor::User(user),
            AckRequest {
                device_id,
                sync_seq,
            },
        );
        self.sync.clone().ack(request).await?;
        Ok(())
    }

    pub async fn online(&self, device: Device) -> Result<(), Status> {
        let request = self.caller.request(
            Actor::System,
            OnlineRequest {
                device: Some(device),
            },
        );
        self.notify.clone().online(request).await?;
        Ok(())
    }

    pub async fn offline(&self, device: Device) -> Result<(), Status> {
        let request = self.caller.request(
            Actor::System,
            OfflineRequest {
                device: Some(device),
            },
        );
        self.notify.clone().offline(request).await?;
        Ok(())
    }
}
