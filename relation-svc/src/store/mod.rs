//! The storage port of relation-svc. Adapters: [`sql`] (sea-orm: SQLite, PostgreSQL, MySQL).

use async_trait::async_trait;
use imesh_kit::error::StoreError;

use crate::domain::User;

pub mod sql;

pub struct NewUser {
    pub user: User,
    pub password_hash: String,
}

pub struct StoredUser {
    pub user: User,
    pub password_hash: String,
}

#[async_trait]
pub trait UserStore: Send + Sync + 'static {
    /// MUST fail with `Conflict` when the username is taken, leaving the store unchanged.
    async fn insert(&self, user: &NewUser) -> Result<(), StoreError>;
    async fn by_username(&self, username: &str) -> Result<Option<StoredUser>, StoreError>;
    /// The users among `ids` that exist, in no particular order.
    async fn by_ids(&self, ids: &[i64]) -> Result<Vec<User>, StoreError>;
}

#[cfg(test)]
mod tests;
