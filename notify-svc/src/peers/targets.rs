//! [`Targets`] over gRPC: sync-svc's `OfflineTargets` decides which offline users are pushed.

use imesh_kit::grpc::Channel;
use imesh_kit::identity::{Actor, Caller};
use imesh_protos::sync::{self as pb, sync_service_client::SyncServiceClient};

use crate::domain::ports::{Decision, Preview, Targets};

pub struct SyncTargets {
    caller: Caller,
    client: SyncServiceClient<Channel>,
}

impl SyncTargets {
    pub fn new(caller: Caller, channel: Channel) -> Self {
        Self {
            caller,
            client: SyncServiceClient::new(channel),
        }
    }
}

#[async_trait::async_trait]
impl Targets for SyncTargets {
    async fn decide(&self, targets: Vec<(i64, String)>) -> anyhow::Result<Vec<Decision>> {
        let asked = targets.len();
        let request = pb::OfflineTargetsRequest {
            targets: targets
                .into_iter()
                .map(|(user_id, conversation_id)| pb::OfflineTarget {
                    user_id,
                    conversation_id,
                })
                .collect(),
        };
        let decisions = self
            .client
            .clone()
            .offline_targets(self.caller.request(Actor::System, request))
            .await?
            .into_inner()
            .decisions;
        anyhow::ensure!(
            decisions.len() == asked,
            "sync-svc answered {} decisions for {asked} targets",
            decisions.len()
        );
        Ok(decisions
            .into_iter()
            .map(|d| Decision {
                push: d.push,
                badge: d.badge,
                preview: match d.preview() {
                    pb::Preview::Full => Preview::Full,
                    pb::Preview::Sender => Preview::Sender,
                    pb::Preview::Hidden => Preview::Hidden,
                },
            })
            .collect())
    }
}
