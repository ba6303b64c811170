//! The sea-orm adapter of [`UserStore`] and relation-svc's migrations.

use async_trait::async_trait;
use imesh_kit::error::StoreError;
use sea_orm::{ActiveValue::Set, ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter};
use sea_orm_migration::{prelude::*, schema::*};

use super::{NewUser, StoredUser, UserStore};
use crate::domain::User;

#[allow(unreachable_pub)]
mod users {
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
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

fn to_user(m: users::Model) -> (User, String) {
    (
        User {
            id: m.id,
            username: m.username,
            nickname: m.nickname,
            created_at_ms: m.created_at_ms,
        },
        m.password_hash,
    )
}

#[derive(Clone)]
pub struct SqlUserStore {
    db: DatabaseConnection,
}

impl SqlUserStore {
    pub fn new(db: DatabaseConnection) -> Self {
        Self { db }
    }
}

#[async_trait]
impl UserStore for SqlUserStore {
    async fn insert(&self, new: &NewUser) -> Result<(), StoreError> {
        let row = users::ActiveModel {
            id: Set(new.user.id),
            username: Set(new.user.username.clone()),
            nickname: Set(new.user.nickname.clone()),
            password_hash: Set(new.password_hash.clone()),
            created_at_ms: Set(new.user.created_at_ms),
        };
        users::Entity::insert(row)
            .exec_without_returning(&self.db)
            .await?;
        Ok(())
    }

    async fn by_username(&self, username: &str) -> Result<Option<StoredUser>, StoreError> {
        let found = users::Entity::find()
            .filter(users::Column::Username.eq(username))
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
        let found = users::Entity::find()
            .filter(users::Column::Id.is_in(ids.iter().copied()))
            .all(&self.db)
            .await?;
        Ok(found.into_iter().map(|m| to_user(m).0).collect())
    }
}

pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![Box::new(CreateUsers)]
    }

    fn migration_table_name() -> DynIden {
        Alias::new("relation_migrations").into_iden()
    }
}

struct CreateUsers;

impl MigrationName for CreateUsers {
    fn name(&self) -> &str {
        "m20261201_000001_users"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for CreateUsers {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Alias::new("users"))
                    .if_not_exists()
                    .col(big_integer(Alias::new("id")).primary_key())
                    .col(string_len_uniq(Alias::new("username"), 32))
                    .col(string_len(Alias::new("nickname"), 256))
                    .col(string_len(Alias::new("password_hash"), 256))
                    .col(big_integer(Alias::new("created_at_ms")))
                    .to_owned(),
            )
            .await
    }
}
