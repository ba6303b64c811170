//! The InboxStore contract, run against every SQL backend.

use imesh_kit::testing;

use super::{sql::SqlInboxStore, *};

async fn stores() -> Vec<(testing::Backend, SqlInboxStore)> {
    let mut out = Vec::new();
    for backend in testing::sql_backends() {
        let config = testing::fresh_sql(backend).await.unwrap();
        let db = imesh_kit::sql::connect_and_migrate::<sql::Migrator>(&config)
            .await
            .unwrap();
        out.push((backend, SqlInboxStore::new(db)));
    }
    out
}

fn event(id: i64, entries: &[(i64, i64)]) -> StoredEvent {
    StoredEvent {
        id,
        event_id: format!("e{id}"),
        payload: Bytes::from(vec![id as u8; 4]),
        entries: entries.to_vec(),
    }
}

#[tokio::test]
async fn appended_entries_come_back_in_order_after_a_cursor() {
    for (backend, store) in stores().await {
        store
            .append(&[event(1, &[(7, 1), (8, 1)]), event(2, &[(7, 2)])])
            .await
            .unwrap();
        store.append(&[event(3, &[(7, 3), (8, 2)])]).await.unwrap();
        let seqs = |entries: Vec<Entry>| entries.iter().map(|e| e.sync_seq).collect::<Vec<_>>();
        assert_eq!(
            seqs(store.entries(7, 0, 10).await.unwrap()),
            vec![1, 2, 3],
            "{backend:?}"
        );
        assert_eq!(
            seqs(store.entries(7, 1, 1).await.unwrap()),
            vec![2],
            "{backend:?}"
        );
        let for_8 = store.entries(8, 1, 10).await.unwrap();
        assert_eq!(
            for_8,
            vec![Entry {
                sync_seq: 2,
                payload: Bytes::from(vec![3u8; 4])
            }],
            "{backend:?}"
        );
        let known = store.known_events(&["e1", "e3", "e9"]).await.unwrap();
        assert_eq!(
            known,
            HashSet::from(["e1".to_owned(), "e3".to_owned()]),
            "{backend:?}"
        );
    }
}

#[tokio::test]
async fn a_replayed_event_is_a_conflict_and_adds_no_entry() {
    for (backend, store) in stores().await {
        store.append(&[event(1, &[(7, 1)])]).await.unwrap();
        let mut replay = event(2, &[(7, 2)]);
        replay.event_id = "e1".into();
        let err = store.append(&[replay]).await.unwrap_err();
        assert!(
            matches!(err, StoreError::Conflict(_)),
            "{backend:?}: {err:?}"
        );
        assert_eq!(
            store.entries(7, 0, 10).await.unwrap().len(),
            1,
            "{backend:?}"
        );
    }
}

#[tokio::test]
async fn device_cursors_never_move_back() {
    for (backend, store) in stores().await {
        assert_eq!(store.ack(7, "phone", 5).await.unwrap(), 5, "{backend:?}");
        assert_eq!(store.ack(7, "phone", 3).await.unwrap(), 5, "{backend:?}");
        assert_eq!(store.ack(7, "laptop", 1).await.unwrap(), 1, "{backend:?}");
        assert_eq!(store.ack(7, "phone", 9).await.unwrap(), 9, "{backend:?}");
    }
}
