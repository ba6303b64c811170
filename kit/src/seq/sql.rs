//! Ceilings in SQL: `seq_ceilings(name, ceiling)`, raised with a max() upsert.

use async_trait::async_trait;
use sea_orm::{ConnectionTrait, DatabaseConnection};
use sea_orm_migration::{prelude::*, schema::*};

use super::Ceilings;
use crate::error::StoreError;

const TABLE: &str = "seq_ceilings";

#[derive(Clone)]
pub struct SqlCeilings {
    db: DatabaseConnection,
}

impl SqlCeilings {
    pub fn new(db: DatabaseConnection) -> Self {
        Self { db }
    }
}

#[async_trait]
impl Ceilings for SqlCeilings {
    async fn get(&self, keys: &[&str]) -> Result<Vec<i64>, StoreError> {
        let query = Query::select()
            .columns([Alias::new("name"), Alias::new("ceiling")])
            .from(Alias::new(TABLE))
            .and_where(Expr::col(Alias::new("name")).is_in(keys.iter().copied()))
            .to_owned();
        let mut known = std::collections::HashMap::new();
        for row in self.db.query_all(&query).await? {
            known.insert(
                row.try_get::<String>("", "name")?,
                row.try_get::<i64>("", "ceiling")?,
            );
        }
        Ok(keys
            .iter()
            .map(|key| known.get(*key).copied().unwrap_or(0))
            .collect())
    }

    async fn raise(&self, ceilings: &[(&str, i64)]) -> Result<(), StoreError> {
        let rows = ceilings
            .iter()
            .map(|(key, ceiling)| vec![(*key).into(), (*ceiling).into()])
            .collect();
        let backend = self.db.get_database_backend();
        let stmt = crate::sql::upsert_max(
            backend,
            TABLE,
            &["name", "ceiling"],
            &["name"],
            &["ceiling"],
            rows,
        );
        self.db.execute_raw(stmt).await?;
        Ok(())
    }
}

/// Creates `seq_ceilings`; include it in the migrator of every service that allocates seqs.
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261201_000001_seq_ceilings"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Alias::new(TABLE))
                    .if_not_exists()
                    .col(string_len(Alias::new("name"), 191).primary_key())
                    .col(big_integer(Alias::new("ceiling")))
                    .to_owned(),
            )
            .await
    }
}
