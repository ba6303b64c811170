//! Clients of the services group-svc asks: message-svc for a conversation's current seq.

use imesh_kit::identity::{Actor, Caller};
use imesh_protos::message::{ConversationSeqRequest, message_service_client::MessageServiceClient};
use tonic::transport::Channel;

use crate::domain::groups::SeqSource;

pub struct MessageSeqs {
    client: MessageServiceClient<Channel>,
    caller: Caller,
}

impl MessageSeqs {
    pub fn new(channel: Channel, caller: Caller) -> Self {
        Self {
            client: MessageServiceClient::new(channel),
            caller,
        }
    }
}

#[async_trait::async_trait]
impl SeqSource for MessageSeqs {
    async fn current_seq(&self, conversation_id: &str) -> anyhow::Result<i64> {
        let request = self.caller.request(
            Actor::System,
            ConversationSeqRequest {
                conversation_id: conversation_id.to_owned(),
            },
        );
        Ok(self
            .client
            .clone()
            .conversation_seq(request)
            .await?
            .into_inner()
            .seq)
    }
}
