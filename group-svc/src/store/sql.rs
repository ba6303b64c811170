//! The sea-orm adapter of [`GroupStore`] and group-svc's migrations.

use async_trait::async_trait;
use imesh_kit::error::StoreError;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder,
    TransactionTrait,
};
use sea_orm_migration::{prelude::*, schema::*};

use super::GroupStore;
use crate::domain::{Group, Member, Role};

#[allow(unreachable_pub)]
mod groups {
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "im_group")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub id: i64,
        pub name: String,
        pub owner_id: i64,
        pub member_count: i32,
        pub created_at_ms: i64,
        pub version: i64,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

#[allow(unreachable_pub)]
mod members {
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
        pub joined_at_ms: i64,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

#[derive(Clone)]
pub struct SqlGroupStore {
    db: DatabaseConnection,
}

impl SqlGroupStore {
    pub fn new(db: DatabaseConnection) -> Self {
        Self { db }
    }
}

#[async_trait]
impl GroupStore for SqlGroupStore {
    async fn create(&self, group: &Group, members: &[Member]) -> Result<(), StoreError> {
        let txn = self.db.begin().await?;
        groups::Entity::insert(groups::ActiveModel {
            id: Set(group.id),
            name: Set(group.name.clone()),
            owner_id: Set(group.owner_id),
            member_count: Set(group.member_count as i32),
            created_at_ms: Set(group.created_at_ms),
            version: Set(group.version),
        })
        .exec_without_returning(&txn)
        .await?;
        let rows = members.iter().map(|m| members::ActiveModel {
            group_id: Set(group.id),
            user_id: Set(m.user_id),
            role: Set(m.role as i16),
            map_id: Set(m.map_id as i32),
            joined_at_ms: Set(m.joined_at_ms),
        });
        members::Entity::insert_many(rows)
            .exec_without_returning(&txn)
            .await?;
        txn.commit().await?;
        Ok(())
    }

    async fn group(&self, group_id: i64) -> Result<Option<Group>, StoreError> {
        Ok(groups::Entity::find_by_id(group_id)
            .one(&self.db)
            .await?
            .map(|g| Group {
                id: g.id,
                name: g.name,
                owner_id: g.owner_id,
                member_count: g.member_count as u32,
                created_at_ms: g.created_at_ms,
                version: g.version,
            }))
    }

    async fn members(&self, group_id: i64) -> Result<Vec<Member>, StoreError> {
        let rows = members::Entity::find()
            .filter(members::Column::GroupId.eq(group_id))
            .order_by_asc(members::Column::MapId)
            .all(&self.db)
            .await?;
        rows.into_iter()
            .map(|m| {
                let role = Role::from_i16(m.role).ok_or_else(|| {
                    StoreError::Unavailable(anyhow::anyhow!(
                        "member {} has unknown role {}",
                        m.user_id,
                        m.role
                    ))
                })?;
                Ok(Member {
                    user_id: m.user_id,
                    role,
                    map_id: m.map_id as u32,
                    joined_at_ms: m.joined_at_ms,
                })
            })
            .collect()
    }
}

pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![Box::new(CreateGroups)]
    }

    fn migration_table_name() -> DynIden {
        Alias::new("group_migrations").into_iden()
    }
}

struct CreateGroups;

impl MigrationName for CreateGroups {
    fn name(&self) -> &str {
        "m20261201_000001_groups"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for CreateGroups {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Alias::new("im_group"))
                    .if_not_exists()
                    .col(big_integer(Alias::new("id")).primary_key())
                    .col(string_len(Alias::new("name"), 256))
                    .col(big_integer(Alias::new("owner_id")))
                    .col(integer(Alias::new("member_count")))
                    .col(big_integer(Alias::new("created_at_ms")))
                    .col(big_integer(Alias::new("version")))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(Alias::new("im_group_member"))
                    .if_not_exists()
                    .col(big_integer(Alias::new("group_id")))
                    .col(big_integer(Alias::new("user_id")))
                    .col(small_integer(Alias::new("role")))
                    .col(integer(Alias::new("map_id")))
                    .col(big_integer(Alias::new("joined_at_ms")))
                    .primary_key(
                        Index::create()
                            .col(Alias::new("group_id"))
                            .col(Alias::new("user_id")),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ux_group_member_map_id")
                    .table(Alias::new("im_group_member"))
                    .col(Alias::new("group_id"))
                    .col(Alias::new("map_id"))
                    .unique()
                    .if_not_exists()
                    .to_owned(),
            )
            .await
    }
}
