//! Read watermarks, unread counts, mentions and the conversation list.

use imesh_protos::sync as pb;
use prost::Message as _;

use super::*;

/// Message `seq` of `conversation` from `sender` to `recipients`, optionally mentioning.
fn message(
    conversation: &str,
    seq: i64,
    sender: i64,
    recipients: &[i64],
    mentioned: &[i64],
    mention_all: bool,
) -> IncomingEvent {
    IncomingEvent {
        event_id: format!("m:{conversation}:{seq}"),
        recipients: recipients.to_vec(),
        payload: Bytes::from(format!("{conversation}#{seq}")),
        read_fanout_group: None,
        mark: Some(Mark {
            conversation_id: conversation.into(),
            seq,
            change: Change::Message {
                sender,
                time_ms: seq,
                mentioned: mentioned.to_vec(),
                mention_all,
                receipt_bound: 0,
            },
        }),
    }
}

fn mark(conversation: &str, read_seq: i64) -> ReadMark {
    ReadMark {
        conversation_id: conversation.into(),
        read_seq,
    }
}

async fn unread(inboxes: &Inboxes, user: i64) -> Vec<(String, i64, bool)> {
    let page = inboxes.conversations(user, "", 0).await.unwrap();
    page.conversations
        .iter()
        .map(|c| (c.conversation_id.clone(), c.unread(), c.mentioned))
        .collect()
}

/// The ReadMoved events in `user`'s inbox, as (conversation, reader, read_seq).
async fn read_events(inboxes: &Inboxes, user: i64) -> Vec<(String, i64, i64)> {
    let (entries, _) = inboxes.pull(user, 0, 500).await.unwrap();
    entries
        .iter()
        .filter_map(
            |e| match pb::SyncEvent::decode(e.payload.clone()).ok()?.kind? {
                pb::sync_event::Kind::Read(r) => Some((r.conversation_id, r.user_id, r.read_seq)),
                _ => None,
            },
        )
        .collect()
}

#[tokio::test]
async fn unread_is_latest_minus_read_and_marks_only_ever_raise_it_to_the_latest() {
    let (inboxes, _) = inboxes().await;
    for seq in 1..=3 {
        let event = message("d:1:2", seq, 1, &[1, 2], &[], false);
        inboxes.append(vec![event]).await.unwrap();
    }
    assert_eq!(unread(&inboxes, 2).await, vec![("d:1:2".into(), 3, false)]);
    assert_eq!(
        unread(&inboxes, 1).await,
        vec![("d:1:2".into(), 0, false)],
        "own messages are read"
    );
    let stored = inboxes.mark_read(2, vec![mark("d:1:2", 2)]).await.unwrap();
    assert_eq!(stored, vec![mark("d:1:2", 2)]);
    let stale = inboxes.mark_read(2, vec![mark("d:1:2", 1)]).await.unwrap();
    assert_eq!(
        stale,
        vec![mark("d:1:2", 2)],
        "a stale mark moves nothing back"
    );
    let ahead = inboxes
        .mark_read(2, vec![mark("d:1:2", 99), mark("d:8:9", 5)])
        .await
        .unwrap();
    assert_eq!(
        ahead,
        vec![mark("d:1:2", 3)],
        "clamped to the latest; strangers left out"
    );
    let page = inboxes.conversations(2, "", 0).await.unwrap();
    assert_eq!((page.conversations[0].unread(), page.total_unread), (0, 0));
    let page = inboxes.conversations(1, "", 0).await.unwrap();
    assert_eq!(
        page.conversations[0].peer_read_seq, 3,
        "the peer's watermark"
    );
}

#[tokio::test]
async fn a_moved_watermark_reaches_the_readers_devices_and_the_direct_peer_once_per_seq() {
    let (inboxes, _) = inboxes().await;
    inboxes
        .append(vec![message("d:1:2", 1, 1, &[1, 2], &[], false)])
        .await
        .unwrap();
    inboxes
        .append(vec![message("g:7", 1, 1, &[1, 2, 3], &[], false)])
        .await
        .unwrap();
    for _ in 0..3 {
        inboxes
            .mark_read(2, vec![mark("d:1:2", 1), mark("g:7", 1)])
            .await
            .unwrap();
    }
    let mut own = read_events(&inboxes, 2).await;
    own.sort();
    assert_eq!(
        own,
        vec![("d:1:2".into(), 2, 1), ("g:7".into(), 2, 1)],
        "replays dedup"
    );
    assert_eq!(read_events(&inboxes, 1).await, vec![("d:1:2".into(), 2, 1)]);
    assert!(
        read_events(&inboxes, 3).await.is_empty(),
        "group reads stay private"
    );
}

#[tokio::test]
async fn mentions_and_at_all_flag_a_conversation_until_read_past_them() {
    let (inboxes, _) = inboxes().await;
    let members = [1, 2, 3, 4];
    inboxes
        .append(vec![message("g:7", 1, 1, &members, &[3], false)])
        .await
        .unwrap();
    inboxes
        .append(vec![message("g:7", 2, 2, &members, &[], true)])
        .await
        .unwrap();
    assert_eq!(unread(&inboxes, 3).await, vec![("g:7".into(), 2, true)]);
    assert_eq!(
        unread(&inboxes, 1).await,
        vec![("g:7".into(), 1, true)],
        "@all"
    );
    assert_eq!(
        unread(&inboxes, 2).await,
        vec![("g:7".into(), 0, false)],
        "sending reads up to it"
    );
    inboxes.mark_read(1, vec![mark("g:7", 2)]).await.unwrap();
    assert_eq!(unread(&inboxes, 1).await, vec![("g:7".into(), 0, false)]);
    // A member who joins later starts just before the first message they receive.
    inboxes
        .append(vec![message("g:7", 3, 1, &[1, 2, 3, 4, 5], &[], false)])
        .await
        .unwrap();
    assert_eq!(unread(&inboxes, 5).await, vec![("g:7".into(), 1, false)]);
}

#[tokio::test]
async fn the_list_pages_with_tokens_and_refuses_bad_ones_and_bad_marks() {
    let (inboxes, _) = inboxes().await;
    for (i, conversation) in ["d:1:2", "d:1:3", "g:4"].into_iter().enumerate() {
        let event = message(conversation, i as i64 + 1, 9, &[1], &[], false);
        inboxes.append(vec![event]).await.unwrap();
    }
    let first = inboxes.conversations(1, "", 2).await.unwrap();
    let token = first.next.expect("a second page").token();
    let second = inboxes.conversations(1, &token, 2).await.unwrap();
    let ids: Vec<_> = first
        .conversations
        .iter()
        .chain(&second.conversations)
        .map(|c| c.conversation_id.as_str())
        .collect();
    assert_eq!(ids, vec!["g:4", "d:1:3", "d:1:2"]);
    assert!(second.next.is_none());
    assert_eq!(first.total_unread, 3);
    for (token, limit, field) in [("nope", 0, "page_token"), ("", 101, "limit")] {
        match inboxes.conversations(1, token, limit).await {
            Err(Error::Invalid { field: f, .. }) => assert_eq!(f, field),
            other => panic!("expected invalid {field}, got {other:?}"),
        }
    }
    let cases = [
        (vec![], "marks"),
        (vec![mark("", 1)], "marks.conversation_id"),
        (vec![mark("d:1:2", -1)], "marks.read_seq"),
    ];
    for (marks, field) in cases {
        match inboxes.mark_read(1, marks).await {
            Err(Error::Invalid { field: f, .. }) => assert_eq!(f, field),
            other => panic!("expected invalid {field}, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn read_fanout_writes_no_inbox_entries_and_members_open_their_state_by_reading() {
    let (inboxes, recorder) = inboxes().await;
    for seq in 1..=3 {
        let mentioned: &[i64] = if seq == 2 { &[3] } else { &[] };
        let event = IncomingEvent {
            recipients: vec![],
            read_fanout_group: Some(70),
            ..message("g:70", seq, 1, &[], mentioned, false)
        };
        inboxes.append(vec![event]).await.unwrap();
    }
    assert!(recorder.0.lock().is_empty(), "nothing to push per member");
    let hints: Vec<(i64, pb::ConversationAdvanced)> = recorder
        .1
        .lock()
        .iter()
        .map(
            |(group, event)| match pb::SyncEvent::decode(event.clone()).unwrap().kind {
                Some(pb::sync_event::Kind::Advanced(a)) => (*group, a),
                other => panic!("not a hint: {other:?}"),
            },
        )
        .collect();
    let latest: Vec<(i64, i64)> = hints.iter().map(|(g, a)| (*g, a.latest_seq)).collect();
    assert_eq!(
        latest,
        vec![(70, 1), (70, 2), (70, 3)],
        "one live hint per append"
    );
    assert!(inboxes.pull(2, 0, 10).await.unwrap().0.is_empty());
    assert_eq!(
        unread(&inboxes, 1).await,
        vec![("g:70".into(), 0, false)],
        "the sender"
    );
    assert_eq!(
        unread(&inboxes, 3).await,
        vec![("g:70".into(), 2, true)],
        "mentioned at 2"
    );
    assert!(
        unread(&inboxes, 2).await.is_empty(),
        "no state until member 2 reads"
    );
    let opened = inboxes.mark_read(2, vec![mark("g:70", 1)]).await.unwrap();
    assert_eq!(opened, vec![mark("g:70", 1)]);
    assert_eq!(unread(&inboxes, 2).await, vec![("g:70".into(), 2, false)]);
    let stranger = inboxes.mark_read(9, vec![mark("g:70", 3)]).await.unwrap();
    assert!(stranger.is_empty(), "a non-member opens nothing");
    assert!(unread(&inboxes, 9).await.is_empty());
    let both = IncomingEvent {
        read_fanout_group: Some(70),
        ..message("g:70", 4, 1, &[2], &[], false)
    };
    match inboxes.append(vec![both]).await {
        Err(Error::Invalid { field, .. }) => assert_eq!(field, "events.recipient_ids"),
        other => panic!("recipients with read fanout accepted: {other:?}"),
    }
}

#[tokio::test]
async fn settings_change_only_what_is_given_show_in_the_list_and_reach_the_users_devices() {
    let (inboxes, _) = inboxes().await;
    inboxes
        .append(vec![message("d:1:2", 1, 1, &[1, 2], &[], false)])
        .await
        .unwrap();
    let pinned = inboxes
        .update_settings(2, "d:1:2", Some(true), None)
        .await
        .unwrap();
    assert_eq!(
        pinned,
        Settings {
            pinned: true,
            muted: false
        }
    );
    let muted = inboxes
        .update_settings(2, "d:1:2", None, Some(true))
        .await
        .unwrap();
    assert_eq!(
        muted,
        Settings {
            pinned: true,
            muted: true
        },
        "pinned is kept"
    );
    let page = inboxes.conversations(2, "", 0).await.unwrap();
    assert_eq!(page.conversations[0].settings, muted);
    let page = inboxes.conversations(1, "", 0).await.unwrap();
    assert_eq!(
        page.conversations[0].settings,
        Settings::default(),
        "settings are per user"
    );
    let (entries, _) = inboxes.pull(2, 0, 10).await.unwrap();
    let events: Vec<pb::ConversationSettings> = entries
        .iter()
        .filter_map(
            |e| match pb::SyncEvent::decode(e.payload.clone()).ok()?.kind? {
                pb::sync_event::Kind::Settings(s) => Some(s),
                _ => None,
            },
        )
        .collect();
    assert_eq!(events.len(), 2);
    assert!(events[1].pinned && events[1].muted);
    assert!(matches!(
        inboxes.update_settings(2, "d:2:9", Some(true), None).await,
        Err(Error::NoConversation)
    ));
    // A member of a read-fanout group with no state yet opens one by changing settings.
    let event = IncomingEvent {
        recipients: vec![],
        read_fanout_group: Some(70),
        ..message("g:70", 1, 1, &[], &[], false)
    };
    inboxes.append(vec![event]).await.unwrap();
    inboxes
        .update_settings(4, "g:70", None, Some(true))
        .await
        .unwrap();
    assert_eq!(unread(&inboxes, 4).await, vec![("g:70".into(), 1, false)]);
}

#[tokio::test]
async fn a_removed_conversation_leaves_the_list_and_badge_until_a_newer_message_for_that_user_only()
{
    let (inboxes, _) = inboxes().await;
    inboxes
        .append(vec![
            message("d:1:2", 1, 1, &[1, 2], &[], false),
            message("d:1:2", 2, 1, &[1, 2], &[2], false),
            message("d:2:3", 1, 3, &[2, 3], &[], false),
        ])
        .await
        .unwrap();
    assert_eq!(inboxes.remove_conversation(2, "d:1:2").await.unwrap(), 2);
    assert_eq!(unread(&inboxes, 2).await, vec![("d:2:3".into(), 1, false)]);
    assert_eq!(
        inboxes.conversations(2, "", 0).await.unwrap().total_unread,
        1,
        "the badge leaves it out"
    );
    assert_eq!(
        unread(&inboxes, 1).await.len(),
        1,
        "the other member's list keeps it"
    );
    let (entries, _) = inboxes.pull(2, 0, 10).await.unwrap();
    let told = entries.iter().any(|e| {
        matches!(
            pb::SyncEvent::decode(e.payload.clone()).ok().and_then(|e| e.kind),
            Some(pb::sync_event::Kind::Removed(r)) if r.conversation_id == "d:1:2" && r.removed_seq == 2
        )
    });
    assert!(told, "the user's devices hear of it");
    assert!(
        read_events(&inboxes, 1).await.is_empty(),
        "nothing was marked read"
    );

    inboxes
        .append(vec![message("d:1:2", 3, 1, &[1, 2], &[], false)])
        .await
        .unwrap();
    let back = unread(&inboxes, 2).await;
    assert!(
        back.contains(&("d:1:2".into(), 1, false)),
        "back with only the newer message unread, the old mention gone: {back:?}"
    );
    assert_eq!(
        inboxes.remove_conversation(2, "d:1:2").await.unwrap(),
        3,
        "removed again up to its latest"
    );
    assert!(matches!(
        inboxes.remove_conversation(2, "d:2:9").await,
        Err(Error::NoConversation)
    ));
    assert!(matches!(
        inboxes.remove_conversation(2, "").await,
        Err(Error::Invalid {
            field: "conversation_id",
            ..
        })
    ));
}
