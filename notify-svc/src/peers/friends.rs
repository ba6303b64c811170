//! [`Friends`] over gRPC: relation-svc's `ListFriends`, asked as the user.

use imesh_kit::grpc::Channel;
use imesh_kit::identity::{Actor, Caller};
use imesh_protos::relation::{
    FriendStatus, ListFriendsRequest, relation_service_client::RelationServiceClient,
};

use crate::domain::ports::Friends;

/// Rows per ListFriends page (its maximum).
const PAGE: u32 = 500;

pub struct GrpcFriends {
    caller: Caller,
    client: RelationServiceClient<Channel>,
}

impl GrpcFriends {
    pub fn new(caller: Caller, channel: Channel) -> Self {
        Self {
            caller,
            client: RelationServiceClient::new(channel),
        }
    }
}

#[async_trait::async_trait]
impl Friends for GrpcFriends {
    async fn friends(&self, user: i64, limit: usize) -> anyhow::Result<Vec<i64>> {
        let mut friends = Vec::new();
        let mut after_sequence = 0;
        loop {
            let page = ListFriendsRequest {
                after_sequence,
                limit: PAGE,
            };
            let page = self
                .client
                .clone()
                .list_friends(self.caller.request(Actor::User(user), page))
                .await?
                .into_inner();
            for row in &page.friendships {
                after_sequence = after_sequence.max(row.sequence);
                if row.status() == FriendStatus::Friend && !row.blocked {
                    friends.push(row.peer_id);
                }
            }
            if !page.has_more || friends.len() >= limit || page.friendships.is_empty() {
                friends.truncate(limit);
                return Ok(friends);
            }
        }
    }
}
