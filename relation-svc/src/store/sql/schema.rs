//! relation-svc's tables and migrations.

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
                name: "m20261201_000002_relation_outbox",
            }),
            Box::new(imesh_kit::outbox::Migration {
                table: crate::events::RENAME_OUTBOX_TABLE,
                name: "m20261202_000003_relation_rename_outbox",
            }),
            Box::new(imesh_kit::ids::lease::Migration),
        ]
    }

    fn migration_table_name() -> DynIden {
        Alias::new("relation_migrations").into_iden()
    }
}

struct CreateTables;

impl MigrationName for CreateTables {
    fn name(&self) -> &str {
        "m20261201_000001_users_friendships_requests"
    }
}

fn name(n: &str) -> Alias {
    Alias::new(n)
}

#[async_trait::async_trait]
impl MigrationTrait for CreateTables {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(name("users"))
                    .if_not_exists()
                    .col(big_integer(name("id")).primary_key())
                    .col(string_len_uniq(name("username"), 32))
                    .col(string_len(name("nickname"), 256))
                    .col(string_len(name("password_hash"), 256))
                    .col(big_integer(name("created_at_ms")))
                    .col(string_len(name("avatar_url"), 512))
                    .col(text(name("extra_json")))
                    .col(boolean(name("disabled")))
                    .col(big_integer(name("token_version")))
                    .col(big_integer(name("relation_seq")))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(name("friendships"))
                    .if_not_exists()
                    .col(big_integer(name("owner_id")))
                    .col(big_integer(name("peer_id")))
                    .col(small_integer(name("status")))
                    .col(boolean(name("blocked")))
                    .col(string_len(name("remark"), 256))
                    .col(string_len(name("add_source"), 16))
                    .col(text(name("extra_json")))
                    .col(big_integer(name("sequence")))
                    .col(big_integer(name("updated_at_ms")))
                    .primary_key(Index::create().col(name("owner_id")).col(name("peer_id")))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("friendships_by_sequence")
                    .table(name("friendships"))
                    .col(name("owner_id"))
                    .col(name("sequence"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(name("friend_requests"))
                    .if_not_exists()
                    .col(big_integer(name("id")).primary_key())
                    .col(big_integer(name("from_id")))
                    .col(big_integer(name("to_id")))
                    .col(string_len(name("message"), 1024))
                    .col(string_len(name("add_source"), 16))
                    .col(small_integer(name("state")))
                    .col(big_integer(name("created_at_ms")))
                    .col(big_integer(name("updated_at_ms")))
                    .to_owned(),
            )
            .await?;
        for (index, cols, unique) in [
            ("friend_requests_pair", ["from_id", "to_id"], true),
            ("friend_requests_received", ["to_id", "id"], false),
            ("friend_requests_sent", ["from_id", "id"], false),
        ] {
            let mut stmt = Index::create();
            stmt.name(index).table(name("friend_requests"));
            for col in cols {
                stmt.col(name(col));
            }
            if unique {
                stmt.unique();
            }
            manager.create_index(stmt.to_owned()).await?;
        }
        Ok(())
    }
}
