//! [`UserStore`] over sea-orm.

use std::sync::Arc;

use async_trait::async_trait;
use imesh_kit::{
    error::StoreError,
    ids::Snowflake,
    outbox::{self, OutboxRow},
};
use sea_orm::{
    ActiveValue::{NotSet, Set},
    ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, TransactionTrait,
    sea_query::{Expr, ExprTrait},
};
use tokio::sync::Notify;

use crate::domain::{NewUser, ProfileUpdate, StoredUser, User, UserStore};

#[allow(unreachable_pub)]
pub(super) mod entity {
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "users")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub id: i64,
        #[sea_orm(unique)]
        pub username: String,
        pub nickname: String,
        pub password_hash: String,
        pub created_at_ms: i64,
        pub avatar_url: String,
        pub extra_json: String,
        pub disabled: bool,
        pub token_version: i64,
        /// The user's relation change sequence (see `FriendStore::change_pair`).
        pub relation_seq: i64,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

fn to_user(m: entity::Model) -> (User, String) {
    (
        User {
            id: m.id,
            username: m.username,
            nickname: m.nickname,
            created_at_ms: m.created_at_ms,
            avatar_url: m.avatar_url,
            extra_json: m.extra_json,
            disabled: m.disabled,
            token_version: m.token_version,
        },
        m.password_hash,
    )
}

#[derive(Clone)]
pub struct SqlUserStore {
    db: DatabaseConnection,
    /// Versions of nickname changes (their outbox row ids).
    ids: Arc<Snowflake>,
    /// Woken after each nickname change so its relay runs at once.
    renamed: Arc<Notify>,
}

impl SqlUserStore {
    pub fn new(db: DatabaseConnection, ids: Arc<Snowflake>, renamed: Arc<Notify>) -> Self {
        Self { db, ids, renamed }
    }

    async fn by_id(&self, id: i64) -> Result<Option<User>, StoreError> {
        let found = entity::Entity::find_by_id(id).one(&self.db).await?;
        Ok(found.map(|m| to_user(m).0))
    }
}

#[async_trait]
impl UserStore for SqlUserStore {
    async fn insert(&self, new: &NewUser) -> Result<(), StoreError> {
        let u = &new.user;
        let row = entity::ActiveModel {
            id: Set(u.id),
            username: Set(u.username.clone()),
            nickname: Set(u.nickname.clone()),
            password_hash: Set(new.password_hash.clone()),
            created_at_ms: Set(u.created_at_ms),
            avatar_url: Set(u.avatar_url.clone()),
            extra_json: Set(u.extra_json.clone()),
            disabled: Set(u.disabled),
            token_version: Set(u.token_version),
            relation_seq: Set(0),
        };
        entity::Entity::insert(row)
            .exec_without_returning(&self.db)
            .await?;
        Ok(())
    }

    async fn by_username(&self, username: &str) -> Result<Option<StoredUser>, StoreError> {
        let found = entity::Entity::find()
            .filter(entity::Column::Username.eq(username))
            .one(&self.db)
            .await?;
        Ok(found.map(to_user).map(|(user, password_hash)| StoredUser {
            user,
            password_hash,
        }))
    }

    async fn by_ids(&self, ids: &[i64]) -> Result<Vec<User>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let found = entity::Entity::find()
            .filter(entity::Column::Id.is_in(ids.iter().copied()))
            .all(&self.db)
            .await?;
        Ok(found.into_iter().map(|m| to_user(m).0).collect())
    }

    async fn update_profile(
        &self,
        id: i64,
        update: &ProfileUpdate,
    ) -> Result<Option<User>, StoreError> {
        let set = |v: &Option<String>| v.clone().map_or(NotSet, Set);
        let row = entity::ActiveModel {
            id: Set(id),
            nickname: set(&update.nickname),
            avatar_url: set(&update.avatar_url),
            extra_json: set(&update.extra_json),
            ..Default::default()
        };
        let changes = [&update.nickname, &update.avatar_url, &update.extra_json];
        if changes.iter().any(|c| c.is_some()) {
            let tx = self.db.begin().await?;
            let done = entity::Entity::update_many()
                .set(row)
                .filter(entity::Column::Id.eq(id))
                .exec(&tx)
                .await?;
            let renamed = update.nickname.as_ref().filter(|_| done.rows_affected > 0);
            if let Some(nickname) = renamed {
                let version = self.ids.next_id()?;
                let row = OutboxRow {
                    id: version,
                    payload: crate::events::encode_rename(id, nickname, version),
                };
                outbox::insert(&tx, crate::events::RENAME_OUTBOX_TABLE, &[row]).await?;
            }
            tx.commit().await?;
            if renamed.is_some() {
                self.renamed.notify_one();
            }
        }
        self.by_id(id).await
    }

    async fn set_disabled(&self, id: i64, disabled: bool) -> Result<Option<User>, StoreError> {
        let mut update = entity::Entity::update_many()
            .col_expr(entity::Column::Disabled, Expr::value(disabled))
            .filter(entity::Column::Id.eq(id));
        if disabled {
            update = update.col_expr(
                entity::Column::TokenVersion,
                Expr::col(entity::Column::TokenVersion).add(1),
            );
        }
        update.exec(&self.db).await?;
        self.by_id(id).await
    }
}
