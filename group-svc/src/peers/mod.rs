//! Clients of the services group-svc asks: message-svc for a conversation's current seq,
//! relation-svc for joiners' nicknames; and the outbox relay's sink ([`notices`]).

pub mod notices;

use std::collections::HashMap;

use imesh_kit::grpc::Channel;
use imesh_kit::identity::{Actor, Caller};
use imesh_protos::{
    message::{ConversationSeqRequest, message_service_client::MessageServiceClient},
    relation::{GetUsersRequest, relation_service_client::RelationServiceClient},
};

use crate::domain::{Nicknames, SeqSource};

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

/// [`Nicknames`] from relation-svc's `GetUsers`.
pub struct RelationNames {
    client: RelationServiceClient<Channel>,
    caller: Caller,
}

impl RelationNames {
    pub fn new(channel: Channel, caller: Caller) -> Self {
        Self {
            client: RelationServiceClient::new(channel),
            caller,
        }
    }
}

#[async_trait::async_trait]
impl Nicknames for RelationNames {
    async fn nicknames(&self, users: &[i64]) -> anyhow::Result<HashMap<i64, String>> {
        let request = GetUsersRequest {
            user_ids: users.to_vec(),
        };
        let reply = self
            .client
            .clone()
            .get_users(self.caller.request(Actor::System, request))
            .await?;
        Ok(reply
            .into_inner()
            .users
            .into_iter()
            .map(|u| (u.user_id, u.nickname))
            .collect())
    }
}
