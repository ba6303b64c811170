//! The sea-orm adapters of relation-svc's stores and its migrations.

mod friends;
mod schema;
mod users;

pub use friends::SqlFriendStore;
pub use schema::Migrator;
pub use users::SqlUserStore;
