//! group-svc's tables (seed 000's `im_group`, `im_group_member`) and migrations.

use sea_orm_migration::{prelude::*, schema::*};

use crate::store::OUTBOX_TABLE;

pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(CreateTables),
            Box::new(imesh_kit::outbox::Migration {
                table: OUTBOX_TABLE,
                name: "m20261201_000002_group_outbox",
            }),
            Box::new(AddNicknames),
            Box::new(imesh_kit::ids::lease::Migration),
        ]
    }

    fn migration_table_name() -> DynIden {
        Alias::new("group_migrations").into_iden()
    }
}

struct CreateTables;

impl MigrationName for CreateTables {
    fn name(&self) -> &str {
        "m20261201_000001_groups_members_requests_oplog"
    }
}

fn n(name: &str) -> Alias {
    Alias::new(name)
}

async fn index(
    manager: &SchemaManager<'_>,
    table: &str,
    name: &str,
    cols: &[&str],
    unique: bool,
) -> Result<(), DbErr> {
    let mut stmt = Index::create();
    stmt.name(name).table(n(table)).if_not_exists();
    for col in cols {
        stmt.col(n(col));
    }
    if unique {
        stmt.unique();
    }
    manager.create_index(stmt.to_owned()).await
}

#[async_trait::async_trait]
impl MigrationTrait for CreateTables {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(n("im_group"))
                    .if_not_exists()
                    .col(big_integer(n("id")).primary_key())
                    .col(small_integer(n("kind")))
                    .col(string_len(n("name"), 256))
                    .col(string_len(n("avatar_url"), 512))
                    .col(text(n("announcement")))
                    .col(big_integer(n("owner_id")))
                    .col(integer(n("member_count")))
                    .col(integer(n("max_member")))
                    .col(boolean(n("mute_all")))
                    .col(small_integer(n("join_mode")))
                    .col(small_integer(n("status")))
                    .col(big_integer(n("version")))
                    .col(big_integer(n("created_at_ms")))
                    .col(integer(n("next_map_id")))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(n("im_group_member"))
                    .if_not_exists()
                    .col(big_integer(n("group_id")))
                    .col(big_integer(n("user_id")))
                    .col(small_integer(n("role")))
                    .col(integer(n("map_id")))
                    .col(string_len(n("alias"), 128))
                    .col(big_integer(n("mute_until_ms")))
                    .col(big_integer(n("join_seq")))
                    .col(big_integer(n("leave_seq")))
                    .col(big_integer(n("joined_at_ms")))
                    .col(small_integer(n("status")))
                    .col(integer(n("extra_permissions")))
                    .primary_key(Index::create().col(n("group_id")).col(n("user_id")))
                    .to_owned(),
            )
            .await?;
        index(
            manager,
            "im_group_member",
            "ux_group_member_map_id",
            &["group_id", "map_id"],
            true,
        )
        .await?;
        index(
            manager,
            "im_group_member",
            "ix_group_member_user",
            &["user_id", "status", "group_id"],
            false,
        )
        .await?;
        manager
            .create_table(
                Table::create()
                    .table(n("im_group_join_request"))
                    .if_not_exists()
                    .col(big_integer(n("group_id")))
                    .col(big_integer(n("user_id")))
                    .col(string_len(n("message"), 1024))
                    .col(big_integer(n("inviter_id")))
                    .col(big_integer(n("created_at_ms")))
                    .primary_key(Index::create().col(n("group_id")).col(n("user_id")))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(n("im_group_oplog"))
                    .if_not_exists()
                    .col(big_integer(n("id")).primary_key())
                    .col(big_integer(n("group_id")))
                    .col(big_integer(n("version")))
                    .col(string_len(n("op"), 32))
                    .col(big_integer(n("operator_id")))
                    .col(text(n("targets")))
                    .col(big_integer(n("at_ms")))
                    .to_owned(),
            )
            .await?;
        index(
            manager,
            "im_group_oplog",
            "ix_group_oplog_group",
            &["group_id", "version"],
            false,
        )
        .await
    }
}

/// Members' nicknames for search, and the version of the rename that set each (renames
/// only ever move it forward; `ix_group_member_user` finds a user's memberships).
struct AddNicknames;

impl MigrationName for AddNicknames {
    fn name(&self) -> &str {
        "m20261202_000003_member_nicknames"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for AddNicknames {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let columns = [
            string_len(n("nickname"), 128).default("").to_owned(),
            big_integer(n("nickname_version")).default(0).to_owned(),
        ];
        imesh_kit::sql::add_columns(manager, n("im_group_member"), columns).await
    }
}
