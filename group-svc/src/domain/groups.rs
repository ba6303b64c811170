//! The group operations: parse, then plan with [`super::rules`] under the store's lock on
//! the group, then forget the group's cached send decisions.

use std::{collections::HashMap, sync::Arc};

use imesh_kit::{error::StoreError, ids::Snowflake};

use super::{
    Error, Gate, Group, GroupStatus, GroupType, JoinMode, JoinRequest, Member, MemberStatus,
    Operation, Role, conversation_id, invalid,
    roster::Roster,
    rules::{self, GroupChange, GroupState, InfoEdit, Now},
};
use crate::domain::{GroupStore, Nicknames, SeqSource};

/// The version an imported membership's first nickname is given; every rename is later.
const FIRST_NAME_VERSION: i64 = 1;

/// Longest nickname a rename may carry (relation-svc allows 64 characters).
const MAX_NICKNAME: usize = 64;

/// The actor id of the system (operators, imesh's own services) in a change.
const SYSTEM: i64 = 0;

/// Operation-log rows a page holds unless asked otherwise, and at most.
const DEFAULT_OPERATIONS_PAGE: u32 = 50;
const MAX_OPERATIONS_PAGE: u32 = 100;

/// Most users one call may name.
pub const MAX_USERS_PER_CALL: usize = 500;
pub const DEFAULT_MAX_MEMBER: u32 = 500;
pub const SUPER_GROUP_MAX_MEMBER: u32 = 100_000;

/// A new group as its owner describes it.
#[derive(Debug, Clone, Default)]
pub struct NewGroup {
    pub name: String,
    pub member_ids: Vec<i64>,
    pub kind: GroupType,
    pub join_mode: JoinMode,
    pub max_member: u32,
    pub avatar_url: String,
    pub announcement: String,
}

pub struct Groups {
    store: Arc<dyn GroupStore>,
    ids: Arc<Snowflake>,
    seqs: Arc<dyn SeqSource>,
    names: Arc<dyn Nicknames>,
    gate: Arc<Gate>,
    roster: Arc<Roster>,
}

const NOT_A_MEMBER: Error = Error::NotMember("group_id: you are not a member of this group");

/// Members read per query when listing a whole group.
const MEMBER_MAP_PAGE: u32 = 1000;

impl Groups {
    pub fn new(
        store: Arc<dyn GroupStore>,
        ids: Arc<Snowflake>,
        seqs: Arc<dyn SeqSource>,
        names: Arc<dyn Nicknames>,
        (gate, roster): (Arc<Gate>, Arc<Roster>),
    ) -> Self {
        Self {
            store,
            ids,
            seqs,
            names,
            gate,
            roster,
        }
    }

    /// Creates a group owned by `owner` with `new.member_ids` (duplicates and the owner
    /// himself are ignored); map ids in join order, the owner's first.
    pub async fn create(&self, owner: i64, new: NewGroup) -> Result<(Group, Vec<Member>), Error> {
        let name = parse_name(&new.name)?;
        let users = parse_users("member_ids", &new.member_ids)?;
        let ceiling = if new.kind == GroupType::Super {
            SUPER_GROUP_MAX_MEMBER
        } else {
            2_000
        };
        let max_member = match new.max_member {
            0 if new.kind == GroupType::Super => SUPER_GROUP_MAX_MEMBER,
            0 => DEFAULT_MAX_MEMBER,
            m if m <= ceiling => m,
            _ => {
                return Err(invalid(
                    "max_member",
                    format!("must be at most {ceiling} for this group type"),
                ));
            }
        };
        let mut all = vec![owner];
        all.extend(users.into_iter().filter(|u| *u != owner));
        if all.len() > max_member as usize {
            return Err(invalid(
                "member_ids",
                format!("more than max_member ({max_member})"),
            ));
        }
        let names = self.nicknames(&all).await?;
        let now = imesh_kit::ids::unix_ms();
        let id = self.ids.next_id()?;
        let members: Vec<Member> = all
            .iter()
            .enumerate()
            .map(|(i, &user_id)| Member {
                group_id: id,
                user_id,
                role: if user_id == owner {
                    Role::Owner
                } else {
                    Role::Member
                },
                map_id: i as u32,
                alias: String::new(),
                nickname: names.get(&user_id).cloned().unwrap_or_default(),
                mute_until_ms: 0,
                join_seq: 0,
                leave_seq: 0,
                joined_at_ms: now,
                status: MemberStatus::Normal,
                extra_permissions: 0,
            })
            .collect();
        let group = Group {
            id,
            kind: new.kind,
            name,
            avatar_url: parse_text("avatar_url", &new.avatar_url, 512)?,
            announcement: parse_text("announcement", &new.announcement, 2_000)?,
            owner_id: owner,
            member_count: members.len() as u32,
            max_member,
            mute_all: false,
            join_mode: new.join_mode,
            status: GroupStatus::Normal,
            version: 1,
            created_at_ms: now,
            next_map_id: members.len() as u32,
        };
        self.store.create(&group, &members).await?;
        Ok((group, members))
    }

    pub async fn get(&self, group_id: i64) -> Result<Group, Error> {
        self.store.group(group_id).await?.ok_or(Error::NotFound)
    }

    pub async fn update(&self, me: i64, group_id: i64, edit: InfoEdit) -> Result<Group, Error> {
        let edit = InfoEdit {
            name: edit.name.map(|n| parse_name(&n)).transpose()?,
            avatar_url: edit
                .avatar_url
                .map(|u| parse_text("avatar_url", &u, 512))
                .transpose()?,
            announcement: edit
                .announcement
                .map(|a| parse_text("announcement", &a, 2_000))
                .transpose()?,
            join_mode: edit.join_mode,
        };
        Ok(self
            .change(group_id, me, &[], &move |s| rules::update(s, &edit))
            .await?
            .0)
    }

    pub async fn invite(
        &self,
        me: i64,
        group_id: i64,
        users: &[i64],
    ) -> Result<(Group, Vec<Member>), Error> {
        let users = parse_users("user_ids", users)?;
        let now = self.now(group_id).await?;
        self.change_adding(group_id, me, &users.clone(), &move |s| {
            rules::invite(s, &users, now)
        })
        .await
    }

    /// The caller joins (free mode) or asks to (approval mode); `None` member: pending.
    pub async fn join(
        &self,
        me: i64,
        group_id: i64,
        message: &str,
    ) -> Result<(Group, Option<Member>), Error> {
        let message = parse_text("message", message, 256)?;
        let now = self.now(group_id).await?;
        let (group, _) = self
            .change_adding(group_id, me, &[me], &move |s| rules::join(s, &message, now))
            .await?;
        let member = self
            .store
            .members(group_id, &[me])
            .await?
            .into_iter()
            .find(Member::is_current);
        Ok((group, member))
    }

    pub async fn review(
        &self,
        me: i64,
        group_id: i64,
        user: i64,
        approve: bool,
    ) -> Result<(Group, Vec<Member>), Error> {
        let now = self.now(group_id).await?;
        self.change_adding(group_id, me, &[user], &move |s| {
            rules::review(s, user, approve, now)
        })
        .await
    }

    pub async fn join_requests(&self, me: i64, group_id: i64) -> Result<Vec<JoinRequest>, Error> {
        let (group, actor) = self.as_member(me, group_id).await?;
        rules::alive(&group)?;
        if actor.role < Role::Admin {
            return Err(Error::Forbidden(
                "group_id: only admins and the owner see join requests",
            ));
        }
        Ok(self.store.join_requests(group_id).await?)
    }

    pub async fn quit(&self, me: i64, group_id: i64) -> Result<Group, Error> {
        let now = self.now(group_id).await?;
        Ok(self
            .change(group_id, me, &[], &move |s| rules::quit(s, now))
            .await?
            .0)
    }

    pub async fn kick(
        &self,
        me: i64,
        group_id: i64,
        users: &[i64],
    ) -> Result<(Group, Vec<Member>), Error> {
        let users = parse_users("user_ids", users)?;
        let now = self.now(group_id).await?;
        self.change(group_id, me, &users.clone(), &move |s| {
            rules::kick(s, &users, now)
        })
        .await
    }

    pub async fn set_admin(
        &self,
        me: i64,
        group_id: i64,
        user: i64,
        admin: bool,
    ) -> Result<(Group, Vec<Member>), Error> {
        self.change(group_id, me, &[user], &move |s| {
            rules::set_admin(s, user, admin)
        })
        .await
    }

    pub async fn transfer(
        &self,
        me: i64,
        group_id: i64,
        new_owner: i64,
        keep_as_admin: bool,
    ) -> Result<(Group, Vec<Member>), Error> {
        self.change(group_id, me, &[new_owner], &move |s| {
            rules::transfer(s, new_owner, keep_as_admin)
        })
        .await
    }

    /// Bans the group or lifts its ban, as the system actor.
    pub async fn set_banned(&self, group_id: i64, banned: bool) -> Result<Group, Error> {
        Ok(self
            .change(group_id, SYSTEM, &[], &move |s| rules::ban(s, banned))
            .await?
            .0)
    }

    /// A page of the group's operation log, newest first, and the cursor of the next page
    /// (0 when there is none): for its owner and admins (`me`), or the system actor
    /// (`None`), whatever the group's status.
    pub async fn operations(
        &self,
        me: Option<i64>,
        group_id: i64,
        before_version: i64,
        limit: u32,
    ) -> Result<(Vec<Operation>, i64), Error> {
        if before_version < 0 {
            return Err(invalid("before_version", "must be 0 or a version"));
        }
        let limit = match limit {
            0 => DEFAULT_OPERATIONS_PAGE,
            1..=MAX_OPERATIONS_PAGE => limit,
            _ => {
                return Err(invalid(
                    "limit",
                    format!("must be at most {MAX_OPERATIONS_PAGE}"),
                ));
            }
        };
        let before = if before_version == 0 {
            i64::MAX
        } else {
            before_version
        };
        match me {
            Some(me) => {
                let (_, actor) = self.as_member(me, group_id).await?;
                if actor.role < Role::Admin {
                    return Err(Error::Forbidden(
                        "group_id: only admins and the owner read the operation log",
                    ));
                }
            }
            None => {
                self.store.group(group_id).await?.ok_or(Error::NotFound)?;
            }
        }
        let page = self.store.operations(group_id, before, limit).await?;
        let next = if page.len() == limit as usize {
            page.last().map_or(0, |o| o.version)
        } else {
            0
        };
        Ok((page, next))
    }

    pub async fn mute(
        &self,
        me: i64,
        group_id: i64,
        user: i64,
        until_ms: i64,
    ) -> Result<(Group, Vec<Member>), Error> {
        let now = Now {
            ms: imesh_kit::ids::unix_ms(),
            seq: 0,
        };
        self.change(group_id, me, &[user], &move |s| {
            rules::mute(s, user, until_ms, now)
        })
        .await
    }

    pub async fn mute_all(&self, me: i64, group_id: i64, muted: bool) -> Result<Group, Error> {
        Ok(self
            .change(group_id, me, &[], &move |s| rules::mute_all(s, muted))
            .await?
            .0)
    }

    pub async fn dismiss(&self, me: i64, group_id: i64) -> Result<Group, Error> {
        Ok(self.change(group_id, me, &[], &rules::dismiss).await?.0)
    }

    pub async fn set_alias(
        &self,
        me: i64,
        group_id: i64,
        alias: &str,
    ) -> Result<(Group, Vec<Member>), Error> {
        let alias = parse_text("alias", alias, 32)?;
        self.change(group_id, me, &[], &move |s| rules::set_alias(s, &alias))
            .await
    }

    pub async fn my_groups(
        &self,
        me: i64,
        cursor: i64,
        limit: u32,
    ) -> Result<(Vec<Group>, i64), Error> {
        let limit = page_limit(limit, 50, 200)?;
        let before = if cursor <= 0 { i64::MAX } else { cursor };
        let mut page = self.store.groups_of(me, before, limit + 1).await?;
        let next = if page.len() > limit as usize {
            page.truncate(limit as usize);
            page.last().map_or(0, |g| g.id)
        } else {
            0
        };
        Ok((page, next))
    }

    /// A page of current members; only members see the list.
    pub async fn members_page(
        &self,
        me: i64,
        group_id: i64,
        cursor: u32,
        limit: u32,
    ) -> Result<(Vec<Member>, u32), Error> {
        let group = self.as_reader(me, group_id).await?;
        let limit = page_limit(limit, 100, 500)?;
        let mut page = match self.roster_page(&group, cursor, limit + 1).await? {
            Some(page) => page,
            None => self.store.page(group_id, cursor, limit + 1).await?,
        };
        let next = if page.len() > limit as usize {
            page.pop().map_or(0, |m| m.map_id)
        } else {
            0
        };
        Ok((page, next))
    }

    pub async fn members(
        &self,
        me: i64,
        group_id: i64,
        users: &[i64],
    ) -> Result<Vec<Member>, Error> {
        self.as_reader(me, group_id).await?;
        let users = parse_users("user_ids", users)?;
        Ok(self.store.members(group_id, &users).await?)
    }

    /// The current members who sent most recently (super groups keep no full list).
    pub async fn active(&self, me: i64, group_id: i64, limit: u32) -> Result<Vec<Member>, Error> {
        self.as_reader(me, group_id).await?;
        let ids = self
            .gate
            .active(group_id, page_limit(limit, 50, super::ACTIVE_KEPT as u32)?)
            .await?;
        let mut rows = self.store.members(group_id, &ids).await?;
        rows.retain(Member::is_current);
        rows.sort_by_key(|m| ids.iter().position(|id| *id == m.user_id));
        Ok(rows)
    }

    pub async fn search(
        &self,
        me: i64,
        group_id: i64,
        query: &str,
        limit: u32,
    ) -> Result<Vec<Member>, Error> {
        self.as_reader(me, group_id).await?;
        let query = query.trim();
        if query.is_empty() || query.chars().count() > 32 {
            return Err(invalid("query", "must be 1–32 characters"));
        }
        Ok(self
            .store
            .search(group_id, query, page_limit(limit, 20, 100)?)
            .await?)
    }

    /// Internal: `user`'s row in the group whatever its status.
    pub async fn membership(&self, group_id: i64, user: i64) -> Result<Member, Error> {
        let row = self.store.members(group_id, &[user]).await?.pop();
        row.ok_or(Error::NeverMember)
    }

    pub async fn member_ids(&self, group_id: i64) -> Result<(Vec<i64>, i64), Error> {
        let group = self.get(group_id).await?;
        if group.kind == GroupType::Super {
            return Err(Error::Precondition(
                "group_id: super groups have no full member list",
            ));
        }
        Ok((self.gate.member_ids(group_id).await?, group.version))
    }

    /// Every current member by map id, and the group's version (read receipts). Super
    /// groups have no full member list.
    pub async fn member_map(&self, group_id: i64) -> Result<(Vec<Member>, i64), Error> {
        let group = self.get(group_id).await?;
        if group.kind == GroupType::Super {
            return Err(Error::Precondition(
                "group_id: super groups have no full member list",
            ));
        }
        let mut members = Vec::with_capacity(group.member_count as usize);
        loop {
            let from = members.last().map_or(0, |m: &Member| m.map_id + 1);
            let page = self.store.page(group_id, from, MEMBER_MAP_PAGE).await?;
            let full = page.len() == MEMBER_MAP_PAGE as usize;
            members.extend(page);
            if !full {
                return Ok((members, group.version));
            }
        }
    }

    /// Internal: counts the group's current members and corrects a `member_count` that
    /// drifted; returns the count stored before and the count now.
    pub async fn recount(&self, group_id: i64) -> Result<(u32, u32), Error> {
        let (stored, group) = match self.store.recount(group_id).await {
            Err(StoreError::NotFound) => return Err(Error::NotFound),
            other => other?,
        };
        if stored != group.member_count {
            self.gate.forget(group_id).await;
            self.roster.changed(&group, &[]).await;
        }
        Ok((stored, group.member_count))
    }

    /// Ids of groups after `after`, ascending (sweeps).
    pub async fn group_ids(&self, after: i64, limit: u32) -> Result<Vec<i64>, Error> {
        Ok(self.store.group_ids(after, limit).await?)
    }

    /// Bulk adds (imports, load tests): no events, no invitation rules.
    pub async fn import(&self, group_id: i64, users: &[i64]) -> Result<u32, Error> {
        if users.len() > 10_000 {
            return Err(invalid("user_ids", "at most 10,000 per call"));
        }
        if users.iter().any(|u| *u <= 0) {
            return Err(invalid("user_ids", "must be user ids"));
        }
        let mut unique = users.to_vec();
        unique.sort_unstable();
        unique.dedup();
        let now = self.now(group_id).await?;
        let added = match self.store.import(group_id, &unique, now.seq, now.ms).await {
            Err(StoreError::NotFound) => return Err(Error::NotFound),
            Err(StoreError::Conflict(_)) => {
                return Err(Error::Precondition(
                    "user_ids: the group would exceed its member limit",
                ));
            }
            other => other?,
        };
        self.gate.forget(group_id).await;
        self.roster.discard(group_id).await;
        // Memberships nobody renamed yet (version 0) take the current nicknames.
        let names: Vec<(i64, String, i64)> = self
            .nicknames(&unique)
            .await?
            .into_iter()
            .map(|(user, name)| (user, name, FIRST_NAME_VERSION))
            .collect();
        self.store.rename(&names).await?;
        Ok(added)
    }

    /// The group, when `me` is a current member; a large group asks its roster first.
    async fn as_reader(&self, me: i64, group_id: i64) -> Result<Group, Error> {
        let group = self.get(group_id).await?;
        if Roster::covers(&group) {
            match self.roster.is_member(group_id, me).await {
                Some(true) => return Ok(group),
                Some(false) => return Err(NOT_A_MEMBER),
                None => {}
            }
        }
        self.current_member(&group, me).await?;
        Ok(group)
    }

    /// A page of a large group's current members from its roster, by map id; `None` when
    /// the group has no roster yet, or the roster lags the database (then the database
    /// answers).
    async fn roster_page(
        &self,
        group: &Group,
        from: u32,
        limit: u32,
    ) -> Result<Option<Vec<Member>>, Error> {
        if !Roster::covers(group) {
            return Ok(None);
        }
        let Some(ids) = self.roster.page(group.id, from, limit).await else {
            return Ok(None);
        };
        let mut rows = self.store.members(group.id, &ids).await?;
        if rows.len() != ids.len() || !rows.iter().all(Member::is_current) {
            return Ok(None);
        }
        rows.sort_unstable_by_key(|m| m.map_id);
        Ok(Some(rows))
    }

    async fn as_member(&self, me: i64, group_id: i64) -> Result<(Group, Member), Error> {
        let group = self.get(group_id).await?;
        let member = self.current_member(&group, me).await?;
        Ok((group, member))
    }

    /// `me`'s row in `group` from the database, when a current member.
    async fn current_member(&self, group: &Group, me: i64) -> Result<Member, Error> {
        let rows = self.store.members(group.id, &[me]).await?;
        rows.into_iter()
            .find(Member::is_current)
            .ok_or(NOT_A_MEMBER)
    }

    /// Copies relation-svc's nicknames onto every membership of the users named, unless a
    /// later rename was applied already; returns how many memberships changed.
    pub async fn rename(&self, names: Vec<(i64, String, i64)>) -> Result<u64, Error> {
        if names.is_empty() || names.len() > MAX_USERS_PER_CALL {
            return Err(invalid(
                "names",
                format!("must hold 1–{MAX_USERS_PER_CALL} names"),
            ));
        }
        for (user, nickname, version) in &names {
            if *user <= 0 {
                return Err(invalid("names.user_id", "must be a user id"));
            }
            if nickname.chars().count() > MAX_NICKNAME {
                return Err(invalid(
                    "names.nickname",
                    format!("must be at most {MAX_NICKNAME} characters"),
                ));
            }
            if *version <= 0 {
                return Err(invalid("names.version", "must be positive"));
            }
        }
        Ok(self.store.rename(&names).await?)
    }

    async fn nicknames(&self, users: &[i64]) -> Result<HashMap<i64, String>, Error> {
        let mut names = HashMap::with_capacity(users.len());
        for chunk in users.chunks(MAX_USERS_PER_CALL) {
            names.extend(self.names.nicknames(chunk).await.map_err(Error::Names)?);
        }
        Ok(names)
    }

    async fn now(&self, group_id: i64) -> Result<Now, Error> {
        let seq = self
            .seqs
            .current_seq(&conversation_id(group_id))
            .await
            .map_err(Error::Seq)?;
        Ok(Now {
            ms: imesh_kit::ids::unix_ms(),
            seq,
        })
    }

    /// [`Self::change`] for a plan that may make `users` members: their new memberships
    /// carry their nicknames.
    async fn change_adding(
        &self,
        group_id: i64,
        me: i64,
        users: &[i64],
        plan: &(dyn Fn(&GroupState) -> Result<GroupChange, Error> + Send + Sync),
    ) -> Result<(Group, Vec<Member>), Error> {
        let names = self.nicknames(users).await?;
        let named = |state: &GroupState| plan(state).map(|change| named(change, &names));
        self.change(group_id, me, users, &named).await
    }

    async fn change(
        &self,
        group_id: i64,
        me: i64,
        users: &[i64],
        plan: &(dyn Fn(&GroupState) -> Result<GroupChange, Error> + Send + Sync),
    ) -> Result<(Group, Vec<Member>), Error> {
        let done = match self.store.change(group_id, me, users, plan).await {
            Err(Error::Store(StoreError::NotFound)) => return Err(Error::NotFound),
            other => other?,
        };
        self.gate.forget(group_id).await;
        self.roster.changed(&done.0, &done.1).await;
        Ok(done)
    }
}

/// The change with each new membership given its user's nickname.
fn named(mut change: GroupChange, names: &HashMap<i64, String>) -> GroupChange {
    for member in change.members.iter_mut().filter(|m| m.nickname.is_empty()) {
        if let Some(name) = names.get(&member.user_id) {
            member.nickname.clone_from(name);
        }
    }
    change
}

fn parse_name(raw: &str) -> Result<String, Error> {
    let name = raw.trim();
    if name.is_empty() || name.chars().count() > 64 {
        return Err(invalid("name", "must be 1–64 characters"));
    }
    Ok(name.to_owned())
}

fn parse_text(field: &'static str, raw: &str, max: usize) -> Result<String, Error> {
    if raw.chars().count() > max {
        return Err(invalid(field, format!("must be at most {max} characters")));
    }
    Ok(raw.to_owned())
}

/// Positive ids, at most [`MAX_USERS_PER_CALL`], duplicates dropped.
fn parse_users(field: &'static str, raw: &[i64]) -> Result<Vec<i64>, Error> {
    if raw.len() > MAX_USERS_PER_CALL {
        return Err(invalid(
            field,
            format!("at most {MAX_USERS_PER_CALL} per call"),
        ));
    }
    if raw.iter().any(|id| *id <= 0) {
        return Err(invalid(field, "must be user ids"));
    }
    let mut users = Vec::with_capacity(raw.len());
    for id in raw {
        if !users.contains(id) {
            users.push(*id);
        }
    }
    Ok(users)
}

fn page_limit(limit: u32, default: u32, max: u32) -> Result<u32, Error> {
    imesh_kit::page_limit(limit, default, max).map_err(|reason| invalid("limit", reason))
}
