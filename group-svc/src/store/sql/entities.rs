//! sea-orm entities of group-svc and their conversions to domain types.

use imesh_kit::error::StoreError;
use sea_orm::ActiveValue::{NotSet, Set};

use crate::domain::{
    Group, GroupStatus, GroupType, JoinMode, JoinRequest, Member, MemberStatus, Role,
};

#[allow(unreachable_pub)]
pub(super) mod groups {
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "im_group")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub id: i64,
        pub kind: i16,
        pub name: String,
        pub avatar_url: String,
        pub announcement: String,
        pub owner_id: i64,
        pub member_count: i32,
        pub max_member: i32,
        pub mute_all: bool,
        pub join_mode: i16,
        pub status: i16,
        pub version: i64,
        pub created_at_ms: i64,
        pub next_map_id: i32,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

#[allow(unreachable_pub)]
pub(super) mod members {
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "im_group_member")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub group_id: i64,
        #[sea_orm(primary_key, auto_increment = false)]
        pub user_id: i64,
        pub role: i16,
        pub map_id: i32,
        pub alias: String,
        pub nickname: String,
        /// The version of the rename that set `nickname` (only renames write it).
        pub nickname_version: i64,
        pub mute_until_ms: i64,
        pub join_seq: i64,
        pub leave_seq: i64,
        pub joined_at_ms: i64,
        pub status: i16,
        pub extra_permissions: i32,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

#[allow(unreachable_pub)]
pub(super) mod requests {
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "im_group_join_request")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub group_id: i64,
        #[sea_orm(primary_key, auto_increment = false)]
        pub user_id: i64,
        pub message: String,
        pub inviter_id: i64,
        pub created_at_ms: i64,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

fn corrupt(what: &str, value: i16) -> StoreError {
    StoreError::Unavailable(anyhow::anyhow!("stored {what} {value} is unknown"))
}

pub(super) fn to_group(m: groups::Model) -> Result<Group, StoreError> {
    Ok(Group {
        id: m.id,
        kind: match m.kind {
            0 => GroupType::Normal,
            1 => GroupType::Super,
            v => return Err(corrupt("group kind", v)),
        },
        name: m.name,
        avatar_url: m.avatar_url,
        announcement: m.announcement,
        owner_id: m.owner_id,
        member_count: m.member_count as u32,
        max_member: m.max_member as u32,
        mute_all: m.mute_all,
        join_mode: match m.join_mode {
            0 => JoinMode::Invite,
            1 => JoinMode::Approval,
            2 => JoinMode::Free,
            v => return Err(corrupt("join mode", v)),
        },
        status: match m.status {
            0 => GroupStatus::Normal,
            1 => GroupStatus::Dismissed,
            2 => GroupStatus::Banned,
            v => return Err(corrupt("group status", v)),
        },
        version: m.version,
        created_at_ms: m.created_at_ms,
        next_map_id: m.next_map_id as u32,
    })
}

pub(super) fn group_row(g: &Group) -> groups::ActiveModel {
    groups::ActiveModel {
        id: Set(g.id),
        kind: Set(g.kind as i16),
        name: Set(g.name.clone()),
        avatar_url: Set(g.avatar_url.clone()),
        announcement: Set(g.announcement.clone()),
        owner_id: Set(g.owner_id),
        member_count: Set(g.member_count as i32),
        max_member: Set(g.max_member as i32),
        mute_all: Set(g.mute_all),
        join_mode: Set(g.join_mode as i16),
        status: Set(g.status as i16),
        version: Set(g.version),
        created_at_ms: Set(g.created_at_ms),
        next_map_id: Set(g.next_map_id as i32),
    }
}

pub(super) fn to_member(m: members::Model) -> Result<Member, StoreError> {
    Ok(Member {
        group_id: m.group_id,
        user_id: m.user_id,
        role: match m.role {
            1 => Role::Member,
            2 => Role::Admin,
            3 => Role::Owner,
            v => return Err(corrupt("member role", v)),
        },
        map_id: m.map_id as u32,
        alias: m.alias,
        nickname: m.nickname,
        mute_until_ms: m.mute_until_ms,
        join_seq: m.join_seq,
        leave_seq: m.leave_seq,
        joined_at_ms: m.joined_at_ms,
        status: match m.status {
            0 => MemberStatus::Normal,
            1 => MemberStatus::Quit,
            2 => MemberStatus::Kicked,
            v => return Err(corrupt("member status", v)),
        },
        extra_permissions: m.extra_permissions as u32,
    })
}

pub(super) fn member_row(m: &Member) -> members::ActiveModel {
    members::ActiveModel {
        group_id: Set(m.group_id),
        user_id: Set(m.user_id),
        role: Set(m.role as i16),
        map_id: Set(m.map_id as i32),
        alias: Set(m.alias.clone()),
        nickname: Set(m.nickname.clone()),
        nickname_version: NotSet,
        mute_until_ms: Set(m.mute_until_ms),
        join_seq: Set(m.join_seq),
        leave_seq: Set(m.leave_seq),
        joined_at_ms: Set(m.joined_at_ms),
        status: Set(m.status as i16),
        extra_permissions: Set(m.extra_permissions as i32),
    }
}

pub(super) fn to_request(m: requests::Model) -> JoinRequest {
    JoinRequest {
        group_id: m.group_id,
        user_id: m.user_id,
        message: m.message,
        inviter_id: m.inviter_id,
        created_at_ms: m.created_at_ms,
    }
}

pub(super) fn request_row(r: &JoinRequest) -> requests::ActiveModel {
    requests::ActiveModel {
        group_id: Set(r.group_id),
        user_id: Set(r.user_id),
        message: Set(r.message.clone()),
        inviter_id: Set(r.inviter_id),
        created_at_ms: Set(r.created_at_ms),
    }
}
