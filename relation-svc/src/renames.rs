//! Nickname changes for group-svc, which keeps a copy on each membership for member search:
//! each change is an outbox row (an encoded `imesh.group.v1.MemberName` whose version is
//! the row's id, so later changes win) written with the profile update, and a relay of its
//! own hands them to group-svc's `RenameMembers`.

use imesh_kit::grpc::Channel;
use imesh_kit::{
    identity::{Actor, Caller},
    outbox::{OutboxRow, Sink},
};
use imesh_protos::group::{
    MemberName, RenameMembersRequest, group_service_client::GroupServiceClient,
};
use prost::Message as _;

/// The outbox table of nickname changes.
pub const OUTBOX_TABLE: &str = "relation_rename_outbox";

/// The outbox payload of `user`'s new nickname; `version` is the row's id.
pub fn encode(user: i64, nickname: &str, version: i64) -> Vec<u8> {
    MemberName {
        user_id: user,
        nickname: nickname.to_owned(),
        version,
    }
    .encode_to_vec()
}

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
