//! [`GroupStore`] over sea-orm. Changes of one group are serialized by bumping its version
//! first: the row lock (PostgreSQL, MySQL) or write lock (SQLite) that update takes is held
//! to commit, so every plan sees the state it changes.

use std::sync::Arc;

use async_trait::async_trait;
use imesh_kit::{
    error::StoreError,
    ids::Snowflake,
    outbox::{self, OutboxRow},
};
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DatabaseConnection, DatabaseTransaction, EntityTrait,
    PaginatorTrait, QueryFilter, QueryOrder, QuerySelect, TransactionTrait,
    sea_query::{Expr, ExprTrait, OnConflict},
};
use sea_orm_migration::prelude::{Alias, Query};
use tokio::sync::Notify;

use super::entities::{
    group_row, groups, member_row, members, request_row, requests, to_group, to_member, to_request,
};
use crate::{
    domain::{
        EncodeEvent, Error, Group, GroupEvent, GroupStore, GroupType, JoinRequest, Member,
        MemberStatus, Operation, Plan,
        rules::{GroupChange, GroupState},
    },
    store::OUTBOX_TABLE,
};

/// Rows per multi-row insert of a bulk import.
const IMPORT_CHUNK: usize = 500;

#[derive(Clone)]
pub struct SqlGroupStore {
    db: DatabaseConnection,
    ids: Arc<Snowflake>,
    encode: EncodeEvent,
    relay: Arc<Notify>,
}

impl SqlGroupStore {
    pub fn new(
        db: DatabaseConnection,
        ids: Arc<Snowflake>,
        encode: EncodeEvent,
        relay: Arc<Notify>,
    ) -> Self {
        Self {
            db,
            ids,
            encode,
            relay,
        }
    }

    /// The operation-log row and the outbox event of one change, in `tx`.
    async fn record(&self, tx: &DatabaseTransaction, event: &GroupEvent) -> Result<(), StoreError> {
        let targets: Vec<String> = event
            .members
            .iter()
            .map(|m| m.user_id.to_string())
            .collect();
        let log = Query::insert()
            .into_table(Alias::new("im_group_oplog"))
            .columns(
                [
                    "id",
                    "group_id",
                    "version",
                    "op",
                    "operator_id",
                    "targets",
                    "at_ms",
                ]
                .map(Alias::new),
            )
            .values_panic([
                self.ids.next_id()?.into(),
                event.group.id.into(),
                event.group.version.into(),
                event.op.into(),
                event.operator.into(),
                targets.join(",").into(),
                imesh_kit::ids::unix_ms().into(),
            ])
            .to_owned();
        tx.execute(&log).await?;
        let row = OutboxRow {
            id: self.ids.next_id()?,
            payload: (self.encode)(event),
        };
        outbox::insert(tx, OUTBOX_TABLE, &[row]).await
    }
}

#[async_trait]
impl GroupStore for SqlGroupStore {
    async fn create(&self, group: &Group, initial: &[Member]) -> Result<(), StoreError> {
        let tx = self.db.begin().await?;
        groups::Entity::insert(group_row(group))
            .exec_without_returning(&tx)
            .await?;
        members::Entity::insert_many(initial.iter().map(member_row))
            .exec_without_returning(&tx)
            .await?;
        let event = GroupEvent {
            group: group.clone(),
            op: "created",
            operator: group.owner_id,
            members: initial.to_vec(),
            recipients: initial.iter().map(|m| m.user_id).collect(),
        };
        self.record(&tx, &event).await?;
        tx.commit().await?;
        self.relay.notify_one();
        Ok(())
    }

    async fn group(&self, group_id: i64) -> Result<Option<Group>, StoreError> {
        groups::Entity::find_by_id(group_id)
            .one(&self.db)
            .await?
            .map(to_group)
            .transpose()
    }

    async fn members(&self, group_id: i64, users: &[i64]) -> Result<Vec<Member>, StoreError> {
        rows_of(&self.db, group_id, users).await
    }

    async fn operations(
        &self,
        group_id: i64,
        before_version: i64,
        limit: u32,
    ) -> Result<Vec<Operation>, StoreError> {
        let columns = ["version", "op", "operator_id", "targets", "at_ms"].map(Alias::new);
        let query = Query::select()
            .columns(columns)
            .from(Alias::new("im_group_oplog"))
            .and_where(Expr::col(Alias::new("group_id")).eq(group_id))
            .and_where(Expr::col(Alias::new("version")).lt(before_version))
            .order_by(Alias::new("version"), sea_orm::Order::Desc)
            .limit(limit.into())
            .to_owned();
        let rows = self.db.query_all(&query).await?;
        rows.iter()
            .map(|row| {
                let targets: String = row.try_get("", "targets")?;
                Ok(Operation {
                    version: row.try_get("", "version")?,
                    op: row.try_get("", "op")?,
                    operator: row.try_get("", "operator_id")?,
                    targets: targets
                        .split(',')
                        .filter(|t| !t.is_empty())
                        .map(|t| {
                            t.parse().map_err(|_| {
                                StoreError::Unavailable(anyhow::anyhow!("oplog target {t:?}"))
                            })
                        })
                        .collect::<Result<_, _>>()?,
                    at_ms: row.try_get("", "at_ms")?,
                })
            })
            .collect()
    }

    async fn page(&self, group_id: i64, from: u32, limit: u32) -> Result<Vec<Member>, StoreError> {
        let rows = current_members(group_id)
            .filter(members::Column::MapId.gte(from as i32))
            .order_by_asc(members::Column::MapId)
            .limit(u64::from(limit))
            .all(&self.db)
            .await?;
        rows.into_iter().map(to_member).collect()
    }

    async fn search(
        &self,
        group_id: i64,
        query: &str,
        limit: u32,
    ) -> Result<Vec<Member>, StoreError> {
        let rows = current_members(group_id)
            .filter(
                Condition::any()
                    .add(members::Column::Alias.contains(query))
                    .add(members::Column::Nickname.contains(query)),
            )
            .order_by_asc(members::Column::MapId)
            .limit(u64::from(limit))
            .all(&self.db)
            .await?;
        rows.into_iter().map(to_member).collect()
    }

    async fn member_ids(&self, group_id: i64) -> Result<Vec<i64>, StoreError> {
        Ok(current_ids(&self.db, group_id).await?)
    }

    async fn recount(&self, group_id: i64) -> Result<(u32, Group), StoreError> {
        // A sweep finds almost every count in step: check that with reads alone, and take
        // the group's lock only to correct one.
        let group = self.group(group_id).await?.ok_or(StoreError::NotFound)?;
        let counted = current_members(group_id).count(&self.db).await? as u32;
        if counted == group.member_count {
            return Ok((counted, group));
        }
        let tx = self.db.begin().await?;
        lock(&tx, group_id).await?;
        let group = read_group(&tx, group_id).await?;
        let counted = current_members(group_id).count(&tx).await? as u32;
        if counted == group.member_count {
            tx.rollback().await?;
            let version = group.version - 1;
            return Ok((counted, Group { version, ..group }));
        }
        groups::Entity::update_many()
            .col_expr(groups::Column::MemberCount, Expr::value(counted as i32))
            .filter(groups::Column::Id.eq(group_id))
            .exec(&tx)
            .await?;
        tx.commit().await?;
        let stored = group.member_count;
        Ok((
            stored,
            Group {
                member_count: counted,
                ..group
            },
        ))
    }

    async fn group_ids(&self, after: i64, limit: u32) -> Result<Vec<i64>, StoreError> {
        Ok(groups::Entity::find()
            .select_only()
            .column(groups::Column::Id)
            .filter(groups::Column::Id.gt(after))
            .order_by_asc(groups::Column::Id)
            .limit(u64::from(limit))
            .into_tuple()
            .all(&self.db)
            .await?)
    }

    async fn roster(&self, group_id: i64) -> Result<Vec<(u32, i64)>, StoreError> {
        let rows: Vec<(i32, i64)> = current_members(group_id)
            .select_only()
            .columns([members::Column::MapId, members::Column::UserId])
            .order_by_asc(members::Column::MapId)
            .into_tuple()
            .all(&self.db)
            .await?;
        Ok(rows.into_iter().map(|(m, u)| (m as u32, u)).collect())
    }

    async fn rename(&self, names: &[(i64, String, i64)]) -> Result<u64, StoreError> {
        let mut renamed = 0;
        for (user, nickname, at) in names {
            let done = members::Entity::update_many()
                .col_expr(members::Column::Nickname, Expr::value(nickname.clone()))
                .col_expr(members::Column::NicknameVersion, Expr::value(*at))
                .filter(members::Column::UserId.eq(*user))
                .filter(members::Column::NicknameVersion.lt(*at))
                .exec(&self.db)
                .await?;
            renamed += done.rows_affected;
        }
        Ok(renamed)
    }

    async fn groups_of(
        &self,
        user: i64,
        before: i64,
        limit: u32,
    ) -> Result<Vec<Group>, StoreError> {
        let ids: Vec<i64> = members::Entity::find()
            .select_only()
            .column(members::Column::GroupId)
            .filter(members::Column::UserId.eq(user))
            .filter(members::Column::Status.eq(MemberStatus::Normal as i16))
            .filter(members::Column::GroupId.lt(before))
            .order_by_desc(members::Column::GroupId)
            .limit(u64::from(limit))
            .into_tuple()
            .all(&self.db)
            .await?;
        let found = groups::Entity::find()
            .filter(groups::Column::Id.is_in(ids))
            .order_by_desc(groups::Column::Id)
            .all(&self.db)
            .await?;
        found.into_iter().map(to_group).collect()
    }

    async fn join_requests(&self, group_id: i64) -> Result<Vec<JoinRequest>, StoreError> {
        let rows = requests::Entity::find()
            .filter(requests::Column::GroupId.eq(group_id))
            .order_by_asc(requests::Column::CreatedAtMs)
            .all(&self.db)
            .await?;
        Ok(rows.into_iter().map(to_request).collect())
    }

    async fn change(
        &self,
        group_id: i64,
        actor: i64,
        users: &[i64],
        plan: Plan<'_>,
    ) -> Result<(Group, Vec<Member>), Error> {
        let tx = self.db.begin().await.map_err(StoreError::from)?;
        lock(&tx, group_id).await?;
        let state = read_state(&tx, group_id, actor, users).await?;
        let change = plan(&state)?;
        if is_noop(&state, &change) {
            tx.rollback().await.map_err(StoreError::from)?;
            let members = rows_of(&self.db, group_id, users).await?;
            return Ok((state.group_before_lock(), members));
        }
        let group = apply(&tx, &state, &change).await?;
        let mut recipients = match group.kind {
            GroupType::Normal => current_ids(&tx, group_id).await.map_err(StoreError::from)?,
            GroupType::Super => vec![actor],
        };
        recipients.extend(
            change
                .affected
                .iter()
                .chain(change.members.iter().map(|m| &m.user_id)),
        );
        recipients.retain(|user| *user > 0);
        recipients.sort_unstable();
        recipients.dedup();
        let event = GroupEvent {
            group: group.clone(),
            op: change.op,
            operator: actor,
            members: change.members.clone(),
            recipients,
        };
        self.record(&tx, &event).await?;
        tx.commit().await.map_err(StoreError::from)?;
        self.relay.notify_one();
        Ok((group, change.members))
    }

    async fn import(
        &self,
        group_id: i64,
        users: &[i64],
        join_seq: i64,
        now_ms: i64,
    ) -> Result<u32, StoreError> {
        let tx = self.db.begin().await?;
        lock(&tx, group_id).await?;
        let mut group = read_group(&tx, group_id).await?;
        let existing = rows_of(&tx, group_id, users).await?;
        let mut added = 0u32;
        let fresh: Vec<Member> = users
            .iter()
            .filter(|u| !existing.iter().any(|m| m.user_id == **u))
            .map(|&user_id| {
                let map_id = group.next_map_id;
                group.next_map_id += 1;
                added += 1;
                Member {
                    group_id,
                    user_id,
                    role: crate::domain::Role::Member,
                    map_id,
                    alias: String::new(),
                    nickname: String::new(),
                    mute_until_ms: 0,
                    join_seq,
                    leave_seq: 0,
                    joined_at_ms: now_ms,
                    status: MemberStatus::Normal,
                    extra_permissions: 0,
                }
            })
            .collect();
        if group.member_count as usize + fresh.len() > group.max_member as usize {
            return Err(StoreError::Conflict("the group's member limit".into()));
        }
        for chunk in fresh.chunks(IMPORT_CHUNK) {
            members::Entity::insert_many(chunk.iter().map(member_row))
                .exec_without_returning(&tx)
                .await?;
        }
        let count = group.member_count + added;
        groups::Entity::update_many()
            .col_expr(
                groups::Column::NextMapId,
                Expr::value(group.next_map_id as i32),
            )
            .col_expr(groups::Column::MemberCount, Expr::value(count as i32))
            .filter(groups::Column::Id.eq(group_id))
            .exec(&tx)
            .await?;
        tx.commit().await?;
        Ok(added)
    }
}

impl GroupState {
    /// The group as it was before the lock bumped its version.
    fn group_before_lock(&self) -> Group {
        Group {
            version: self.group.version - 1,
            ..self.group.clone()
        }
    }
}

fn current_members(group_id: i64) -> sea_orm::Select<members::Entity> {
    members::Entity::find()
        .filter(members::Column::GroupId.eq(group_id))
        .filter(members::Column::Status.eq(MemberStatus::Normal as i16))
}

async fn current_ids(
    conn: &impl ConnectionTrait,
    group_id: i64,
) -> Result<Vec<i64>, sea_orm::DbErr> {
    current_members(group_id)
        .select_only()
        .column(members::Column::UserId)
        .into_tuple()
        .all(conn)
        .await
}

async fn rows_of(
    conn: &impl ConnectionTrait,
    group_id: i64,
    users: &[i64],
) -> Result<Vec<Member>, StoreError> {
    if users.is_empty() {
        return Ok(Vec::new());
    }
    let rows = members::Entity::find()
        .filter(members::Column::GroupId.eq(group_id))
        .filter(members::Column::UserId.is_in(users.iter().copied()))
        .all(conn)
        .await?;
    rows.into_iter().map(to_member).collect()
}

async fn lock(tx: &DatabaseTransaction, group_id: i64) -> Result<(), StoreError> {
    let bumped = groups::Entity::update_many()
        .col_expr(
            groups::Column::Version,
            Expr::col(groups::Column::Version).add(1),
        )
        .filter(groups::Column::Id.eq(group_id))
        .exec(tx)
        .await?;
    if bumped.rows_affected == 0 {
        return Err(StoreError::NotFound);
    }
    Ok(())
}

async fn read_group(tx: &DatabaseTransaction, group_id: i64) -> Result<Group, StoreError> {
    let found = groups::Entity::find_by_id(group_id).one(tx).await?;
    to_group(found.ok_or(StoreError::NotFound)?)
}

async fn read_state(
    tx: &DatabaseTransaction,
    group_id: i64,
    actor: i64,
    users: &[i64],
) -> Result<GroupState, StoreError> {
    let group = read_group(tx, group_id).await?;
    let mut wanted = users.to_vec();
    wanted.push(actor);
    let mut targets: std::collections::HashMap<i64, Member> = rows_of(tx, group_id, &wanted)
        .await?
        .into_iter()
        .map(|m| (m.user_id, m))
        .collect();
    let actor_row = targets.get(&actor).cloned();
    if !users.contains(&actor) {
        targets.remove(&actor);
    }
    let requests = requests::Entity::find()
        .filter(requests::Column::GroupId.eq(group_id))
        .filter(requests::Column::UserId.is_in(wanted))
        .all(tx)
        .await?
        .into_iter()
        .map(|r| (r.user_id, to_request(r)))
        .collect();
    Ok(GroupState {
        group,
        actor_id: actor,
        actor: actor_row,
        targets,
        requests,
    })
}

fn is_noop(state: &GroupState, change: &GroupChange) -> bool {
    change.group == state.group
        && change.members.is_empty()
        && change.put_requests.is_empty()
        && change.drop_requests.is_empty()
}

/// Writes a change's rows, one multi-row statement per table, and returns the group as
/// stored: version bumped by the lock, member count moved by the memberships the change
/// started or ended.
async fn apply(
    tx: &DatabaseTransaction,
    state: &GroupState,
    change: &GroupChange,
) -> Result<Group, StoreError> {
    use members::Column as M;
    if !change.members.is_empty() {
        let upsert = OnConflict::columns([M::GroupId, M::UserId])
            .update_columns([
                M::Role,
                M::MapId,
                M::Alias,
                M::MuteUntilMs,
                M::JoinSeq,
                M::LeaveSeq,
                M::JoinedAtMs,
                M::Status,
                M::ExtraPermissions,
            ])
            .to_owned();
        members::Entity::insert_many(change.members.iter().map(member_row))
            .on_conflict(upsert)
            .exec_without_returning(tx)
            .await?;
    }
    if !change.put_requests.is_empty() {
        let upsert = OnConflict::columns([requests::Column::GroupId, requests::Column::UserId])
            .update_columns([
                requests::Column::Message,
                requests::Column::InviterId,
                requests::Column::CreatedAtMs,
            ])
            .to_owned();
        requests::Entity::insert_many(change.put_requests.iter().map(request_row))
            .on_conflict(upsert)
            .exec_without_returning(tx)
            .await?;
    }
    if !change.drop_requests.is_empty() {
        requests::Entity::delete_many()
            .filter(requests::Column::GroupId.eq(change.group.id))
            .filter(requests::Column::UserId.is_in(change.drop_requests.iter().copied()))
            .exec(tx)
            .await?;
    }
    let was_current = |user: i64| {
        let before = match &state.actor {
            Some(actor) if actor.user_id == user => Some(actor),
            _ => state.targets.get(&user),
        };
        before.is_some_and(Member::is_current)
    };
    let joined = change
        .members
        .iter()
        .filter(|m| m.is_current() && !was_current(m.user_id))
        .count();
    let left = change
        .members
        .iter()
        .filter(|m| !m.is_current() && was_current(m.user_id))
        .count();
    let group = Group {
        member_count: (state.group.member_count as usize + joined - left) as u32,
        ..change.group.clone()
    };
    groups::Entity::update(group_row(&group)).exec(tx).await?;
    Ok(group)
}
