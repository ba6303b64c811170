//! Clients of the services message-svc asks before storing a message.

use imesh_kit::identity::{Actor, Caller};
use imesh_protos::relation::{
    CheckRelationsRequest, Relation, relation_service_client::RelationServiceClient,
};
use tonic::transport::Channel;

use crate::domain::{Directory, PeerRelation};

/// [`Directory`] backed by relation-svc's cached `CheckRelations`.
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
    async fn relation(&self, sender: i64, peer: i64) -> anyhow::Result<PeerRelation> {
        let request = self.caller.request(
            Actor::System,
            CheckRelationsRequest {
                user_id: sender,
                peer_ids: vec![peer],
            },
        );
        let reply = self
            .client
            .clone()
            .check_relations(request)
            .await?
            .into_inner();
        let Some(found) = reply.relations.into_iter().find(|r| r.peer_id == peer) else {
            anyhow::bail!("relation-svc answered without peer {peer}");
        };
        let relation = found.relation();
        Ok(PeerRelation {
            exists: found.exists,
            peer_lists_sender: matches!(relation, Relation::Both | Relation::TheirsOnly),
            sender_blocked_peer: found.blocked_by_me,
            peer_blocked_sender: found.blocked_me,
        })
    }
}
