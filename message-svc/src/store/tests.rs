//! The MessageStore contract, run against every SQL backend.

use imesh_kit::{
    error::StoreError,
    outbox::{OutboxRow, SqlOutbox},
    testing,
};

use super::{sql::SqlMessageStore, *};
use crate::domain::{
    Content, Forwarded, Hidden, Media, MediaKind, Mentions, Message, MessageStore, Notice, Pin,
    PinOutcome, ReactOutcome, ReactionChange, ReactionCount, Reply,
};

async fn stores() -> Vec<(testing::Backend, SqlMessageStore, SqlOutbox)> {
    let mut out = Vec::new();
    for backend in testing::sql_backends() {
        let config = testing::fresh_sql(backend).await.unwrap();
        let db = imesh_kit::sql::connect_and_migrate::<sql::Migrator>(&config)
            .await
            .unwrap();
        let reads = imesh_kit::sql::readers(&config, &db).await.unwrap();
        out.push((
            backend,
            SqlMessageStore::new(db.clone()).reading_from(reads),
            SqlOutbox::new(db, OUTBOX_TABLE),
        ));
    }
    out
}

fn message(msg_id: i64, seq: i64, client_msg_id: &str) -> Message {
    Message {
        msg_id,
        conversation_id: "d:1:2".into(),
        seq,
        sender_id: 1,
        client_msg_id: client_msg_id.into(),
        content: Content::Text(format!("hello {seq}")),
        mentions: Mentions::default(),
        receipt_bound: 0,
        server_time_ms: 1_700_000_000_000 + seq,
        recalled_by: 0,
        recalled_at_ms: 0,
        version: 1,
        edited_at_ms: 0,
        reply: None,
        forwarded: None,
        reactions: Vec::new(),
    }
}

/// The ids of the outbox rows waiting, oldest first.
async fn queued(outbox: &SqlOutbox) -> Vec<i64> {
    let rows = outbox.pending(100).await.unwrap();
    rows.iter().map(|r| r.id).collect()
}

fn event(id: i64) -> OutboxRow {
    OutboxRow {
        id,
        payload: vec![id as u8],
    }
}

#[tokio::test]
async fn append_stores_message_raises_max_seq_and_queues_the_event() {
    for (backend, store, outbox) in stores().await {
        store.append(&message(10, 1, "a"), event(10)).await.unwrap();
        store.append(&message(11, 2, "b"), event(11)).await.unwrap();
        assert_eq!(store.max_seq("d:1:2").await.unwrap(), 2, "{backend:?}");
        assert_eq!(
            store.message("d:1:2", 1).await.unwrap(),
            Some(message(10, 1, "a")),
            "{backend:?}"
        );
        let sent = store.find_sent(1, "b").await.unwrap().unwrap();
        assert_eq!((sent.msg_id, sent.seq), (11, 2));
        assert!(
            store.find_sent(2, "a").await.unwrap().is_none(),
            "client ids are per sender"
        );
        let queued = queued(&outbox).await;
        assert_eq!(queued, vec![10, 11], "{backend:?}");
    }
}

#[tokio::test]
async fn a_seq_at_or_below_the_committed_max_is_refused_and_stores_nothing() {
    for (backend, store, outbox) in stores().await {
        store.append(&message(10, 3, "a"), event(10)).await.unwrap();
        for (msg_id, seq) in [(11, 2), (12, 3)] {
            let behind = store
                .append(&message(msg_id, seq, &format!("m{msg_id}")), event(msg_id))
                .await
                .unwrap_err();
            assert!(
                matches!(behind, StoreError::Unavailable(_)),
                "{backend:?}: seq {seq}: {behind:?}"
            );
            assert!(
                store
                    .find_sent(1, &format!("m{msg_id}"))
                    .await
                    .unwrap()
                    .is_none(),
                "{backend:?}: seq {seq} stored"
            );
        }
        // Behind in one conversation holds nothing back in another.
        let other = Message {
            conversation_id: "d:1:3".into(),
            ..message(13, 1, "c")
        };
        store.append(&other, event(13)).await.unwrap();
        assert_eq!(store.max_seq("d:1:2").await.unwrap(), 3, "{backend:?}");
        assert_eq!(queued(&outbox).await, vec![10, 13], "{backend:?}");
    }
}

#[tokio::test]
async fn a_batch_with_a_conversation_behind_refuses_its_sends_and_stores_the_others() {
    for (backend, store, outbox) in stores().await {
        store.append(&message(10, 3, "a"), event(10)).await.unwrap();
        let in_other = |msg_id, seq, client| Message {
            conversation_id: "d:1:3".into(),
            ..message(msg_id, seq, client)
        };
        let appends = [
            (in_other(11, 1, "b"), event(11)),
            (message(12, 2, "behind"), event(12)),
            (in_other(13, 2, "c"), event(13)),
        ];
        let outcomes = store.append_many(&appends).await.outcomes().await;
        assert!(outcomes[0].is_ok(), "{backend:?}: {outcomes:?}");
        assert!(
            matches!(outcomes[1], Err(StoreError::Unavailable(_))),
            "{backend:?}: {outcomes:?}"
        );
        assert!(outcomes[2].is_ok(), "{backend:?}: {outcomes:?}");
        assert!(
            store.find_sent(1, "behind").await.unwrap().is_none(),
            "{backend:?}"
        );
        assert_eq!(store.max_seq("d:1:2").await.unwrap(), 3, "{backend:?}");
        assert_eq!(store.max_seq("d:1:3").await.unwrap(), 2, "{backend:?}");
        assert_eq!(queued(&outbox).await, vec![10, 11, 13], "{backend:?}");
    }
}

#[tokio::test]
async fn find_sent_many_answers_each_exact_pair_in_order() {
    for (backend, store, _) in stores().await {
        let from = |msg_id, seq, sender_id, client_msg_id: &str| Message {
            sender_id,
            ..message(msg_id, seq, client_msg_id)
        };
        store.append(&from(10, 1, 1, "a"), event(10)).await.unwrap();
        store.append(&from(11, 2, 2, "b"), event(11)).await.unwrap();
        let found = store
            .find_sent_many(&[(2, "b"), (1, "b"), (2, "a"), (1, "a"), (3, "a")])
            .await
            .unwrap();
        let ids: Vec<Option<i64>> = found.iter().map(|s| s.as_ref().map(|s| s.msg_id)).collect();
        assert_eq!(
            ids,
            vec![Some(11), None, None, Some(10), None],
            "{backend:?}: only the stored pairs, never a sender with another's client id"
        );
        let sent = found[0].as_ref().unwrap();
        assert_eq!(
            (sent.conversation_id.as_str(), sent.seq, sent.server_time_ms),
            ("d:1:2", 2, 1_700_000_000_002),
            "{backend:?}"
        );
    }
}

#[tokio::test]
async fn two_replicas_writing_one_conversation_never_make_a_seq_visible_late() {
    for backend in testing::sql_backends() {
        let config = testing::fresh_sql(backend).await.unwrap();
        let mut replicas = Vec::new();
        for _ in 0..2 {
            let db = imesh_kit::sql::connect_and_migrate::<sql::Migrator>(&config)
                .await
                .unwrap();
            replicas.push(std::sync::Arc::new(SqlMessageStore::new(db)));
        }
        // Seqs 1..=100 of one conversation from one shared counter, the odd ones written
        // by one replica and the even ones by the other, each in order, both at once.
        let writers: Vec<_> = (0..2)
            .map(|r| {
                let store = replicas[r].clone();
                tokio::spawn(async move {
                    let mut stored = Vec::new();
                    for seq in (1..=100).filter(|s| s % 2 == 1 - r as i64) {
                        match store
                            .append(&message(seq, seq, &format!("r{seq}")), event(seq))
                            .await
                        {
                            Ok(()) => stored.push(seq),
                            Err(StoreError::Unavailable(_)) => {}
                            Err(e) => panic!("seq {seq}: {e:?}"),
                        }
                    }
                    stored
                })
            })
            .collect();
        let seen = testing::read_after_while(&writers, |after| {
            let reader = replicas[0].clone();
            async move {
                let page = reader.history("d:1:2", after, i64::MAX, 500, false).await;
                page.unwrap().iter().map(|m| m.seq).collect()
            }
        })
        .await;
        let mut stored = Vec::new();
        for writer in writers {
            stored.extend(writer.await.unwrap());
        }
        stored.sort_unstable();
        assert_eq!(
            seen, stored,
            "{backend:?}: the reader stepped over a stored seq"
        );
        assert!(
            stored.len() >= 50,
            "{backend:?}: only {} of 100 stored",
            stored.len()
        );
    }
}

#[tokio::test]
async fn a_repeated_client_msg_id_is_a_conflict_and_stores_nothing() {
    for (backend, store, outbox) in stores().await {
        store.append(&message(10, 1, "a"), event(10)).await.unwrap();
        let same_client_id = store
            .append(&message(12, 2, "a"), event(12))
            .await
            .unwrap_err();
        assert!(
            matches!(same_client_id, StoreError::Conflict(_)),
            "{backend:?}: {same_client_id:?}"
        );
        assert_eq!(store.max_seq("d:1:2").await.unwrap(), 1, "{backend:?}");
        assert_eq!(
            outbox.pending(10).await.unwrap().len(),
            1,
            "{backend:?}: no outbox row for a failed append"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_commit_together_and_a_conflict_refuses_only_its_own() {
    for (backend, store, outbox) in stores().await {
        let store = std::sync::Arc::new(store);
        // Three senders queueing 20 messages each, in seq order, to a conversation of
        // their own, at once; two repeat another's client_msg_id (client ids are per
        // sender, and every message here is from user 1).
        let client_msg_id = |conversation: i64, seq: i64| match (conversation, seq) {
            (3, 10) => "m-2-7".to_owned(),
            (4, 5) => "m-3-12".to_owned(),
            _ => format!("m-{conversation}-{seq}"),
        };
        let senders = (2..=4).map(|conversation| {
            let store = store.clone();
            let appends: Vec<(Message, OutboxRow)> = (1..=20)
                .map(|seq| {
                    let id = conversation * 100 + seq;
                    let message = Message {
                        conversation_id: format!("d:1:{conversation}"),
                        ..message(id, seq, &client_msg_id(conversation, seq))
                    };
                    (message, event(id))
                })
                .collect();
            tokio::spawn(async move { store.append_many(&appends).await.outcomes().await })
        });
        let outcomes = futures::future::join_all(senders).await;
        let mut refused = Vec::new();
        for (conversation, outcomes) in (2..=4).zip(outcomes) {
            for (seq, outcome) in (1..=20).zip(outcomes.unwrap()) {
                match outcome {
                    Ok(()) => {}
                    Err(StoreError::Conflict(_)) => refused.push(client_msg_id(conversation, seq)),
                    Err(e) => panic!("{backend:?}: d:1:{conversation} seq {seq}: {e:?}"),
                }
            }
        }
        // Whichever of each repeated pair came second is refused; nothing else is.
        refused.sort();
        assert_eq!(refused, vec!["m-2-7", "m-3-12"], "{backend:?}");
        assert_eq!(outbox.pending(100).await.unwrap().len(), 58, "{backend:?}");
    }
}

#[tokio::test]
async fn history_reads_a_seq_window_newest_first() {
    for (backend, store, _) in stores().await {
        for seq in 1..=5 {
            store
                .append(
                    &message(100 + seq, seq, &format!("h{seq}")),
                    event(100 + seq),
                )
                .await
                .unwrap();
        }
        let seqs = |page: Vec<Message>| page.into_iter().map(|m| m.seq).collect::<Vec<_>>();
        assert_eq!(
            seqs(store.history("d:1:2", 1, 4, 10, true).await.unwrap()),
            vec![4, 3, 2],
            "{backend:?}"
        );
        assert_eq!(
            seqs(store.history("d:1:2", 0, i64::MAX, 2, true).await.unwrap()),
            vec![5, 4],
            "{backend:?}"
        );
        assert_eq!(
            seqs(store.history("d:1:2", 2, i64::MAX, 2, false).await.unwrap()),
            vec![3, 4],
            "catching up, oldest first: {backend:?}"
        );
        assert!(
            store
                .history("d:1:3", 0, i64::MAX, 10, true)
                .await
                .unwrap()
                .is_empty(),
            "{backend:?}"
        );
    }
}

#[tokio::test]
async fn every_content_kind_and_its_mentions_round_trip_on_every_backend() {
    let contents = [
        Content::Custom(r#"{"card":1}"#.into()),
        Content::Media(
            MediaKind::Video,
            Media {
                url: "https://cdn.example.com/v.mp4".into(),
                size_bytes: 1 << 20,
                mime_type: "video/mp4".into(),
                width: 1280,
                height: 720,
                duration_ms: 9000,
                thumbnail_url: "https://cdn.example.com/v.jpg".into(),
                ..Media::default()
            },
        ),
        Content::Notice(Notice {
            code: "group_renamed".into(),
            text: "Renamed to Ops".into(),
            json: String::new(),
        }),
    ];
    for (backend, store, _) in stores().await {
        for (i, content) in contents.iter().enumerate() {
            let seq = i as i64 + 1;
            let sent = Message {
                content: content.clone(),
                mentions: Mentions {
                    users: vec![2, 30_000_000_000],
                    all: i == 1,
                },
                receipt_bound: 7 * i as u32,
                ..message(seq, seq, &format!("k{seq}"))
            };
            store.append(&sent, event(seq)).await.unwrap();
            let read = store.message("d:1:2", seq).await.unwrap();
            assert_eq!(read.as_ref(), Some(&sent), "{backend:?}");
        }
    }
}

#[tokio::test]
async fn an_edit_replaces_the_content_once_per_version_and_never_a_recalled_message() {
    for (backend, store, outbox) in stores().await {
        store.append(&message(20, 1, "e"), event(20)).await.unwrap();
        let edited = Content::Text("hello, edited".into());
        assert!(
            store
                .edit("d:1:2", 1, &edited, 2, 1_700_000_001_000, event(21))
                .await
                .unwrap(),
            "{backend:?}"
        );
        let stored = store.message("d:1:2", 1).await.unwrap().unwrap();
        assert_eq!(
            (stored.content, stored.version, stored.edited_at_ms),
            (edited.clone(), 2, 1_700_000_001_000),
            "{backend:?}"
        );
        // A second edit made from version 1 lost the race: nothing changes, nothing queued.
        let stale = store
            .edit("d:1:2", 1, &Content::Text("stale".into()), 2, 1, event(22))
            .await
            .unwrap();
        assert!(
            !stale,
            "{backend:?}: an edit from an old version is refused"
        );
        let pending = queued(&outbox).await;
        assert_eq!(pending, vec![20, 21], "{backend:?}");
        store.recall("d:1:2", 1, 1, 5, event(23)).await.unwrap();
        let after_recall = store
            .edit("d:1:2", 1, &Content::Text("again".into()), 3, 6, event(24))
            .await
            .unwrap();
        assert!(
            !after_recall,
            "{backend:?}: a recalled message is not edited"
        );
        let recalled = store.message("d:1:2", 1).await.unwrap().unwrap();
        assert_eq!(
            recalled.content,
            Content::Text(String::new()),
            "{backend:?}"
        );
    }
}

#[tokio::test]
async fn a_reply_and_a_forward_origin_are_stored_and_recalls_among_seqs_are_found() {
    for (backend, store, _) in stores().await {
        let quoted = message(30, 1, "q");
        let reply = Message {
            reply: Some(Reply {
                seq: 1,
                sender_id: 1,
                excerpt: "hello 1".into(),
                recalled: false,
            }),
            forwarded: Some(Forwarded {
                msg_id: 7,
                sender_id: 9,
                server_time_ms: 1_600_000_000_000,
            }),
            ..message(31, 2, "r")
        };
        store.append(&quoted, event(30)).await.unwrap();
        store.append(&reply, event(31)).await.unwrap();
        let stored = store.message("d:1:2", 2).await.unwrap().unwrap();
        assert_eq!(
            (stored.reply, stored.forwarded),
            (reply.reply.clone(), reply.forwarded),
            "{backend:?}"
        );
        let none = store.recalled_among("d:1:2", &[1, 2]).await.unwrap();
        assert!(none.is_empty(), "{backend:?}");
        store.recall("d:1:2", 1, 1, 5, event(32)).await.unwrap();
        let recalled = store.recalled_among("d:1:2", &[1, 2, 3]).await.unwrap();
        assert_eq!(recalled, [1].into(), "{backend:?}");
    }
}

#[tokio::test]
async fn pins_are_kept_once_each_up_to_the_bound_newest_first() {
    for (backend, store, outbox) in stores().await {
        for seq in 1..=3 {
            store
                .append(&message(40 + seq, seq, &format!("p{seq}")), event(40 + seq))
                .await
                .unwrap();
        }
        let pin = |seq, at| Pin {
            seq,
            pinned_by: 2,
            pinned_at_ms: at,
        };
        let pinned = store.pin("d:1:2", pin(1, 100), 2, event(50)).await.unwrap();
        let again = store.pin("d:1:2", pin(1, 101), 2, event(51)).await.unwrap();
        let second = store.pin("d:1:2", pin(2, 102), 2, event(52)).await.unwrap();
        let third = store.pin("d:1:2", pin(3, 103), 2, event(53)).await.unwrap();
        assert_eq!(
            (pinned, again, second, third),
            (
                PinOutcome::Pinned,
                PinOutcome::AlreadyPinned,
                PinOutcome::Pinned,
                PinOutcome::Full
            ),
            "{backend:?}"
        );
        assert_eq!(
            store.pins("d:1:2").await.unwrap(),
            vec![pin(2, 102), pin(1, 100)],
            "{backend:?}: newest first"
        );
        assert!(
            store.unpin("d:1:2", 1, event(54)).await.unwrap(),
            "{backend:?}"
        );
        assert!(
            !store.unpin("d:1:2", 1, event(55)).await.unwrap(),
            "{backend:?}"
        );
        let queued = queued(&outbox).await;
        assert_eq!(
            queued,
            vec![41, 42, 43, 50, 52, 54],
            "{backend:?}: one event per change"
        );
        let at = store.messages_at("d:1:2", &[3, 1, 9]).await.unwrap();
        assert_eq!(
            at.iter().map(|m| m.seq).collect::<Vec<_>>(),
            vec![1, 3],
            "{backend:?}"
        );
    }
}

#[tokio::test]
async fn hidden_messages_and_a_cleared_history_are_one_users_and_a_clear_never_goes_back() {
    for (backend, store, outbox) in stores().await {
        let hide = |seqs: Vec<i64>, cleared_seq| Hidden {
            conversation_id: "d:1:2".into(),
            user: 1,
            seqs,
            cleared_seq,
        };
        store.hide(&hide(vec![3, 5], 0), event(60)).await.unwrap();
        store.hide(&hide(vec![5], 0), event(61)).await.unwrap();
        store.hide(&hide(Vec::new(), 2), event(62)).await.unwrap();
        store.hide(&hide(Vec::new(), 1), event(63)).await.unwrap();
        let (cleared, seqs) = store.hidden_for(1, "d:1:2", 0, 10).await.unwrap();
        assert_eq!((cleared, seqs), (2, [3, 5].into()), "{backend:?}");
        let (_, in_range) = store.hidden_for(1, "d:1:2", 3, 4).await.unwrap();
        assert!(
            in_range.is_empty(),
            "{backend:?}: only seqs in (after, up_to]"
        );
        let (cleared, seqs) = store.hidden_for(2, "d:1:2", 0, 10).await.unwrap();
        assert_eq!(
            (cleared, seqs.len()),
            (0, 0),
            "{backend:?}: the peer's view is untouched"
        );
        assert_eq!(outbox.pending(10).await.unwrap().len(), 4, "{backend:?}");
    }
}

fn reaction(user_id: i64, emoji: &str, added: bool) -> ReactionChange {
    ReactionChange {
        conversation_id: "d:1:2".into(),
        seq: 1,
        emoji: emoji.into(),
        user_id,
        added,
        at_ms: 1_700_000_000_000,
    }
}

fn count(emoji: &str, count: i64, mine: bool) -> ReactionCount {
    ReactionCount {
        emoji: emoji.into(),
        count,
        mine,
    }
}

#[tokio::test]
async fn reactions_count_once_per_user_and_emoji_and_mine_is_the_readers() {
    for (backend, store, outbox) in stores().await {
        store.append(&message(10, 1, "a"), event(10)).await.unwrap();
        // Two emojis outside the BMP, which MySQL's default collations compare as equal.
        let steps = [
            (reaction(1, "👍", true), ReactOutcome::Changed),
            (reaction(2, "👍", true), ReactOutcome::Changed),
            (reaction(2, "😀", true), ReactOutcome::Changed),
            (reaction(1, "👍", true), ReactOutcome::Unchanged),
            (reaction(3, "😀", false), ReactOutcome::Unchanged),
        ];
        for (id, (change, outcome)) in (20..).zip(steps) {
            let got = store.react(&change, 20, Some(event(id))).await.unwrap();
            assert_eq!(got, outcome, "{backend:?}: {change:?}");
        }
        let counts = store.reactions("d:1:2", &[1, 2], 1).await.unwrap();
        assert_eq!(
            counts.get(&1),
            Some(&vec![count("👍", 2, true), count("😀", 1, false)]),
            "{backend:?}: most reacted first; mine for user 1"
        );
        assert!(
            !counts.contains_key(&2),
            "{backend:?}: no reactions, no entry"
        );
        assert_eq!(
            store.reactors("d:1:2", 1, "👍", 0, 10).await.unwrap(),
            vec![1, 2]
        );
        assert_eq!(
            store.reactors("d:1:2", 1, "👍", 1, 10).await.unwrap(),
            vec![2],
            "{backend:?}: a page after user 1"
        );
        for (id, change) in (30..).zip([reaction(2, "👍", false), reaction(2, "😀", false)]) {
            assert_eq!(
                store.react(&change, 20, Some(event(id))).await.unwrap(),
                ReactOutcome::Changed
            );
        }
        let counts = store.reactions("d:1:2", &[1], 0).await.unwrap();
        assert_eq!(
            counts.get(&1),
            Some(&vec![count("👍", 1, false)]),
            "{backend:?}: an emoji nobody holds any more is gone"
        );
        let queued = queued(&outbox).await;
        assert_eq!(
            queued,
            vec![10, 20, 21, 22, 30, 31],
            "{backend:?}: one event per change, none for what changed nothing"
        );
    }
}

#[tokio::test]
async fn concurrent_reactions_keep_the_emoji_bound_and_every_count() {
    for (backend, store, _) in stores().await {
        store.append(&message(10, 1, "a"), event(10)).await.unwrap();
        let store = std::sync::Arc::new(store);
        let tries = (0..8).map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let change = reaction(100 + i, &format!("e{i}"), true);
                store.react(&change, 3, Some(event(100 + i))).await.unwrap()
            })
        });
        let outcomes = futures::future::join_all(tries).await;
        let changed = outcomes
            .iter()
            .filter(|o| *o.as_ref().unwrap() == ReactOutcome::Changed)
            .count();
        assert_eq!(
            changed, 3,
            "{backend:?}: three emojis fit, the rest are Full"
        );
        let same = (0..8).map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .react(&reaction(200 + i, "👍", true), 30, Some(event(200 + i)))
                    .await
                    .unwrap()
            })
        });
        futures::future::join_all(same).await;
        let counts = store.reactions("d:1:2", &[1], 0).await.unwrap();
        let thumbs = counts[&1].iter().find(|c| c.emoji == "👍").unwrap();
        assert_eq!(thumbs.count, 8, "{backend:?}: no lost update");
        assert_eq!(
            store
                .react(&reaction(9, "new", true), 4, None)
                .await
                .unwrap(),
            ReactOutcome::Full,
            "{backend:?}: 3 + 👍 make 4"
        );
    }
}

#[tokio::test]
async fn a_moved_mark_is_forgotten_only_at_the_count_it_was_read_at() {
    for (backend, store, outbox) in stores().await {
        store.append(&message(10, 1, "a"), event(10)).await.unwrap();
        store
            .react(&reaction(1, "a", true), 20, None)
            .await
            .unwrap();
        store
            .react(&reaction(2, "a", true), 20, None)
            .await
            .unwrap();
        let moved = store.moved_reactions(10).await.unwrap();
        assert_eq!(moved.len(), 1, "{backend:?}");
        assert_eq!((moved[0].seq, moved[0].changes), (1, 2), "{backend:?}");
        store
            .react(&reaction(3, "a", true), 20, None)
            .await
            .unwrap();
        store.forget_moved(&moved, vec![event(50)]).await.unwrap();
        let still = store.moved_reactions(10).await.unwrap();
        assert_eq!(
            still.iter().map(|m| m.changes).collect::<Vec<_>>(),
            vec![3],
            "{backend:?}: a change after the read keeps its mark"
        );
        store.forget_moved(&still, vec![event(51)]).await.unwrap();
        assert!(store.moved_reactions(10).await.unwrap().is_empty());
        let queued = queued(&outbox).await;
        assert_eq!(
            queued,
            vec![10, 50, 51],
            "{backend:?}: flushes queue their events"
        );
    }
}

#[tokio::test]
async fn search_finds_text_holding_every_word_within_its_scope_and_follows_edits_and_recalls() {
    use crate::domain::SearchScope;
    for (backend, store, _) in stores().await {
        let said = |msg_id, conversation: &str, seq, text: &str| Message {
            conversation_id: conversation.into(),
            content: Content::Text(text.into()),
            ..message(msg_id, seq, &format!("c{msg_id}"))
        };
        let custom = Message {
            content: Content::Custom("{\"pizza\":\"tonight\"}".into()),
            ..message(13, 3, "c13")
        };
        for (m, id) in [
            (said(11, "d:1:2", 1, "Pizza TONIGHT at eight?"), 11),
            (said(12, "d:1:2", 2, "no pizza for me"), 12),
            (custom, 13),
            (said(14, "g:7", 1, "pizza party"), 14),
            (said(15, "d:3:4", 1, "pizza elsewhere"), 15),
            (said(16, "g:8", 1, "pizza in a group user 1 left"), 16),
        ] {
            store.append(&m, event(id)).await.unwrap();
        }
        let words = |text: &str| -> Vec<String> { text.split(' ').map(String::from).collect() };
        let mine = SearchScope::User {
            user: 1,
            groups: vec![7],
        };
        let ids = |found: Vec<Message>| -> Vec<i64> { found.iter().map(|m| m.msg_id).collect() };
        let search = |terms: Vec<String>, scope: SearchScope, before| {
            let store = store.clone();
            async move { ids(store.search(&terms, &scope, before, 10).await.unwrap()) }
        };
        assert_eq!(
            search(words("pizza"), mine.clone(), 0).await,
            vec![14, 12, 11],
            "{backend:?}: newest first, the user's conversations only, text only"
        );
        assert_eq!(
            search(words("pizza tonight"), mine.clone(), 0).await,
            vec![11],
            "{backend:?}: every word, any case"
        );
        assert_eq!(
            search(words("pizza"), mine.clone(), 12).await,
            vec![11],
            "{backend:?}: below the cursor"
        );
        let later = SearchScope::Conversation {
            conversation_id: "d:1:2".into(),
            after: 1,
            up_to: i64::MAX,
        };
        assert_eq!(
            search(words("pizza"), later, 0).await,
            vec![12],
            "{backend:?}: within the seq range"
        );
        store.recall("d:1:2", 2, 1, 5, event(20)).await.unwrap();
        let burgers = Content::Text("burgers tonight".into());
        store
            .edit("d:1:2", 1, &burgers, 2, 6, event(21))
            .await
            .unwrap();
        assert_eq!(
            search(words("pizza"), mine.clone(), 0).await,
            vec![14],
            "{backend:?}: recalled and edited away"
        );
        assert_eq!(
            search(words("burgers"), mine, 0).await,
            vec![11],
            "{backend:?}: the edit is found"
        );
    }
}

/// The msg ids SQLite's FTS5 index holds for `word`, read without a search (which would
/// index what is pending first).
async fn indexed(db: &sea_orm::DatabaseConnection, word: &str) -> Vec<i64> {
    use sea_orm::ConnectionTrait as _;
    let sql = "SELECT rowid FROM message_search WHERE message_search MATCH ? ORDER BY rowid";
    let statement = sea_orm::Statement::from_sql_and_values(
        sea_orm::DatabaseBackend::Sqlite,
        sql,
        [word.into()],
    );
    let rows = db.query_all_raw(statement).await.unwrap();
    rows.iter()
        .map(|r| r.try_get::<i64>("", "rowid").unwrap())
        .collect()
}

/// A store on a fresh SQLite database, and its connection.
async fn sqlite_store() -> (sea_orm::DatabaseConnection, SqlMessageStore) {
    let config = testing::fresh_sql(testing::Backend::Sqlite).await.unwrap();
    let db = imesh_kit::sql::connect_and_migrate::<sql::Migrator>(&config)
        .await
        .unwrap();
    (db.clone(), SqlMessageStore::new(db))
}

#[tokio::test]
async fn sqlite_indexes_for_search_behind_the_writes_taking_pending_messages_as_they_stand() {
    let (db, store) = sqlite_store().await;
    for (msg_id, seq, text) in [
        (31, 1, "wasabi peas"),
        (32, 2, "wasabi chips"),
        (33, 3, "wasabi nuts"),
    ] {
        let said = Message {
            content: Content::Text(text.into()),
            ..message(msg_id, seq, &format!("c{msg_id}"))
        };
        store.append(&said, event(msg_id)).await.unwrap();
    }
    // Most likely still pending (indexing lingers after a commit); either way the index
    // must end up holding each message as it stands.
    let salted = Content::Text("salted chips".into());
    store
        .edit("d:1:2", 2, &salted, 2, 5, event(40))
        .await
        .unwrap();
    store.recall("d:1:2", 3, 1, 6, event(41)).await.unwrap();
    testing::until_async("indexing empties the pending list without a search", || {
        let db = db.clone();
        async move { pending(&db).await == 0 }
    })
    .await;
    assert_eq!(
        indexed(&db, "wasabi").await,
        vec![31],
        "the edited and the recalled are out"
    );
    assert_eq!(indexed(&db, "salted").await, vec![32], "the edit is in");
    let again = Content::Text("wasabi again".into());
    store
        .edit("d:1:2", 1, &again, 2, 7, event(42))
        .await
        .unwrap();
    assert_eq!(
        indexed(&db, "peas").await,
        Vec::<i64>::new(),
        "an indexed message's edit reindexes it"
    );
    assert_eq!(indexed(&db, "again").await, vec![31]);
}

#[tokio::test]
async fn sqlite_indexes_a_backlog_larger_than_one_index_transaction_takes() {
    let (db, store) = sqlite_store().await;
    // 600 messages: more than two index transactions' worth, written in three commits.
    let appends: Vec<(Message, OutboxRow)> = (1..=600)
        .map(|seq| {
            let said = Message {
                content: Content::Text(format!("kelp {seq}")),
                ..message(seq, seq, &format!("k{seq}"))
            };
            (said, event(seq))
        })
        .collect();
    let outcomes = store.append_many(&appends).await.outcomes().await;
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    testing::until_async("indexing empties the pending list without a search", || {
        let db = db.clone();
        async move { pending(&db).await == 0 }
    })
    .await;
    assert_eq!(indexed(&db, "kelp").await, (1..=600).collect::<Vec<i64>>());
}

/// How many messages wait to be indexed for search.
async fn pending(db: &sea_orm::DatabaseConnection) -> i64 {
    use sea_orm::ConnectionTrait as _;
    let sql = "SELECT count(*) AS n FROM message_search_pending";
    let row = db.query_one_raw(sea_orm::Statement::from_string(
        sea_orm::DatabaseBackend::Sqlite,
        sql,
    ));
    row.await.unwrap().unwrap().try_get::<i64>("", "n").unwrap()
}

fn upload(key: &str, created_at_ms: i64) -> crate::domain::Upload {
    crate::domain::Upload {
        key: key.into(),
        owner: 1,
        kind: crate::domain::UploadKind::Image,
        mime_type: "image/png".into(),
        size_bytes: 10,
        created_at_ms,
        stored: false,
    }
}

fn with_object(mut m: Message, key: &str) -> Message {
    m.content = Content::Media(
        MediaKind::Image,
        Media {
            object_key: key.into(),
            size_bytes: 10,
            mime_type: "image/png".into(),
            width: 1,
            height: 1,
            ..Media::default()
        },
    );
    m
}

#[tokio::test]
async fn uploads_are_unreferenced_until_a_message_holds_them_and_again_once_recalled() {
    use crate::domain::FileStore;
    let [a, b, c] = ["1/aa", "1/bb", "1/cc"];
    for (backend, store, _) in stores().await {
        store
            .add_uploads(&[upload(a, 100), upload(b, 200), upload(c, 300)])
            .await
            .unwrap();
        store.mark_stored(b).await.unwrap();
        let found = store.uploads(&[b, "1/none"]).await.unwrap();
        assert_eq!(
            found,
            vec![crate::domain::Upload {
                stored: true,
                ..upload(b, 200)
            }],
            "{backend:?}"
        );

        store
            .append(&with_object(message(10, 1, "m1"), a), event(10))
            .await
            .unwrap();
        store
            .append(&with_object(message(11, 2, "m2"), b), event(11))
            .await
            .unwrap();
        assert_eq!(
            store.unreferenced(1_000, 10).await.unwrap(),
            vec![c],
            "{backend:?}"
        );
        assert_eq!(
            store.unreferenced(300, 10).await.unwrap(),
            Vec::<String>::new(),
            "created before"
        );
        assert!(
            !store.forget_unreferenced(a).await.unwrap(),
            "{backend:?}: a is referenced"
        );

        assert!(store.recall("d:1:2", 1, 1, 5, event(12)).await.unwrap());
        let edited = with_object(message(11, 2, "m2"), c).content;
        assert!(
            store
                .edit("d:1:2", 2, &edited, 2, 6, event(13))
                .await
                .unwrap()
        );
        assert_eq!(
            store.unreferenced(1_000, 10).await.unwrap(),
            vec![a, b],
            "{backend:?}"
        );
        assert_eq!(
            store.unreferenced(1_000, 1).await.unwrap(),
            vec![a],
            "oldest first, bounded"
        );
        assert!(store.forget_unreferenced(a).await.unwrap(), "{backend:?}");
        assert!(
            !store.forget_unreferenced(a).await.unwrap(),
            "{backend:?}: once"
        );
        assert!(store.uploads(&[a]).await.unwrap().is_empty(), "{backend:?}");
    }
}
