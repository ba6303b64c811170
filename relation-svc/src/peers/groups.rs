//! The group-svc sink of nickname changes: group-svc keeps a copy of each member's
//! nickname for member search. Each change is an outbox row written with the profile
//! update ([`crate::events::encode_rename`]); a relay of its own hands them here, and
//! this sink to group-svc's `RenameMembers`.

use imesh_kit::grpc::Channel;
use imesh_kit::{
    identity::{Actor, Caller},
    outbox::{OutboxRow, Sink},
};
use imesh_protos::group::{
    MemberName, RenameMembersRequest, group_service_client::GroupServiceClient,
};
use prost::Message as _;

pub struct GroupRenameSink {
    client: GroupServiceClient<Channel>,
    caller: Caller,
}

impl GroupRenameSink {
    pub fn new(channel: Channel, caller: Caller) -> Self {
        Self {
            client: GroupServiceClient::new(channel),
            caller,
        }
    }
}

#[async_trait::async_trait]
impl Sink for GroupRenameSink {
    async fn deliver(&self, rows: &[OutboxRow]) -> anyhow::Result<()> {
        let mut names = Vec::with_capacity(rows.len());
        for row in rows {
            match MemberName::decode(row.payload.as_slice()) {
                Ok(name) => names.push(name),
                // Never happens for rows this version wrote; dropping beats blocking forever.
                Err(e) => {
                    tracing::error!(outbox_id = row.id, error = %e, "undecodable rename dropped")
                }
            }
        }
        if names.is_empty() {
            return Ok(());
        }
        let request = self
            .caller
            .request(Actor::System, RenameMembersRequest { names });
        self.client.clone().rename_members(request).await?;
        Ok(())
    }
}
