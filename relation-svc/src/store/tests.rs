//! The UserStore contract, run against every SQL backend.

use imesh_kit::testing;

use super::*;

async fn stores() -> Vec<(testing::Backend, Box<dyn UserStore>)> {
    let mut out = Vec::new();
    for backend in testing::sql_backends() {
        let config = testing::fresh_sql(backend).await.unwrap();
        let db = imesh_kit::sql::connect_and_migrate::<sql::Migrator>(&config)
            .await
            .unwrap();
        out.push((
            backend,
            Box::new(sql::SqlUserStore::new(db)) as Box<dyn UserStore>,
        ));
    }
    out
}

fn new_user(id: i64, username: &str) -> NewUser {
    NewUser {
        user: User {
            id,
            username: username.into(),
            nickname: format!("{username}!"),
            created_at_ms: 1_700_000_000_000,
        },
        password_hash: "$argon2id$fake".into(),
    }
}

#[tokio::test]
async fn insert_then_find_by_username_and_ids() {
    for (backend, store) in stores().await {
        store.insert(&new_user(1, "ann")).await.unwrap();
        store.insert(&new_user(2, "bob")).await.unwrap();
        let ann = store.by_username("ann").await.unwrap().expect("ann stored");
        assert_eq!(ann.user, new_user(1, "ann").user, "{backend:?}");
        assert_eq!(ann.password_hash, "$argon2id$fake");
        assert!(store.by_username("nobody").await.unwrap().is_none());
        let mut found: Vec<i64> = store
            .by_ids(&[1, 2, 3])
            .await
            .unwrap()
            .iter()
            .map(|u| u.id)
            .collect();
        found.sort();
        assert_eq!(found, vec![1, 2], "{backend:?}");
        assert!(store.by_ids(&[]).await.unwrap().is_empty());
    }
}

#[tokio::test]
async fn a_taken_username_is_a_conflict_and_changes_nothing() {
    for (backend, store) in stores().await {
        store.insert(&new_user(1, "ann")).await.unwrap();
        let err = store.insert(&new_user(2, "ann")).await.unwrap_err();
        assert!(
            matches!(err, StoreError::Conflict(_)),
            "{backend:?}: {err:?}"
        );
        assert!(store.by_ids(&[2]).await.unwrap().is_empty(), "{backend:?}");
    }
}
