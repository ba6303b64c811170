//! [`FriendStore`] over sea-orm. A pair's changes are serialized by bumping both users'
//! `relation_seq` first, in id order: the row locks (PostgreSQL, MySQL) or the write lock
//! (SQLite) taken by those updates are held to commit, and the bumped values are the change
//! sequences of the rows written.

use std::{collections::HashMap, sync::Arc};

use async_trait::async_trait;
use imesh_kit::{
    error::StoreError,
    ids::Snowflake,
    outbox::{self, OutboxRow},
};
use sea_orm::{
    ActiveValue::Set,
    ColumnTrait, Condition, ConnectionTrait, DatabaseConnection, DatabaseTransaction, EntityTrait,
    QueryFilter, QueryOrder, QuerySelect, TransactionTrait,
    sea_query::{Expr, ExprTrait, OnConflict},
};
use tokio::sync::Notify;

use super::users::entity as users;
use crate::{
    domain::{
        Direction, EncodeEvent, Error, FriendRequest, FriendStatus, FriendStore, Friendship, Plan,
        RelationEvent, RequestState, plan::PairState,
    },
    store::OUTBOX_TABLE,
};

#[allow(unreachable_pub)]
mod friendships {
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "friendships")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub owner_id: i64,
        #[sea_orm(primary_key, auto_increment = false)]
        pub peer_id: i64,
        /// 0 none, 1 friend, 2 deleted.
        pub status: i16,
        pub blocked: bool,
        pub remark: String,
        pub add_source: String,
        pub extra_json: String,
        pub sequence: i64,
        pub updated_at_ms: i64,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

#[allow(unreachable_pub)]
mod requests {
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "friend_requests")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub id: i64,
        pub from_id: i64,
        pub to_id: i64,
        pub message: String,
        pub add_source: String,
        /// 1 pending, 2 accepted, 3 rejected, 4 expired.
        pub state: i16,
        pub created_at_ms: i64,
        pub updated_at_ms: i64,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

#[derive(Clone)]
pub struct SqlFriendStore {
    db: DatabaseConnection,
    ids: Arc<Snowflake>,
    encode: EncodeEvent,
    /// Woken after each commit that wrote outbox rows.
    relay: Arc<Notify>,
}

impl SqlFriendStore {
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
}

#[async_trait]
impl FriendStore for SqlFriendStore {
    async fn rows_of(&self, owners: &[i64]) -> Result<Vec<Friendship>, StoreError> {
        if owners.is_empty() {
            return Ok(Vec::new());
        }
        let rows = friendships::Entity::find()
            .filter(friendships::Column::OwnerId.is_in(owners.iter().copied()))
            .all(&self.db)
            .await?;
        rows.into_iter().map(to_friendship).collect()
    }

    async fn changes(
        &self,
        owner: i64,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Friendship>, StoreError> {
        let rows = friendships::Entity::find()
            .filter(friendships::Column::OwnerId.eq(owner))
            .filter(friendships::Column::Sequence.gt(after))
            .order_by_asc(friendships::Column::Sequence)
            .limit(u64::from(limit))
            .all(&self.db)
            .await?;
        rows.into_iter().map(to_friendship).collect()
    }

    async fn request(&self, id: i64) -> Result<Option<FriendRequest>, StoreError> {
        let found = requests::Entity::find_by_id(id).one(&self.db).await?;
        found.map(to_request).transpose()
    }

    async fn requests(
        &self,
        user: i64,
        direction: Direction,
        before: i64,
        limit: u32,
    ) -> Result<Vec<FriendRequest>, StoreError> {
        let mine = match direction {
            Direction::Received => requests::Column::ToId,
            Direction::Sent => requests::Column::FromId,
        };
        let rows = requests::Entity::find()
            .filter(mine.eq(user))
            .filter(requests::Column::Id.lt(before))
            .order_by_desc(requests::Column::Id)
            .limit(u64::from(limit))
            .all(&self.db)
            .await?;
        rows.into_iter().map(to_request).collect()
    }

    async fn change_pair(&self, a: i64, b: i64, plan: Plan<'_>) -> Result<PairState, Error> {
        let tx = self.db.begin().await.map_err(StoreError::from)?;
        let sequences = lock_pair(&tx, a, b).await?;
        let mut state = read_pair(&tx, a, b).await?;
        let change = plan(&state)?;
        if change.requests.is_empty() && change.rows.is_empty() {
            tx.commit().await.map_err(StoreError::from)?;
            return Ok(state);
        }
        let now = imesh_kit::ids::unix_ms();
        let mut events = Vec::new();
        for request in change.requests {
            upsert_request(&tx, &request).await?;
            if (request.from, request.to) == (a, b) {
                state.forward = Some(request.clone());
            } else {
                state.reverse = Some(request.clone());
            }
            events.push(RelationEvent::Request(request));
        }
        for row in change.rows {
            let row = Friendship {
                sequence: sequences[&row.owner],
                updated_at_ms: now,
                ..row
            };
            upsert_row(&tx, &row).await?;
            if row.owner == a {
                state.mine = Some(row.clone());
            } else {
                state.theirs = Some(row.clone());
            }
            events.push(RelationEvent::Friendship(row));
        }
        let outbox_rows: Vec<OutboxRow> = events
            .iter()
            .map(|e| {
                Ok(OutboxRow {
                    id: self.ids.next_id()?,
                    payload: (self.encode)(e),
                })
            })
            .collect::<Result<_, StoreError>>()?;
        outbox::insert(&tx, OUTBOX_TABLE, &outbox_rows).await?;
        tx.commit().await.map_err(StoreError::from)?;
        self.relay.notify_one();
        Ok(state)
    }
}

/// Bumps both users' change sequences in id order (taking their locks) and returns them.
async fn lock_pair(
    tx: &DatabaseTransaction,
    a: i64,
    b: i64,
) -> Result<HashMap<i64, i64>, StoreError> {
    for id in [Ord::min(a, b), Ord::max(a, b)] {
        let bumped = users::Entity::update_many()
            .col_expr(
                users::Column::RelationSeq,
                Expr::col(users::Column::RelationSeq).add(1),
            )
            .filter(users::Column::Id.eq(id))
            .exec(tx)
            .await?;
        if bumped.rows_affected == 0 {
            return Err(StoreError::NotFound);
        }
    }
    let rows: Vec<(i64, i64)> = users::Entity::find()
        .select_only()
        .columns([users::Column::Id, users::Column::RelationSeq])
        .filter(users::Column::Id.is_in([a, b]))
        .into_tuple()
        .all(tx)
        .await?;
    Ok(rows.into_iter().collect())
}

async fn read_pair(tx: &DatabaseTransaction, a: i64, b: i64) -> Result<PairState, StoreError> {
    let rows = friendships::Entity::find()
        .filter(
            Condition::any()
                .add(
                    friendships::Column::OwnerId
                        .eq(a)
                        .and(friendships::Column::PeerId.eq(b)),
                )
                .add(
                    friendships::Column::OwnerId
                        .eq(b)
                        .and(friendships::Column::PeerId.eq(a)),
                ),
        )
        .all(tx)
        .await?;
    let requests = requests::Entity::find()
        .filter(
            Condition::any()
                .add(
                    requests::Column::FromId
                        .eq(a)
                        .and(requests::Column::ToId.eq(b)),
                )
                .add(
                    requests::Column::FromId
                        .eq(b)
                        .and(requests::Column::ToId.eq(a)),
                ),
        )
        .all(tx)
        .await?;
    let mut state = PairState {
        a,
        b,
        ..Default::default()
    };
    for row in rows {
        let row = to_friendship(row)?;
        if row.owner == a {
            state.mine = Some(row);
        } else {
            state.theirs = Some(row);
        }
    }
    for request in requests {
        let request = to_request(request)?;
        if request.from == a {
            state.forward = Some(request);
        } else {
            state.reverse = Some(request);
        }
    }
    Ok(state)
}

async fn upsert_request(conn: &impl ConnectionTrait, r: &FriendRequest) -> Result<(), StoreError> {
    use requests::Column as C;
    let row = requests::ActiveModel {
        id: Set(r.id),
        from_id: Set(r.from),
        to_id: Set(r.to),
        message: Set(r.message.clone()),
        add_source: Set(r.add_source.clone()),
        state: Set(state_code(r.state)),
        created_at_ms: Set(r.created_at_ms),
        updated_at_ms: Set(r.updated_at_ms),
    };
    let on_pair = OnConflict::columns([C::FromId, C::ToId])
        .update_columns([
            C::Id,
            C::Message,
            C::AddSource,
            C::State,
            C::CreatedAtMs,
            C::UpdatedAtMs,
        ])
        .to_owned();
    requests::Entity::insert(row)
        .on_conflict(on_pair)
        .exec_without_returning(conn)
        .await?;
    Ok(())
}

async fn upsert_row(conn: &impl ConnectionTrait, f: &Friendship) -> Result<(), StoreError> {
    use friendships::Column as C;
    let row = friendships::ActiveModel {
        owner_id: Set(f.owner),
        peer_id: Set(f.peer),
        status: Set(status_code(f.status)),
        blocked: Set(f.blocked),
        remark: Set(f.remark.clone()),
        add_source: Set(f.add_source.clone()),
        extra_json: Set(f.extra_json.clone()),
        sequence: Set(f.sequence),
        updated_at_ms: Set(f.updated_at_ms),
    };
    let on_pair = OnConflict::columns([C::OwnerId, C::PeerId])
        .update_columns([
            C::Status,
            C::Blocked,
            C::Remark,
            C::AddSource,
            C::ExtraJson,
            C::Sequence,
            C::UpdatedAtMs,
        ])
        .to_owned();
    friendships::Entity::insert(row)
        .on_conflict(on_pair)
        .exec_without_returning(conn)
        .await?;
    Ok(())
}

fn status_code(status: FriendStatus) -> i16 {
    match status {
        FriendStatus::None => 0,
        FriendStatus::Friend => 1,
        FriendStatus::Deleted => 2,
    }
}

fn state_code(state: RequestState) -> i16 {
    match state {
        RequestState::Pending => 1,
        RequestState::Accepted => 2,
        RequestState::Rejected => 3,
        RequestState::Expired => 4,
    }
}

fn corrupt(what: &str, value: i16) -> StoreError {
    StoreError::Unavailable(anyhow::anyhow!("stored {what} {value} is unknown"))
}

fn to_friendship(m: friendships::Model) -> Result<Friendship, StoreError> {
    let status = match m.status {
        0 => FriendStatus::None,
        1 => FriendStatus::Friend,
        2 => FriendStatus::Deleted,
        other => return Err(corrupt("friendship status", other)),
    };
    Ok(Friendship {
        owner: m.owner_id,
        peer: m.peer_id,
        status,
        blocked: m.blocked,
        remark: m.remark,
        add_source: m.add_source,
        extra_json: m.extra_json,
        sequence: m.sequence,
        updated_at_ms: m.updated_at_ms,
    })
}

fn to_request(m: requests::Model) -> Result<FriendRequest, StoreError> {
    let state = match m.state {
        1 => RequestState::Pending,
        2 => RequestState::Accepted,
        3 => RequestState::Rejected,
        4 => RequestState::Expired,
        other => return Err(corrupt("request state", other)),
    };
    Ok(FriendRequest {
        id: m.id,
        from: m.from_id,
        to: m.to_id,
        message: m.message,
        add_source: m.add_source,
        state,
        created_at_ms: m.created_at_ms,
        updated_at_ms: m.updated_at_ms,
    })
}
