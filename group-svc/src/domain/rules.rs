//! Every group decision as a pure function of the group's state, read by the store under a
//! lock on the group ([`crate::domain::GroupStore::change`]): who may do what to whom, and
//! what changes. Unit-tested without I/O.

use std::collections::HashMap;

use super::{
    Error, GateGroup, GateMember, Group, GroupStatus, JoinMode, JoinRequest, Member, MemberStatus,
    Role, invalid, perm,
};

/// A group as the store read it for one change: the group, the acting member (if they ever
/// were one) and the members and join requests of the users the change names.
#[derive(Debug, Clone)]
pub struct GroupState {
    pub group: Group,
    pub actor_id: i64,
    pub actor: Option<Member>,
    pub targets: HashMap<i64, Member>,
    pub requests: HashMap<i64, JoinRequest>,
}

/// What to write. `group` is the group after the change (the store bumps its version and
/// recounts its members); `members` are upserted by user id; `affected` hear of the change
/// even when they are no longer members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupChange {
    pub op: &'static str,
    pub group: Group,
    pub members: Vec<Member>,
    pub put_requests: Vec<JoinRequest>,
    pub drop_requests: Vec<i64>,
    pub affected: Vec<i64>,
}

impl GroupChange {
    fn of(op: &'static str, state: &GroupState) -> Self {
        Self {
            op,
            group: state.group.clone(),
            members: Vec::new(),
            put_requests: Vec::new(),
            drop_requests: Vec::new(),
            affected: Vec::new(),
        }
    }
}

/// When and at which conversation seq a change happens (for joins).
#[derive(Debug, Clone, Copy)]
pub struct Now {
    pub ms: i64,
    pub seq: i64,
}

/// The group accepts changes and messages: not dismissed, not banned.
pub fn alive(group: &Group) -> Result<(), Error> {
    alive_status(group.status)
}

fn alive_status(status: GroupStatus) -> Result<(), Error> {
    match status {
        GroupStatus::Normal => Ok(()),
        GroupStatus::Dismissed => Err(Error::Precondition("group_id: the group was dismissed")),
        GroupStatus::Banned => Err(Error::Forbidden("group_id: the group is banned")),
    }
}

/// The acting member, current and holding `bits`.
fn acting<'a>(
    state: &'a GroupState,
    bits: u32,
    refusal: &'static str,
) -> Result<&'a Member, Error> {
    alive(&state.group)?;
    let actor = state.actor.as_ref().filter(|m| m.is_current());
    let actor = actor.ok_or(Error::NotMember(
        "group_id: you are not a member of this group",
    ))?;
    if !actor.can(bits) {
        return Err(Error::Forbidden(refusal));
    }
    Ok(actor)
}

/// A named user's current membership.
fn current(state: &GroupState, user: i64) -> Result<&Member, Error> {
    state
        .targets
        .get(&user)
        .filter(|m| m.is_current())
        .ok_or(Error::Precondition("user_id: not a member of this group"))
}

fn outranks(actor: &Member, target: &Member, refusal: &'static str) -> Result<(), Error> {
    if actor.role > target.role {
        Ok(())
    } else {
        Err(Error::Forbidden(refusal))
    }
}

/// A fresh membership for `user` with the next map id.
fn joined(change: &mut GroupChange, user: i64, role: Role, now: Now) -> Member {
    let map_id = change.group.next_map_id;
    change.group.next_map_id += 1;
    Member {
        group_id: change.group.id,
        user_id: user,
        role,
        map_id,
        alias: String::new(),
        nickname: String::new(),
        mute_until_ms: 0,
        join_seq: now.seq,
        leave_seq: 0,
        joined_at_ms: now.ms,
        status: MemberStatus::Normal,
        extra_permissions: 0,
    }
}

fn add_members(
    state: &GroupState,
    change: &mut GroupChange,
    users: &[i64],
    now: Now,
) -> Result<(), Error> {
    let new: Vec<i64> = users
        .iter()
        .copied()
        .filter(|u| !state.targets.get(u).is_some_and(Member::is_current))
        .collect();
    if state.group.member_count as usize + new.len() > state.group.max_member as usize {
        return Err(Error::Precondition(
            "user_ids: the group would exceed its member limit",
        ));
    }
    for user in new {
        let member = joined(change, user, Role::Member, now);
        change.members.push(member);
        change.drop_requests.push(user);
    }
    Ok(())
}

/// Invites `users`. In approval mode a plain member's invitations become join requests.
pub fn invite(state: &GroupState, users: &[i64], now: Now) -> Result<GroupChange, Error> {
    let actor = acting(
        state,
        perm::INVITE,
        "user_ids: you may not invite to this group",
    )?;
    let mut change = GroupChange::of("invited", state);
    if state.group.join_mode == JoinMode::Approval && actor.role == Role::Member {
        change.op = "join_requested";
        for &user in users
            .iter()
            .filter(|u| !state.targets.get(u).is_some_and(Member::is_current))
        {
            change.put_requests.push(JoinRequest {
                group_id: state.group.id,
                user_id: user,
                message: String::new(),
                inviter_id: actor.user_id,
                created_at_ms: now.ms,
            });
        }
    } else {
        add_members(state, &mut change, users, now)?;
    }
    Ok(change)
}

/// The caller joins (free mode) or asks to (approval mode).
pub fn join(state: &GroupState, message: &str, now: Now) -> Result<GroupChange, Error> {
    alive(&state.group)?;
    let me = state.actor_id;
    let mut change = GroupChange::of("joined", state);
    if state.actor.as_ref().is_some_and(Member::is_current) {
        return Ok(change);
    }
    match state.group.join_mode {
        JoinMode::Free => add_members(state, &mut change, &[me], now)?,
        JoinMode::Approval => {
            change.op = "join_requested";
            change.put_requests.push(JoinRequest {
                group_id: state.group.id,
                user_id: me,
                message: message.to_owned(),
                inviter_id: 0,
                created_at_ms: now.ms,
            });
        }
        JoinMode::Invite => {
            return Err(Error::Forbidden(
                "group_id: this group is joined by invitation only",
            ));
        }
    }
    Ok(change)
}

pub fn review(
    state: &GroupState,
    user: i64,
    approve: bool,
    now: Now,
) -> Result<GroupChange, Error> {
    let actor = acting(
        state,
        perm::INVITE,
        "user_id: you may not review join requests",
    )?;
    if actor.role < Role::Admin {
        return Err(Error::Forbidden(
            "user_id: only admins and the owner review join requests",
        ));
    }
    if !state.requests.contains_key(&user) {
        return Err(Error::Precondition("user_id: no pending join request"));
    }
    let mut change = GroupChange::of(if approve { "joined" } else { "join_rejected" }, state);
    change.affected.push(user);
    if approve {
        add_members(state, &mut change, &[user], now)?;
    } else {
        change.drop_requests.push(user);
    }
    Ok(change)
}

pub fn quit(state: &GroupState, now: Now) -> Result<GroupChange, Error> {
    let actor = acting(state, 0, "")?;
    if actor.role == Role::Owner {
        return Err(Error::Precondition(
            "group_id: the owner must transfer ownership before quitting",
        ));
    }
    let mut change = GroupChange::of("quit", state);
    change.members.push(Member {
        status: MemberStatus::Quit,
        leave_seq: now.seq,
        ..actor.clone()
    });
    change.affected.push(actor.user_id);
    Ok(change)
}

pub fn kick(state: &GroupState, users: &[i64], now: Now) -> Result<GroupChange, Error> {
    let actor = acting(state, perm::KICK, "user_ids: you may not remove members")?;
    let mut change = GroupChange::of("kicked", state);
    for &user in users {
        if user == actor.user_id {
            return Err(invalid(
                "user_ids",
                "must not include yourself; quit instead",
            ));
        }
        let target = current(state, user)?;
        outranks(
            actor,
            target,
            "user_ids: you cannot remove a member of your rank or above",
        )?;
        change.members.push(Member {
            status: MemberStatus::Kicked,
            leave_seq: now.seq,
            ..target.clone()
        });
        change.affected.push(user);
    }
    Ok(change)
}

pub fn set_admin(state: &GroupState, user: i64, admin: bool) -> Result<GroupChange, Error> {
    acting(
        state,
        perm::SET_ADMIN,
        "user_id: only the owner appoints admins",
    )?;
    let target = current(state, user)?;
    if target.role == Role::Owner {
        return Err(Error::Precondition(
            "user_id: the owner is not an admin to appoint",
        ));
    }
    let role = if admin { Role::Admin } else { Role::Member };
    let mut change = GroupChange::of("admin", state);
    if target.role != role {
        change.members.push(Member {
            role,
            ..target.clone()
        });
    }
    Ok(change)
}

/// The owner hands over: in the same change the old owner becomes a plain member (seed
/// 001), or an admin when `keep_as_admin`.
pub fn transfer(
    state: &GroupState,
    new_owner: i64,
    keep_as_admin: bool,
) -> Result<GroupChange, Error> {
    let actor = acting(state, 0, "")?;
    if actor.role != Role::Owner {
        return Err(Error::Forbidden(
            "new_owner_id: only the owner transfers the group",
        ));
    }
    if new_owner == actor.user_id {
        return Err(invalid("new_owner_id", "is already the owner"));
    }
    let target = current(state, new_owner)?;
    let mut change = GroupChange::of("owner", state);
    change.group.owner_id = new_owner;
    change.members.push(Member {
        role: if keep_as_admin {
            Role::Admin
        } else {
            Role::Member
        },
        ..actor.clone()
    });
    change.members.push(Member {
        role: Role::Owner,
        ..target.clone()
    });
    Ok(change)
}

pub fn mute(state: &GroupState, user: i64, until_ms: i64, now: Now) -> Result<GroupChange, Error> {
    let actor = acting(state, perm::MUTE, "user_id: you may not mute members")?;
    if until_ms != 0 && until_ms <= now.ms {
        return Err(invalid("until_ms", "must be in the future, or 0 to unmute"));
    }
    let target = current(state, user)?;
    outranks(
        actor,
        target,
        "user_id: you cannot mute a member of your rank or above",
    )?;
    let mut change = GroupChange::of("muted", state);
    change.members.push(Member {
        mute_until_ms: until_ms,
        ..target.clone()
    });
    Ok(change)
}

pub fn mute_all(state: &GroupState, muted: bool) -> Result<GroupChange, Error> {
    acting(state, perm::MUTE, "group_id: you may not mute the group")?;
    let mut change = GroupChange::of("mute_all", state);
    change.group.mute_all = muted;
    Ok(change)
}

pub fn dismiss(state: &GroupState) -> Result<GroupChange, Error> {
    acting(
        state,
        perm::DISMISS,
        "group_id: only the owner dismisses the group",
    )?;
    let mut change = GroupChange::of("dismissed", state);
    change.group.status = GroupStatus::Dismissed;
    Ok(change)
}

/// The system bans the group or lifts its ban; asking for the state the group is in
/// already changes nothing. A dismissed group stays dismissed.
pub fn ban(state: &GroupState, banned: bool) -> Result<GroupChange, Error> {
    if state.group.status == GroupStatus::Dismissed {
        return Err(Error::Precondition("group_id: the group is dismissed"));
    }
    let mut change = GroupChange::of(if banned { "banned" } else { "unbanned" }, state);
    change.group.status = if banned {
        GroupStatus::Banned
    } else {
        GroupStatus::Normal
    };
    Ok(change)
}

/// Edits of the group's info; `None` keeps a field.
#[derive(Debug, Clone, Default)]
pub struct InfoEdit {
    pub name: Option<String>,
    pub avatar_url: Option<String>,
    pub announcement: Option<String>,
    pub join_mode: Option<JoinMode>,
}

pub fn update(state: &GroupState, edit: &InfoEdit) -> Result<GroupChange, Error> {
    acting(
        state,
        perm::EDIT_INFO,
        "group_id: you may not edit this group",
    )?;
    let mut change = GroupChange::of("updated", state);
    let g = &mut change.group;
    g.name = edit.name.clone().unwrap_or(g.name.clone());
    g.avatar_url = edit.avatar_url.clone().unwrap_or(g.avatar_url.clone());
    g.announcement = edit.announcement.clone().unwrap_or(g.announcement.clone());
    g.join_mode = edit.join_mode.unwrap_or(g.join_mode);
    Ok(change)
}

pub fn set_alias(state: &GroupState, alias: &str) -> Result<GroupChange, Error> {
    let actor = acting(state, 0, "")?;
    let mut change = GroupChange::of("alias", state);
    change.members.push(Member {
        alias: alias.to_owned(),
        ..actor.clone()
    });
    Ok(change)
}

/// The send gate in the seed's fixed order: group alive → member → mute-all (owner and
/// admins exempt) → personal mute (nobody exempt) → the needed bits.
pub fn check_send(
    group: &GateGroup,
    member: Option<&GateMember>,
    needs: u32,
    now_ms: i64,
) -> Result<(), Error> {
    alive_status(group.status)?;
    let member = member.filter(|m| m.is_current());
    let member = member.ok_or(Error::NotMember(
        "group_id: you are not a member of this group",
    ))?;
    if group.mute_all && member.role == Role::Member {
        return Err(Error::Forbidden(
            "group_id: everyone is muted in this group",
        ));
    }
    if member.mute_until_ms > now_ms {
        return Err(Error::Forbidden("group_id: you are muted in this group"));
    }
    if !member.can(perm::SEND_MSG | needs) {
        return Err(Error::Forbidden(
            "needs: you lack a permission this message needs",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
