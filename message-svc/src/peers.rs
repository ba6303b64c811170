//! Clients of the services message-svc asks before storing a message.

use imesh_kit::identity::{Actor, Caller};
use imesh_protos::relation::{GetUsersRequest, relation_service_client::RelationServiceClient};
use tonic::transport::Channel;

use crate::domain::Directory;

/// [`Directory`] backed by relation-svc.
pub struct RelationDirectory {
    client: RelationServiceClient<Channel>,
    caller: Caller,
}

impl RelationDirectory {
    pub fn new(channel: Channel, caller: Caller) -> Self {
        Self {
            client: RelationServiceClient::new(channel),
            caller,
        }
    }
}

#[async_trait::async_trait]
impl Directory for RelationDirectory {
    async fn existing(&self, ids: &[i64]) -> anyhow::Result<Vec<i64>> {
        let request = self.caller.request(
            Actor::System,
            GetUsersRequest {
                user_ids: ids.to_vec(),
            },
        );
        let users = self
            .client
            .clone()
            .get_users(request)
            .await?
            .into_inner()
            .users;
        Ok(users.into_iter().map(|u| u.user_id).collect())
    }
}
