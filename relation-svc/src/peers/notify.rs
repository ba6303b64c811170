//! The notify-svc client that closes a disabled user's sessions.

use imesh_kit::grpc::Channel;
use imesh_kit::identity::{Actor, Caller};
use imesh_protos::notify::{DisconnectRequest, notify_service_client::NotifyServiceClient};

use crate::domain::Sessions;

pub struct NotifySessions {
    client: NotifyServiceClient<Channel>,
    caller: Caller,
}

impl NotifySessions {
    pub fn new(channel: Channel, caller: Caller) -> Self {
        Self {
            client: NotifyServiceClient::new(channel),
            caller,
        }
    }
}

#[async_trait::async_trait]
impl Sessions for NotifySessions {
    async fn disconnect(&self, user: i64, reason: &str) -> anyhow::Result<u32> {
        let request = DisconnectRequest {
            user_ids: vec![user],
            reason: reason.to_owned(),
        };
        let reply = self
            .client
            .clone()
            .disconnect(self.caller.request(Actor::System, request))
            .await?;
        Ok(reply.into_inner().sessions)
    }
}
