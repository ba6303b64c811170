//! Groups and their members (seed 000, RBAC of seed 001), with no tonic or sea-orm types:
//! the model here, the decisions in [`rules`] (pure functions of a group's state, run under
//! the store's lock on the group), the operations in [`groups`], the send gate in [`gate`],
//! large groups' member lists in [`roster`].

pub mod gate;
pub mod groups;
pub mod ports;
pub mod recount;
pub mod roster;
pub mod rules;

pub use ports::{
    ACTIVE_KEPT, EncodeEvent, GroupCache, GroupStore, Nicknames, Plan, Rosters, SeqSource,
};

use imesh_kit::error::StoreError;

pub use gate::Gate;
pub use groups::Groups;

/// Permission bits (seed 001).
pub mod perm {
    pub const SEND_MSG: u32 = 1;
    pub const RECALL_OTHER: u32 = 2;
    pub const KICK: u32 = 4;
    pub const INVITE: u32 = 8;
    pub const MUTE: u32 = 16;
    pub const SET_ADMIN: u32 = 32;
    pub const EDIT_INFO: u32 = 64;
    pub const AT_ALL: u32 = 128;
    pub const PIN: u32 = 256;
    pub const DISMISS: u32 = 1024;
    pub const ALL: u32 = SEND_MSG
        | RECALL_OTHER
        | KICK
        | INVITE
        | MUTE
        | SET_ADMIN
        | EDIT_INFO
        | AT_ALL
        | PIN
        | DISMISS;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Member = 1,
    Admin = 2,
    Owner = 3,
}

impl Role {
    /// The bits a role grants.
    pub fn permissions(self) -> u32 {
        use perm::*;
        match self {
            Role::Member => SEND_MSG | INVITE,
            Role::Admin => {
                SEND_MSG | INVITE | RECALL_OTHER | KICK | MUTE | EDIT_INFO | AT_ALL | PIN
            }
            Role::Owner => ALL,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GroupType {
    #[default]
    Normal,
    Super,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JoinMode {
    #[default]
    Invite,
    Approval,
    Free,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GroupStatus {
    #[default]
    Normal,
    Dismissed,
    Banned,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemberStatus {
    #[default]
    Normal,
    Quit,
    Kicked,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Group {
    pub id: i64,
    pub kind: GroupType,
    pub name: String,
    pub avatar_url: String,
    pub announcement: String,
    pub owner_id: i64,
    /// Counted by the store after every change.
    pub member_count: u32,
    pub max_member: u32,
    pub mute_all: bool,
    pub join_mode: JoinMode,
    pub status: GroupStatus,
    /// Bumped by the store on every change.
    pub version: i64,
    pub created_at_ms: i64,
    /// The map id the next joiner gets (map ids are never reused).
    pub next_map_id: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub group_id: i64,
    pub user_id: i64,
    pub role: Role,
    /// Dense per-group index, assigned at join and never reused.
    pub map_id: u32,
    pub alias: String,
    /// The user's nickname (relation-svc) as of the last rename, for search.
    pub nickname: String,
    /// 0: not muted.
    pub mute_until_ms: i64,
    /// The conversation seq at join.
    pub join_seq: i64,
    /// The conversation seq when they quit or were removed; 0 while a member.
    pub leave_seq: i64,
    pub joined_at_ms: i64,
    pub status: MemberStatus,
    pub extra_permissions: u32,
}

impl Member {
    pub fn is_current(&self) -> bool {
        self.status == MemberStatus::Normal
    }

    pub fn permissions(&self) -> u32 {
        GateMember::from(self).permissions()
    }

    pub fn can(&self, bits: u32) -> bool {
        GateMember::from(self).can(bits)
    }
}

/// What the gate needs of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateGroup {
    pub kind: GroupType,
    pub status: GroupStatus,
    pub mute_all: bool,
    pub version: i64,
    pub member_count: u32,
    /// The map id the next member gets: everyone below it joined before now.
    pub next_map_id: u32,
}

/// What the gate needs of a member row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateMember {
    pub role: Role,
    pub map_id: u32,
    pub mute_until_ms: i64,
    pub join_seq: i64,
    pub status: MemberStatus,
    pub extra_permissions: u32,
}

impl From<&Group> for GateGroup {
    fn from(g: &Group) -> Self {
        Self {
            kind: g.kind,
            status: g.status,
            mute_all: g.mute_all,
            version: g.version,
            member_count: g.member_count,
            next_map_id: g.next_map_id,
        }
    }
}

impl From<&Member> for GateMember {
    fn from(m: &Member) -> Self {
        Self {
            role: m.role,
            map_id: m.map_id,
            mute_until_ms: m.mute_until_ms,
            join_seq: m.join_seq,
            status: m.status,
            extra_permissions: m.extra_permissions,
        }
    }
}

impl GateMember {
    pub fn is_current(&self) -> bool {
        self.status == MemberStatus::Normal
    }

    pub fn permissions(&self) -> u32 {
        self.role.permissions() | self.extra_permissions
    }

    /// A current member holding every one of `bits`.
    pub fn can(&self, bits: u32) -> bool {
        self.is_current() && self.permissions() & bits == bits
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinRequest {
    pub group_id: i64,
    pub user_id: i64,
    pub message: String,
    /// 0 when the user applied; else the member who invited them.
    pub inviter_id: i64,
    pub created_at_ms: i64,
}

/// One change as the group's operation log keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    /// The group's version after the change.
    pub version: i64,
    pub op: String,
    /// 0: the system actor.
    pub operator: i64,
    pub targets: Vec<i64>,
    pub at_ms: i64,
}

/// What a group change tells devices: the group after it, what happened, who did it, the
/// members it changed, and who hears of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupEvent {
    pub group: Group,
    pub op: &'static str,
    pub operator: i64,
    pub members: Vec<Member>,
    pub recipients: Vec<i64>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    #[error("group_id: no such group")]
    NotFound,
    #[error("{0}")]
    NotMember(&'static str),
    #[error("user_id: never a member of this group")]
    NeverMember,
    #[error("{0}")]
    Forbidden(&'static str),
    #[error("{0}")]
    Precondition(&'static str),
    #[error("the conversation seq could not be read")]
    Seq(#[source] anyhow::Error),
    #[error("the joiners' nicknames could not be read")]
    Names(#[source] anyhow::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Error {
    Error::Invalid {
        field,
        reason: reason.into(),
    }
}

/// The conversation id of a group (message-svc's naming).
pub use imesh_kit::ids::group_conversation as conversation_id;
