//! What the sync-svc benches share: inboxes over a fresh database of one backend, with a
//! no-op notifier and a fixed member map.

use std::sync::Arc;

use bytes::Bytes;
use imesh_kit::{ids::Snowflake, testing};
use sync_svc::{
    domain::ReceiptBits,
    domain::{Entry, Inboxes, MemberMap, Memberships, Notifier, Parts},
    store::sql::{Migrator, SqlInboxStore},
};

/// Every group is `map`; deliveries go nowhere.
struct Group(Arc<MemberMap>);

#[async_trait::async_trait]
impl Notifier for Group {
    async fn deliver(&self, _: Vec<(i64, Vec<Entry>)>) -> anyhow::Result<()> {
        Ok(())
    }

    async fn deliver_to_groups(&self, _: Vec<(i64, Bytes)>) -> anyhow::Result<()> {
        Ok(())
    }
}

#[async_trait::async_trait]
impl Memberships for Group {
    async fn is_member(&self, _: i64, _: i64) -> anyhow::Result<bool> {
        Ok(true)
    }

    async fn member_map(&self, _: i64, _: bool) -> anyhow::Result<Arc<MemberMap>> {
        Ok(self.0.clone())
    }
}

pub(crate) async fn inboxes(
    backend: testing::Backend,
    map: Arc<MemberMap>,
    bits: Arc<dyn ReceiptBits>,
) -> Inboxes {
    let config = testing::fresh_sql(backend).await.unwrap();
    let db = imesh_kit::sql::connect_and_migrate::<Migrator>(&config)
        .await
        .unwrap();
    let group = Arc::new(Group(map));
    Inboxes::new(
        Arc::new(SqlInboxStore::new(db)),
        Parts {
            ids: Arc::new(Snowflake::new(1)),
            notifier: group.clone(),
            members: group,
            bits,
            encode: sync_svc::events::ENCODERS,
            webhooks: None,
        },
    )
}
