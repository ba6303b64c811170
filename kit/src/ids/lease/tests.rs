use super::*;
use crate::testing;

const ID_SHIFT: u32 = super::super::SEQ_BITS;

async fn leases_db(backend: testing::Backend) -> DatabaseConnection {
    let db = crate::sql::connect(&testing::fresh_sql(backend).await.unwrap())
        .await
        .unwrap();
    Migration.up(&SchemaManager::new(&db)).await.unwrap();
    db
}

fn node_of(id: i64) -> u16 {
    ((id >> ID_SHIFT) & i64::from(super::super::MAX_NODE)) as u16
}

/// Ends `node`'s lease in the past, as if its holder had stopped renewing long ago.
async fn lapse(db: &DatabaseConnection, node: u16) {
    let lapse = Query::update()
        .table(NodeLeases::Table)
        .value(NodeLeases::ExpiresAtMs, 1)
        .and_where(Expr::col(NodeLeases::NodeId).eq(i32::from(node)))
        .to_owned();
    db.execute(&lapse).await.unwrap();
}

#[tokio::test]
async fn processes_lease_distinct_nodes_of_their_block_and_mint_with_them() {
    for backend in testing::sql_backends() {
        let db = leases_db(backend).await;
        let a = NodeLease::claim(db.clone(), 512..=767).await.unwrap();
        let b = NodeLease::claim(db.clone(), 512..=767).await.unwrap();
        assert_eq!((a.node(), b.node()), (512, 513), "{backend:?}");
        let (id_a, id_b) = (a.ids().next_id().unwrap(), b.ids().next_id().unwrap());
        assert_eq!((node_of(id_a), node_of(id_b)), (512, 513), "{backend:?}");
        a.renew().await.unwrap();
        assert_eq!(a.node(), 512, "{backend:?}: a renewal keeps the node");
    }
}

#[tokio::test]
async fn a_released_node_stops_minting_and_goes_to_the_next_process() {
    for backend in testing::sql_backends() {
        let db = leases_db(backend).await;
        let first = NodeLease::claim(db.clone(), 0..=255).await.unwrap();
        let ids = first.ids();
        first.release().await.unwrap();
        let refused = ids.next_id().unwrap_err();
        assert!(matches!(refused, StoreError::Unavailable(_)), "{backend:?}");
        let next = NodeLease::claim(db.clone(), 0..=255).await.unwrap();
        assert_eq!(
            next.node(),
            0,
            "{backend:?}: the released node is free again"
        );
    }
}

#[tokio::test]
async fn a_lapsed_lease_is_taken_over_and_its_old_holder_moves_to_another_node() {
    for backend in testing::sql_backends() {
        let db = leases_db(backend).await;
        let old = NodeLease::claim(db.clone(), 256..=511).await.unwrap();
        let old_ids = old.ids();
        lapse(&db, 256).await;
        let new = NodeLease::claim(db.clone(), 256..=511).await.unwrap();
        assert_eq!(new.node(), 256, "{backend:?}: a lapsed node is taken over");
        old.renew().await.unwrap();
        assert_eq!(
            old.node(),
            257,
            "{backend:?}: the old holder claims another"
        );
        let id = old_ids.next_id().unwrap();
        assert_eq!(node_of(id), 257, "{backend:?}: and mints with it");
        assert_eq!(node_of(new.ids().next_id().unwrap()), 256, "{backend:?}");
    }
}

#[tokio::test]
async fn a_full_block_refuses_a_claim_naming_the_block() {
    for backend in testing::sql_backends() {
        let db = leases_db(backend).await;
        let _only = NodeLease::claim(db.clone(), 768..=768).await.unwrap();
        let Err(StoreError::Unavailable(why)) = NodeLease::claim(db, 768..=768).await else {
            panic!("{backend:?}: a second claim on a one-node block succeeded");
        };
        assert!(why.to_string().contains("768..=768"), "{backend:?}: {why}");
    }
}
