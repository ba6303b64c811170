//! The GroupStore contract, run against every SQL backend.

use imesh_kit::testing;

use super::{sql::SqlGroupStore, *};
use crate::domain::Role;

async fn stores() -> Vec<(testing::Backend, SqlGroupStore)> {
    let mut out = Vec::new();
    for backend in testing::sql_backends() {
        let config = testing::fresh_sql(backend).await.unwrap();
        let db = imesh_kit::sql::connect_and_migrate::<sql::Migrator>(&config)
            .await
            .unwrap();
        out.push((backend, SqlGroupStore::new(db)));
    }
    out
}

fn member(user_id: i64, map_id: u32, role: Role) -> Member {
    Member {
        user_id,
        role,
        map_id,
        joined_at_ms: 5,
    }
}

#[tokio::test]
async fn a_created_group_comes_back_with_its_members_in_map_id_order() {
    for (backend, store) in stores().await {
        let group = Group {
            id: 9,
            name: "team".into(),
            owner_id: 1,
            member_count: 2,
            created_at_ms: 5,
            version: 1,
        };
        let members = vec![member(1, 0, Role::Owner), member(4, 1, Role::Member)];
        store.create(&group, &members).await.unwrap();
        assert_eq!(
            store.group(9).await.unwrap(),
            Some(group.clone()),
            "{backend:?}"
        );
        assert_eq!(store.members(9).await.unwrap(), members, "{backend:?}");
        assert_eq!(store.group(10).await.unwrap(), None);
        let again = store.create(&group, &members).await.unwrap_err();
        assert!(
            matches!(again, StoreError::Conflict(_)),
            "{backend:?}: {again:?}"
        );
    }
}
