//! relation-svc, which the direct-send gate asks whether two users may talk.

use imesh_kit::grpc::Channel;
use imesh_kit::identity::{Actor, Caller};
use imesh_protos::relation::{
    CheckPairsRequest, GetUsersRequest, Relation, UserPair,
    relation_service_client::RelationServiceClient,
};

use crate::domain::{Directory, PeerRelation};

/// Most pairs relation-svc's `CheckPairs` takes in one call.
const MAX_PAIRS_PER_CHECK: usize = 500;

/// [`Directory`] backed by relation-svc's cached `CheckPairs`.
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
    async fn relations(&self, pairs: &[(i64, i64)]) -> anyhow::Result<Vec<PeerRelation>> {
        let mut found = Vec::with_capacity(pairs.len());
        for chunk in pairs.chunks(MAX_PAIRS_PER_CHECK) {
            let ask = CheckPairsRequest {
                pairs: chunk
                    .iter()
                    .map(|&(user_id, peer_id)| UserPair { user_id, peer_id })
                    .collect(),
            };
            let request = self.caller.request(Actor::System, ask);
            let reply = self.client.clone().check_pairs(request).await?.into_inner();
            anyhow::ensure!(
                reply.relations.len() == chunk.len(),
                "relation-svc answered {} of {} pairs",
                reply.relations.len(),
                chunk.len()
            );
            found.extend(reply.relations.iter().map(|r| {
                let relation = r.relation();
                PeerRelation {
                    exists: r.exists,
                    peer_lists_sender: matches!(relation, Relation::Both | Relation::TheirsOnly),
                    sender_blocked_peer: r.blocked_by_me,
                    peer_blocked_sender: r.blocked_me,
                }
            }));
        }
        Ok(found)
    }

    async fn existing(&self, users: &[i64]) -> anyhow::Result<Vec<i64>> {
        let request = self.caller.request(
            Actor::System,
            GetUsersRequest {
                user_ids: users.to_vec(),
            },
        );
        let reply = self.client.clone().get_users(request).await?.into_inner();
        Ok(reply
            .users
            .into_iter()
            .filter(|u| !u.disabled)
            .map(|u| u.user_id)
            .collect())
    }
}
