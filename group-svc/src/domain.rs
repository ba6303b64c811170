//! Groups and their members: creation with initial members, lookups. No tonic or sea-orm
//! types here.

use std::sync::Arc;

use imesh_kit::{error::StoreError, ids::Snowflake};

use crate::store::GroupStore;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Member = 1,
    Admin = 2,
    Owner = 3,
}

impl Role {
    pub fn from_i16(value: i16) -> Option<Self> {
        match value {
            1 => Some(Self::Member),
            2 => Some(Self::Admin),
            3 => Some(Self::Owner),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub id: i64,
    pub name: String,
    pub owner_id: i64,
    pub member_count: u32,
    pub created_at_ms: i64,
    pub version: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub user_id: i64,
    pub role: Role,
    /// Dense per-group index, assigned at join and never reused.
    pub map_id: u32,
    pub joined_at_ms: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    #[error("group_id: no group {0}")]
    NotFound(i64),
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn invalid(field: &'static str, reason: impl Into<String>) -> Error {
    Error::Invalid {
        field,
        reason: reason.into(),
    }
}

/// Initial members one CreateGroup may name.
pub const MAX_INITIAL_MEMBERS: usize = 500;

pub struct Groups {
    store: Arc<dyn GroupStore>,
    ids: Arc<Snowflake>,
}

impl Groups {
    pub fn new(store: Arc<dyn GroupStore>, ids: Arc<Snowflake>) -> Self {
        Self { store, ids }
    }

    /// Creates a group owned by `owner` with `member_ids` (duplicates and the owner
    /// himself are ignored); map ids are assigned in join order, the owner first.
    pub async fn create(
        &self,
        owner: i64,
        name: &str,
        member_ids: &[i64],
    ) -> Result<(Group, Vec<Member>), Error> {
        let name = name.trim();
        if name.is_empty() || name.chars().count() > 64 {
            return Err(invalid("name", "must be 1–64 characters"));
        }
        if member_ids.len() > MAX_INITIAL_MEMBERS {
            return Err(invalid(
                "member_ids",
                format!("at most {MAX_INITIAL_MEMBERS} at creation"),
            ));
        }
        if member_ids.iter().any(|id| *id <= 0) {
            return Err(invalid("member_ids", "must be user ids"));
        }
        let now = imesh_kit::ids::unix_ms();
        let mut users = vec![owner];
        for id in member_ids {
            if !users.contains(id) {
                users.push(*id);
            }
        }
        let members: Vec<Member> = users
            .iter()
            .enumerate()
            .map(|(i, user)| Member {
                user_id: *user,
                role: if *user == owner {
                    Role::Owner
                } else {
                    Role::Member
                },
                map_id: i as u32,
                joined_at_ms: now,
            })
            .collect();
        let group = Group {
            id: self.ids.next_id(),
            name: name.to_owned(),
            owner_id: owner,
            member_count: members.len() as u32,
            created_at_ms: now,
            version: 1,
        };
        self.store.create(&group, &members).await?;
        Ok((group, members))
    }

    pub async fn get(&self, group_id: i64) -> Result<Group, Error> {
        self.store
            .group(group_id)
            .await?
            .ok_or(Error::NotFound(group_id))
    }

    pub async fn members(&self, group_id: i64) -> Result<Vec<Member>, Error> {
        self.get(group_id).await?;
        Ok(self.store.members(group_id).await?)
    }
}
