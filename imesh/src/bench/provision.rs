//! Users and groups for a run, made through the admin path: relation-svc `CreateUser` and
//! `IssueToken`, group-svc `CreateGroup` and `ImportMembers`, as the system actor with the
//! deployment's internal credential.

use futures::{StreamExt, TryStreamExt};
use imesh_kit::grpc::Channel;
use imesh_kit::identity::{Actor, Caller};
use imesh_protos::{
    group::{
        CreateGroupRequest, GroupType, ImportMembersRequest,
        group_service_client::GroupServiceClient,
    },
    relation::{
        CreateUserRequest, IssueTokenRequest, relation_service_client::RelationServiceClient,
    },
};

/// Admin calls in flight at once.
const CONCURRENCY: usize = 32;
/// Members added per ImportMembers call.
const IMPORT_CHUNK: usize = 5_000;

pub(super) struct Admin {
    relation: RelationServiceClient<Channel>,
    groups: GroupServiceClient<Channel>,
    caller: Caller,
}

/// A provisioned user and a token to connect as them.
#[derive(Clone)]
pub struct User {
    pub id: i64,
    pub token: String,
}

impl Admin {
    pub(super) fn new(relation: &str, group: &str, internal_secret: &str) -> anyhow::Result<Self> {
        Ok(Self {
            relation: RelationServiceClient::new(imesh_kit::grpc::channel(relation)?),
            groups: GroupServiceClient::new(imesh_kit::grpc::channel(group)?),
            caller: Caller::new(&imesh_kit::config::Secret::new(internal_secret.to_owned()))?,
        })
    }

    /// `count` new users named `<run>-<i>`, each with a token.
    pub(super) async fn users(&self, run: &str, count: usize) -> anyhow::Result<Vec<User>> {
        futures::stream::iter(0..count)
            .map(|i| self.user(format!("{run}-{i}")))
            .buffered(CONCURRENCY)
            .try_collect()
            .await
    }

    async fn user(&self, username: String) -> anyhow::Result<User> {
        let mut relation = self.relation.clone();
        let create = CreateUserRequest {
            username,
            nickname: String::new(),
        };
        let created = relation
            .create_user(self.caller.request(Actor::System, create))
            .await?
            .into_inner();
        let id = created
            .user
            .ok_or_else(|| anyhow::anyhow!("CreateUser answered without a user"))?
            .user_id;
        let token = relation
            .issue_token(
                self.caller
                    .request(Actor::System, IssueTokenRequest { user_id: id }),
            )
            .await?
            .into_inner()
            .token;
        Ok(User { id, token })
    }

    /// A normal (write-fanout) group owned by `members[0]` holding all of `members`; its id.
    pub(super) async fn group(&self, members: &[User]) -> anyhow::Result<i64> {
        let ids = members.iter().skip(1).map(|u| u.id);
        self.group_of(
            members,
            GroupType::Normal,
            members.len().max(2),
            ids.collect(),
        )
        .await
    }

    /// A super group owned by `members[0]` with `members` and synthetic ids (1, 2, …,
    /// never users) up to `size` members in all; its id.
    pub(super) async fn super_group(&self, members: &[User], size: usize) -> anyhow::Result<i64> {
        anyhow::ensure!(members.len() <= size, "more online members than members");
        let synthetic = (size - members.len()) as i64;
        let ids = members.iter().skip(1).map(|u| u.id).chain(1..=synthetic);
        self.group_of(members, GroupType::Super, size, ids.collect())
            .await
    }

    /// A group of `kind` for up to `size` members, owned by `members[0]`, with `imported`
    /// added by ImportMembers; its id.
    async fn group_of(
        &self,
        members: &[User],
        kind: GroupType,
        size: usize,
        imported: Vec<i64>,
    ) -> anyhow::Result<i64> {
        let owner = members
            .first()
            .ok_or_else(|| anyhow::anyhow!("a group needs an owner"))?;
        let create = CreateGroupRequest {
            name: "bench".into(),
            r#type: kind as i32,
            max_member: size as u32,
            ..Default::default()
        };
        let mut groups = self.groups.clone();
        let group_id = groups
            .create_group(self.caller.request(Actor::User(owner.id), create))
            .await?
            .into_inner()
            .group
            .ok_or_else(|| anyhow::anyhow!("CreateGroup answered without a group"))?
            .group_id;
        for chunk in imported.chunks(IMPORT_CHUNK) {
            let import = ImportMembersRequest {
                group_id,
                user_ids: chunk.to_vec(),
            };
            groups
                .import_members(self.caller.request(Actor::System, import))
                .await?;
        }
        Ok(group_id)
    }

    /// group-svc, called as `user`.
    pub(super) fn groups_as<T>(
        &self,
        user: i64,
        message: T,
    ) -> (GroupServiceClient<Channel>, tonic::Request<T>) {
        (
            self.groups.clone(),
            self.caller.request(Actor::User(user), message),
        )
    }
}
