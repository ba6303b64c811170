//! The sea-orm adapter of [`crate::domain::GroupStore`] and group-svc's migrations.

mod entities;
mod schema;
mod store;

pub use schema::Migrator;
pub use store::SqlGroupStore;
