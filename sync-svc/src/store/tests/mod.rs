//! The InboxStore contract, run against every SQL backend.

use imesh_kit::testing;

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use imesh_kit::error::StoreError;

mod bits;

use super::{sql::SqlInboxStore, *};
use crate::domain::{
    Change, ConversationView, Cursor, Entry, InboxStore, Mark, Settings, StoredEvent,
};

async fn stores() -> Vec<(testing::Backend, SqlInboxStore)> {
    let mut out = Vec::new();
    for backend in testing::sql_backends() {
        let config = testing::fresh_sql(backend).await.unwrap();
        let db = imesh_kit::sql::connect_and_migrate::<sql::Migrator>(&config)
            .await
            .unwrap();
        let reads = imesh_kit::sql::readers(&config, &db).await.unwrap();
        out.push((backend, SqlInboxStore::new(db).reading_from(reads)));
    }
    out
}

fn event(id: i64, recipients: &[i64]) -> StoredEvent {
    StoredEvent {
        id,
        event_id: format!("e{id}"),
        payload: Bytes::from(vec![id as u8; 4]),
        recipients: recipients.to_vec(),
        mark: None,
        hook: None,
    }
}

/// Event `id`: message `seq` of `conversation` from `sender` to `recipients`.
fn message(id: i64, conversation: &str, seq: i64, sender: i64, recipients: &[i64]) -> StoredEvent {
    StoredEvent {
        mark: Some(Mark {
            conversation_id: conversation.into(),
            seq,
            change: Change::Message {
                sender,
                time_ms: 1_000 + id,
                mentioned: vec![],
                mention_all: false,
                receipt_bound: 0,
            },
        }),
        ..event(id, recipients)
    }
}

fn summary(views: &[ConversationView]) -> Vec<(String, i64, i64, bool)> {
    views
        .iter()
        .map(|v| {
            (
                v.conversation_id.clone(),
                v.latest_seq,
                v.read_seq,
                v.mentioned,
            )
        })
        .collect()
}

#[tokio::test]
async fn appended_entries_come_back_in_order_after_a_cursor() {
    for (backend, store) in stores().await {
        store
            .append(&[event(1, &[7, 8]), event(2, &[7])])
            .await
            .unwrap();
        store.append(&[event(3, &[7, 8])]).await.unwrap();
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
        store.append(&[event(1, &[7])]).await.unwrap();
        let mut replay = event(2, &[7]);
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
async fn events_without_recipients_are_stored_and_move_their_conversation() {
    for (backend, store) in stores().await {
        // A read-fanout group's message: stored, no inbox entry, the conversation moves.
        let seqs = store.append(&[message(1, "g:9", 4, 7, &[])]).await.unwrap();
        assert_eq!(seqs, vec![Vec::<i64>::new()], "{backend:?}");
        let known = store.known_events(&["e1"]).await.unwrap();
        assert!(known.contains("e1"), "{backend:?}");
        let latest = store.latest_seqs(&["g:9"]).await.unwrap();
        assert_eq!(latest, vec![("g:9".to_owned(), 4)], "{backend:?}");
        // Recipients after it number from their first entry as ever.
        let seqs = store.append(&[event(2, &[7])]).await.unwrap();
        assert_eq!(seqs, vec![vec![1]], "{backend:?}");
    }
}

#[tokio::test]
async fn appends_number_each_recipients_entries_after_their_last() {
    for (backend, store) in stores().await {
        let seqs = store
            .append(&[event(1, &[7, 8]), event(2, &[8]), event(3, &[8, 9])])
            .await
            .unwrap();
        assert_eq!(seqs, vec![vec![1, 1], vec![2], vec![3, 1]], "{backend:?}");
        let seqs = store.append(&[event(4, &[7, 9])]).await.unwrap();
        assert_eq!(seqs, vec![vec![2, 2]], "{backend:?}");
    }
}

/// The sync seqs of user 7's first ten entries.
async fn seqs_of_user_7(store: &SqlInboxStore) -> Vec<i64> {
    let entries = store.entries(7, 0, 10).await.unwrap();
    entries.iter().map(|e| e.sync_seq).collect()
}

/// Two stores over one fresh database, as two sync-svc replicas.
async fn replicas(backend: testing::Backend) -> Vec<SqlInboxStore> {
    let config = testing::fresh_sql(backend).await.unwrap();
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let db = imesh_kit::sql::connect_and_migrate::<sql::Migrator>(&config)
            .await
            .unwrap();
        replicas.push(SqlInboxStore::new(db));
    }
    replicas
}

#[tokio::test]
async fn concurrent_appenders_make_a_users_entries_visible_in_sync_seq_order() {
    const APPENDERS: i64 = 4;
    const EACH: i64 = 25;
    for backend in testing::sql_backends() {
        // Two appenders on each replica.
        let replicas = replicas(backend).await;
        let appenders: Vec<_> = (0..APPENDERS)
            .map(|a| {
                let store = replicas[a as usize % 2].clone();
                tokio::spawn(async move {
                    for i in 0..EACH {
                        // User 7 gets every event, beside a user of the appender's own.
                        let id = 1 + a * EACH + i;
                        store.append(&[event(id, &[7, 100 + a])]).await.unwrap();
                    }
                })
            })
            .collect();
        // A device pulling after its cursor all along: it would step over an entry that
        // became visible after a later one.
        let seen = testing::read_after_while(&appenders, |after| {
            let reader = replicas[0].clone();
            async move {
                let page = reader.entries(7, after, 500).await.unwrap();
                page.iter().map(|e| e.sync_seq).collect()
            }
        })
        .await;
        for appender in appenders {
            appender.await.unwrap();
        }
        assert_eq!(
            seen,
            (1..=APPENDERS * EACH).collect::<Vec<_>>(),
            "{backend:?}"
        );
    }
}

#[tokio::test]
async fn inbox_heads_start_above_every_seq_handed_out_before_them() {
    use sea_orm::ConnectionTrait;
    use sea_orm_migration::MigratorTrait;
    for backend in testing::sql_backends() {
        let config = testing::fresh_sql(backend).await.unwrap();
        let db = imesh_kit::sql::connect(&config).await.unwrap();
        let before_heads = sql::Migrator::migrations().len() as u32 - 1;
        sql::Migrator::up(&db, Some(before_heads)).await.unwrap();
        // Counters handed out user 7's seqs up to a persisted ceiling of 1,000 (entries
        // since purged); user 8 holds entry 5.
        db.execute_unprepared(
            "INSERT INTO seq_ceilings (name, ceiling) VALUES ('{u:7}:sync', 1000)",
        )
        .await
        .unwrap();
        db.execute_unprepared("INSERT INTO inbox (user_id, sync_seq, event_pk) VALUES (8, 5, 1)")
            .await
            .unwrap();
        sql::Migrator::up(&db, None).await.unwrap();
        let store = SqlInboxStore::new(db);
        let seqs = store.append(&[event(2, &[7, 8, 9])]).await.unwrap();
        assert_eq!(seqs, vec![vec![1001, 6, 1]], "{backend:?}");
    }
}

#[tokio::test]
async fn device_cursors_never_move_back() {
    for (backend, store) in stores().await {
        assert_eq!(store.ack(7, "phone", 5).await.unwrap(), 5, "{backend:?}");
        assert_eq!(store.ack(7, "phone", 3).await.unwrap(), 5, "{backend:?}");
        assert_eq!(store.ack(7, "laptop", 1).await.unwrap(), 1, "{backend:?}");
        assert_eq!(store.ack(7, "phone", 9).await.unwrap(), 9, "{backend:?}");
        // Many devices at once: each only ever raised, a device named twice keeps the higher.
        let acks = vec![
            (7, "phone".to_owned(), 4),
            (7, "laptop".to_owned(), 6),
            (8, "phone".to_owned(), 2),
            (8, "phone".to_owned(), 3),
        ];
        store.ack_many(&acks).await.unwrap();
        assert_eq!(store.ack(7, "phone", 0).await.unwrap(), 9, "{backend:?}");
        assert_eq!(store.ack(7, "laptop", 0).await.unwrap(), 6, "{backend:?}");
        assert_eq!(store.ack(8, "phone", 0).await.unwrap(), 3, "{backend:?}");
    }
}

#[tokio::test]
async fn messages_move_conversation_state_monotonically_whatever_order_they_arrive_in() {
    for (backend, store) in stores().await {
        // Seq 2 lands before seq 1 (two relays racing); then 3 in the same batch as a replay
        // of an older one.
        store
            .append(&[message(2, "d:1:2", 2, 1, &[1, 2])])
            .await
            .unwrap();
        store
            .append(&[message(1, "d:1:2", 1, 2, &[1, 2])])
            .await
            .unwrap();
        let views = store.conversations(2, None, 10).await.unwrap();
        assert_eq!(
            summary(&views),
            vec![("d:1:2".into(), 2, 1, false)],
            "{backend:?}"
        );
        assert_eq!(
            views[0].last_event,
            Bytes::from(vec![2u8; 4]),
            "{backend:?}"
        );
        assert_eq!(views[0].updated_at_ms, 1_002, "{backend:?}");
        assert_eq!(
            summary(&store.conversations(1, None, 10).await.unwrap()),
            vec![("d:1:2".into(), 2, 2, false)],
            "the sender of seq 2 has read it: {backend:?}"
        );
        let mut mention = message(3, "g:7", 5, 1, &[1, 2, 3]);
        if let Some(Mark {
            change: Change::Message { mentioned, .. },
            ..
        }) = &mut mention.mark
        {
            mentioned.push(3);
        }
        store
            .append(&[mention, message(4, "g:7", 4, 2, &[1, 2, 3])])
            .await
            .unwrap();
        let for_3 = store.conversations(3, None, 10).await.unwrap();
        assert_eq!(
            summary(&for_3),
            vec![("g:7".into(), 5, 3, true)],
            "a first message starts the read state just before it: {backend:?}"
        );
        assert_eq!(store.total_unread(2).await.unwrap(), 1 + 1, "{backend:?}");
    }
}

#[tokio::test]
async fn read_seqs_only_rise_and_recalls_mark_only_the_latest_message() {
    for (backend, store) in stores().await {
        for seq in 1..=3 {
            store
                .append(&[message(seq, "d:1:2", seq, 1, &[1, 2])])
                .await
                .unwrap();
        }
        store.raise_read(2, &[("d:1:2".into(), 2)]).await.unwrap();
        store.raise_read(2, &[("d:1:2".into(), 1)]).await.unwrap();
        let states = store.read_states(2, &["d:1:2", "d:2:9"]).await.unwrap();
        assert_eq!(states, vec![("d:1:2".into(), 2, 3)], "{backend:?}");
        let peer = store.read_seqs(&[(1, "d:1:2".into())]).await.unwrap();
        assert_eq!(peer.get("d:1:2"), Some(&3), "{backend:?}");
        let recall = |id: i64, seq: i64| StoredEvent {
            mark: Some(Mark {
                conversation_id: "d:1:2".into(),
                seq,
                change: Change::Recall { by: 1, at_ms: 77 },
            }),
            ..event(id, &[1, 2])
        };
        store.append(&[recall(10, 2)]).await.unwrap();
        let view = &store.conversations(2, None, 1).await.unwrap()[0];
        assert_eq!(
            view.last_recalled_by, 0,
            "seq 2 is not the latest: {backend:?}"
        );
        store.append(&[recall(11, 3)]).await.unwrap();
        let view = &store.conversations(2, None, 1).await.unwrap()[0];
        assert_eq!(
            (view.last_recalled_by, view.last_recalled_at_ms),
            (1, 77),
            "{backend:?}"
        );
        store
            .append(&[message(12, "d:1:2", 4, 1, &[1, 2])])
            .await
            .unwrap();
        let view = &store.conversations(2, None, 1).await.unwrap()[0];
        assert_eq!(
            (view.latest_seq, view.last_recalled_by),
            (4, 0),
            "{backend:?}"
        );
    }
}

#[tokio::test]
async fn the_conversation_list_pages_by_last_activity() {
    for (backend, store) in stores().await {
        for (id, conversation) in [(1, "d:1:2"), (2, "d:1:3"), (3, "g:5"), (4, "d:1:4")] {
            store
                .append(&[message(id, conversation, 1, 9, &[1])])
                .await
                .unwrap();
        }
        let first = store.conversations(1, None, 2).await.unwrap();
        let ids = |v: &[ConversationView]| {
            v.iter()
                .map(|c| c.conversation_id.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&first), vec!["d:1:4", "g:5"], "{backend:?}");
        let after = Cursor {
            updated_at_ms: first[1].updated_at_ms,
            conversation_id: first[1].conversation_id.clone(),
        };
        let rest = store.conversations(1, Some(&after), 10).await.unwrap();
        assert_eq!(ids(&rest), vec!["d:1:3", "d:1:2"], "{backend:?}");
        assert_eq!(store.total_unread(1).await.unwrap(), 4, "{backend:?}");
    }
}

#[tokio::test]
async fn purging_drops_old_events_and_their_entries_only() {
    for (backend, store) in stores().await {
        for id in 1..=4 {
            store.append(&[event(id, &[7, 8])]).await.unwrap();
        }
        assert_eq!(store.purge_before(3).await.unwrap(), 4, "{backend:?}");
        assert_eq!(seqs_of_user_7(&store).await, vec![3, 4], "{backend:?}");
        let known = store.known_events(&["e1", "e3"]).await.unwrap();
        assert_eq!(known, HashSet::from(["e3".to_owned()]), "{backend:?}");
    }
}

#[tokio::test]
async fn settings_are_stored_per_user_and_field() {
    for (backend, store) in stores().await {
        store
            .append(&[message(1, "d:1:2", 1, 1, &[1, 2])])
            .await
            .unwrap();
        let set = store
            .update_settings(2, "d:1:2", Some(true), None)
            .await
            .unwrap_or_else(|e| panic!("{backend:?}: {e:?}"));
        assert_eq!(
            set,
            Settings {
                pinned: true,
                muted: false
            },
            "{backend:?}"
        );
        let set = store
            .update_settings(2, "d:1:2", None, Some(true))
            .await
            .unwrap();
        assert_eq!(
            set,
            Settings {
                pinned: true,
                muted: true
            },
            "{backend:?}"
        );
        let views = store.conversations(1, None, 10).await.unwrap();
        assert_eq!(views[0].settings, Settings::default(), "{backend:?}");
    }
}

#[tokio::test]
async fn a_removed_seq_never_goes_back_and_hides_the_conversation_until_a_newer_message() {
    for (backend, store) in stores().await {
        store
            .append(&[
                message(1, "d:1:2", 1, 1, &[1, 2]),
                message(2, "d:1:2", 2, 1, &[1, 2]),
            ])
            .await
            .unwrap();
        let removed = store.remove_conversation(2, "d:1:2", 2).await;
        assert_eq!(removed.unwrap(), 2, "{backend:?}");
        assert_eq!(
            store.remove_conversation(2, "d:1:2", 1).await.unwrap(),
            2,
            "{backend:?}: never lowered"
        );
        assert!(store.conversations(2, None, 10).await.unwrap().is_empty());
        assert_eq!(store.total_unread(2).await.unwrap(), 0, "{backend:?}");
        assert_eq!(
            store.conversations(1, None, 10).await.unwrap().len(),
            1,
            "{backend:?}: the other member keeps it"
        );
        store
            .append(&[message(3, "d:1:2", 3, 1, &[1, 2])])
            .await
            .unwrap();
        let views = store.conversations(2, None, 10).await.unwrap();
        assert_eq!(
            views
                .iter()
                .map(|v| (v.removed_seq, v.unread()))
                .collect::<Vec<_>>(),
            vec![(2, 1)],
            "{backend:?}"
        );
        assert_eq!(store.total_unread(2).await.unwrap(), 1, "{backend:?}");
        assert!(matches!(
            store.remove_conversation(2, "d:2:9", 5).await,
            Err(StoreError::NotFound)
        ));
    }
}

#[tokio::test]
async fn an_at_all_flags_members_even_when_a_later_message_shares_its_batch() {
    for (backend, store) in stores().await {
        let mut at_all = message(1, "g:9", 1, 1, &[1, 2]);
        if let Some(Mark {
            change: Change::Message { mention_all, .. },
            ..
        }) = &mut at_all.mark
        {
            *mention_all = true;
        }
        store
            .append(&[at_all, message(2, "g:9", 2, 1, &[1, 2])])
            .await
            .unwrap();
        assert_eq!(
            summary(&store.conversations(2, None, 10).await.unwrap()),
            vec![("g:9".into(), 2, 0, true)],
            "{backend:?}"
        );
    }
}

/// Message `seq` of group 9 from user 1 to users 1–3, asking for receipts over `bound`.
fn asking(id: i64, seq: i64, bound: u32) -> StoredEvent {
    let mut event = message(id, "g:9", seq, 1, &[1, 2, 3]);
    if let Some(Mark {
        change: Change::Message { receipt_bound, .. },
        ..
    }) = &mut event.mark
    {
        *receipt_bound = bound;
    }
    event
}

#[tokio::test]
async fn receipt_messages_get_consecutive_slots_and_are_found_by_seq_range_and_reader() {
    use crate::domain::{FIRST_SLOT, Receipt};
    for (backend, store) in stores().await {
        // Two in one append, one plain message, one later.
        let first = [asking(1, 1, 10), asking(2, 2, 0), asking(3, 3, 17)];
        store.append(&first).await.unwrap();
        store.append(&[asking(4, 4, 8)]).await.unwrap();
        let slot = |seq, bound, offset| Receipt {
            seq,
            sender: 1,
            bound,
            offset,
        };
        let all = vec![
            slot(1, 10, FIRST_SLOT),
            slot(3, 17, FIRST_SLOT + 2),
            slot(4, 8, FIRST_SLOT + 5),
        ];
        let between = store.receipts_between("g:9", 0, i64::MAX).await.unwrap();
        assert_eq!(between, all, "{backend:?}");
        assert_eq!(
            store.receipts_between("g:9", 1, 3).await.unwrap(),
            vec![all[1]],
            "{backend:?}: (1, 3]"
        );
        assert_eq!(
            store.receipts("g:9", &[4, 2, 1]).await.unwrap(),
            vec![all[0], all[2]],
            "{backend:?}"
        );
        // User 2's read state opened at 0 with the first message; raise it past seq 1.
        store.raise_read(2, &[("g:9".into(), 1)]).await.unwrap();
        assert_eq!(
            store
                .receipts_unread_by(&[(2, "g:9", 3), (3, "g:9", 1)])
                .await
                .unwrap(),
            vec![(3, "g:9".to_owned(), all[0]), (2, "g:9".to_owned(), all[1])],
            "{backend:?}: past read seq 1, up to 3"
        );
        assert!(
            store
                .receipts_unread_by(&[(7, "g:9", 4)])
                .await
                .unwrap()
                .is_empty(),
            "{backend:?}: no read state, nothing passed"
        );
        let mut readers = store.readers("g:9").await.unwrap();
        readers.sort();
        assert_eq!(readers, vec![(1, 4), (2, 1), (3, 0)], "{backend:?}");
    }
}

#[tokio::test]
async fn racing_appends_for_the_same_slot_conflict_and_store_nothing() {
    for (backend, store) in stores().await {
        store.append(&[asking(1, 1, 8)]).await.unwrap();
        let (two, three) = ([asking(2, 2, 8)], [asking(3, 3, 8)]);
        let (a, b) = tokio::join!(store.append(&two), store.append(&three));
        match (a, b) {
            (Ok(_), Ok(_)) => {}
            (Err(StoreError::Conflict(_)), Ok(_)) | (Ok(_), Err(StoreError::Conflict(_))) => {}
            other => panic!("{backend:?}: {other:?}"),
        }
        let receipts = store.receipts_between("g:9", 0, i64::MAX).await.unwrap();
        let mut offsets: Vec<u64> = receipts.iter().map(|r| r.offset).collect();
        offsets.dedup();
        assert_eq!(offsets.len(), receipts.len(), "{backend:?}: no shared slot");
    }
}

#[tokio::test]
async fn push_settings_are_replaced_whole_and_muted_conversations_leave_the_badge() {
    use crate::domain::{Preview, PushSettings};
    for (backend, store) in stores().await {
        assert!(
            store.push_settings(&[2]).await.unwrap().is_empty(),
            "{backend:?}"
        );
        let night = PushSettings {
            quiet_start_min: 1320,
            quiet_end_min: 420,
            utc_offset_min: -300,
            preview: Preview::Sender,
        };
        store.set_push_settings(2, &night).await.unwrap();
        let hidden = PushSettings {
            preview: Preview::Hidden,
            ..PushSettings::default()
        };
        store.set_push_settings(3, &night).await.unwrap();
        store.set_push_settings(3, &hidden).await.unwrap();
        let stored = store.push_settings(&[2, 3, 4]).await.unwrap();
        assert_eq!(
            stored,
            HashMap::from([(2, night), (3, hidden)]),
            "{backend:?}"
        );

        store
            .append(&[
                message(1, "d:1:2", 1, 1, &[1, 2]),
                message(2, "d:2:5", 1, 5, &[2, 5]),
                message(3, "d:2:5", 2, 5, &[2, 5]),
            ])
            .await
            .unwrap();
        assert_eq!(store.total_unread(2).await.unwrap(), 3, "{backend:?}");
        store
            .update_settings(2, "d:2:5", None, Some(true))
            .await
            .unwrap();
        assert_eq!(store.total_unread(2).await.unwrap(), 1, "{backend:?}");
        assert_eq!(
            store.unread_totals(&[1, 2, 5, 9]).await.unwrap(),
            HashMap::from([(1, 0), (2, 1), (5, 0), (9, 0)]),
            "{backend:?}: one query for many users"
        );
        let asked = [
            (2, "d:1:2".to_owned()),
            (2, "d:2:5".to_owned()),
            (5, "d:2:5".to_owned()),
        ];
        assert_eq!(
            store.muted_among(&asked).await.unwrap(),
            HashSet::from([(2, "d:2:5".to_owned())]),
            "{backend:?}"
        );
    }
}

#[tokio::test]
async fn webhook_payloads_are_queued_with_their_events_once() {
    for backend in testing::sql_backends() {
        let config = testing::fresh_sql(backend).await.unwrap();
        let db = imesh_kit::sql::connect_and_migrate::<sql::Migrator>(&config)
            .await
            .unwrap();
        let store = SqlInboxStore::new(db.clone());
        let with_hook = StoredEvent {
            hook: Some(b"{\"event_id\":\"e1\"}".to_vec()),
            ..event(1, &[1])
        };
        store.append(&[with_hook, event(2, &[1])]).await.unwrap();
        let queued = imesh_kit::outbox::SqlOutbox::new(db, WEBHOOK_TABLE)
            .pending(10)
            .await
            .unwrap();
        assert_eq!(
            queued
                .iter()
                .map(|r| (r.id, r.payload.clone()))
                .collect::<Vec<_>>(),
            vec![(1, b"{\"event_id\":\"e1\"}".to_vec())],
            "{backend:?}: only the event that carries one"
        );
    }
}

#[tokio::test]
async fn an_append_behind_another_replicas_numbers_again_after_it() {
    for backend in testing::sql_backends() {
        let replicas = replicas(backend).await;
        let first = replicas[0].append(&[event(1, &[7])]).await.unwrap();
        let second = replicas[1].append(&[event(2, &[7])]).await.unwrap();
        // On SQLite the first replica still holds user 7's head at 1: its first attempt
        // takes seq 2 again and loses, the next numbers after the other replica's entry.
        let third = replicas[0].append(&[event(3, &[7])]).await.unwrap();
        assert_eq!(
            (first, second, third),
            (vec![vec![1]], vec![vec![2]], vec![vec![3]]),
            "{backend:?}"
        );
        assert_eq!(
            seqs_of_user_7(&replicas[1]).await,
            vec![1, 2, 3],
            "{backend:?}"
        );
    }
}

#[tokio::test]
async fn a_batch_past_a_statements_parameter_limit_is_stored_whole() {
    // Three group messages of 10,000 first-time members each: a head, an entry and a read
    // state per member, more values than one statement may bind on any backend.
    let members = |group: i64| -> Vec<i64> { (1..=10_000).map(|m| group * 100_000 + m).collect() };
    for (backend, store) in stores().await {
        let events: Vec<StoredEvent> = (1..=3)
            .map(|g| message(g, &format!("g:{g}"), 1, g * 100_000 + 1, &members(g)))
            .collect();
        let seqs = store.append(&events).await.unwrap();
        assert!(
            seqs.iter()
                .all(|s| s.len() == 10_000 && s.iter().all(|seq| *seq == 1)),
            "{backend:?}"
        );
        let last = members(3)[9_999];
        let entries = store.entries(last, 0, 10).await.unwrap();
        assert_eq!(entries.len(), 1, "{backend:?}");
        let views = store.conversations(last, None, 10).await.unwrap();
        assert_eq!(
            summary(&views),
            vec![("g:3".into(), 1, 0, false)],
            "{backend:?}"
        );
    }
}
