//! Domain ↔ wire conversions of group-svc, and the one place its errors become statuses.

use imesh_kit::error::{self, StoreError};
use imesh_protos::group as pb;
use tonic::Status;

use crate::domain::{
    Error, Group, GroupStatus, GroupType, JoinMode, JoinRequest, Member, MemberStatus, Operation,
    Role,
};

pub fn role_to_proto(role: Role) -> pb::Role {
    match role {
        Role::Member => pb::Role::Member,
        Role::Admin => pb::Role::Admin,
        Role::Owner => pb::Role::Owner,
    }
}

pub fn kind_to_proto(kind: GroupType) -> pb::GroupType {
    match kind {
        GroupType::Normal => pb::GroupType::Normal,
        GroupType::Super => pb::GroupType::Super,
    }
}

pub fn join_mode_to_proto(mode: JoinMode) -> pb::JoinMode {
    match mode {
        JoinMode::Invite => pb::JoinMode::Invite,
        JoinMode::Approval => pb::JoinMode::Approval,
        JoinMode::Free => pb::JoinMode::Free,
    }
}

pub fn join_mode_from_proto(field: &'static str, raw: i32) -> Result<JoinMode, Status> {
    match pb::JoinMode::try_from(raw) {
        Ok(pb::JoinMode::Invite) => Ok(JoinMode::Invite),
        Ok(pb::JoinMode::Approval) => Ok(JoinMode::Approval),
        Ok(pb::JoinMode::Free) => Ok(JoinMode::Free),
        Err(_) => Err(error::invalid(field, "must be INVITE, APPROVAL or FREE")),
    }
}

pub fn kind_from_proto(raw: i32) -> Result<GroupType, Status> {
    match pb::GroupType::try_from(raw) {
        Ok(pb::GroupType::Normal) => Ok(GroupType::Normal),
        Ok(pb::GroupType::Super) => Ok(GroupType::Super),
        Err(_) => Err(error::invalid("type", "must be NORMAL or SUPER")),
    }
}

pub fn group_to_proto(g: &Group) -> pb::Group {
    let status = match g.status {
        GroupStatus::Normal => pb::GroupStatus::Normal,
        GroupStatus::Dismissed => pb::GroupStatus::Dismissed,
        GroupStatus::Banned => pb::GroupStatus::Banned,
    };
    pb::Group {
        group_id: g.id,
        name: g.name.clone(),
        owner_id: g.owner_id,
        member_count: g.member_count,
        created_at_ms: g.created_at_ms,
        version: g.version,
        r#type: kind_to_proto(g.kind) as i32,
        avatar_url: g.avatar_url.clone(),
        announcement: g.announcement.clone(),
        max_member: g.max_member,
        mute_all: g.mute_all,
        join_mode: join_mode_to_proto(g.join_mode) as i32,
        status: status as i32,
    }
}

pub fn member_to_proto(m: &Member) -> pb::Member {
    let status = match m.status {
        MemberStatus::Normal => pb::MemberStatus::Normal,
        MemberStatus::Quit => pb::MemberStatus::Quit,
        MemberStatus::Kicked => pb::MemberStatus::Kicked,
    };
    pb::Member {
        user_id: m.user_id,
        role: role_to_proto(m.role) as i32,
        map_id: m.map_id,
        joined_at_ms: m.joined_at_ms,
        alias: m.alias.clone(),
        nickname: m.nickname.clone(),
        mute_until_ms: m.mute_until_ms,
        join_seq: m.join_seq,
        status: status as i32,
        extra_permissions: m.extra_permissions,
        permissions: m.permissions(),
        leave_seq: m.leave_seq,
    }
}

pub fn request_to_proto(r: &JoinRequest) -> pb::JoinRequest {
    pb::JoinRequest {
        group_id: r.group_id,
        user_id: r.user_id,
        message: r.message.clone(),
        created_at_ms: r.created_at_ms,
        inviter_id: r.inviter_id,
    }
}

pub fn members_reply((group, members): (Group, Vec<Member>)) -> pb::MembersReply {
    pb::MembersReply {
        group: Some(group_to_proto(&group)),
        members: members.iter().map(member_to_proto).collect(),
    }
}

pub fn group_reply(group: Group) -> pb::GroupReply {
    pb::GroupReply {
        group: Some(group_to_proto(&group)),
    }
}

/// The one place group-svc errors become gRPC statuses.
pub fn status(err: Error) -> Status {
    match err {
        Error::Invalid { field, reason } => error::invalid(field, reason),
        Error::NotFound | Error::NeverMember => Status::not_found(err.to_string()),
        Error::NotMember(_) | Error::Forbidden(_) => Status::permission_denied(err.to_string()),
        Error::Precondition(_) => Status::failed_precondition(err.to_string()),
        Error::Seq(ref e) => {
            tracing::warn!(error = %format!("{e:#}"), "message-svc unavailable for join_seq");
            Status::unavailable("message-svc is unavailable; retry later")
        }
        Error::Names(ref e) => {
            tracing::warn!(error = %format!("{e:#}"), "relation-svc unavailable for nicknames");
            Status::unavailable("relation-svc is unavailable; retry later")
        }
        Error::Store(StoreError::Unavailable(ref e)) => error::unavailable(e.as_ref()),
        Error::Store(ref e) => error::internal(e),
    }
}

pub fn operation_to_proto(operation: Operation) -> pb::Operation {
    let Operation {
        version,
        op,
        operator,
        targets,
        at_ms,
    } = operation;
    pb::Operation {
        version,
        op,
        operator_id: operator,
        target_ids: targets,
        at_ms,
    }
}
