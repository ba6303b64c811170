//! The send path over a real SQLite store with in-process counters and a fake directory.

mod fanout;
mod files;
mod kinds;
mod receipts;

use std::sync::Arc;

use imesh_kit::{
    outbox::{Backlog, SqlOutbox},
    seq::{MemoryCounters, SqlCeilings},
    testing,
};

use prost::Message as _;

use super::*;
use crate::store::{
    OUTBOX_TABLE,
    blobs::{LocalBlobs, LocalConfig},
    sql::{Migrator, SqlMessageStore},
};
use imesh_kit::{config::Secret, files::LinkSigner};

/// Users 1, 2 and 3; 3 blocked 1; 2 lists 1 as a friend.
struct Users;

#[async_trait::async_trait]
impl Directory for Users {
    async fn relations(&self, pairs: &[(i64, i64)]) -> anyhow::Result<Vec<PeerRelation>> {
        Ok(pairs
            .iter()
            .map(|&(sender, peer)| PeerRelation {
                exists: [1, 2, 3].contains(&peer),
                peer_lists_sender: (peer, sender) == (2, 1),
                sender_blocked_peer: (sender, peer) == (3, 1),
                peer_blocked_sender: (peer, sender) == (3, 1),
            })
            .collect())
    }

    async fn existing(&self, users: &[i64]) -> anyhow::Result<Vec<i64>> {
        Ok(users
            .iter()
            .copied()
            .filter(|u| [1, 2, 3].contains(u))
            .collect())
    }
}

/// Three members whose map ids are below 5.
fn gated(audience: Audience) -> Gated {
    Gated {
        audience,
        member_count: 3,
        map_bound: 5,
    }
}

/// Group 7 has members 1, 2 and 3; user 3 is muted there; only 2 (an admin) may @all.
/// Group 70 is a super group (read fanout) of the same members.
struct Groups;

#[async_trait::async_trait]
impl GroupGate for Groups {
    async fn recipients(
        &self,
        group: i64,
        sender: Sender,
        needs: u32,
    ) -> anyhow::Result<GateAnswer> {
        let refused = |why, text: &str| Err((why, text.to_owned()));
        Ok(match (group, sender) {
            (7, Sender::User(3)) => refused(GroupRefusal::Forbidden, "group_id: you are muted"),
            (7, Sender::User(1)) if needs & AT_ALL != 0 => {
                refused(GroupRefusal::Forbidden, "mention_all: needs AT_ALL")
            }
            (7, Sender::User(1 | 2) | Sender::System) => Ok(gated(Audience::Users(vec![1, 2, 3]))),
            (9, Sender::User(1)) => Ok(Gated {
                member_count: 4,
                ..gated(Audience::Users(vec![1, 2, 3, 4]))
            }),
            (70, Sender::User(1 | 2) | Sender::System) => Ok(gated(Audience::Group(70))),
            _ => refused(GroupRefusal::NotFound, "group_id: no such group"),
        })
    }

    async fn audience(&self, group: i64) -> anyhow::Result<Audience> {
        Ok(match group {
            70 => Audience::Group(70),
            _ => Audience::Users(vec![1, 2, 3]),
        })
    }

    async fn members_among(&self, _: i64, _: Sender, users: &[i64]) -> anyhow::Result<Vec<i64>> {
        Ok(users
            .iter()
            .copied()
            .filter(|u| [1, 2, 3].contains(u))
            .collect())
    }

    /// User 2 moderates group 7: RECALL_OTHER and PIN.
    async fn holds(&self, group: i64, user: i64, permission: u32) -> anyhow::Result<bool> {
        Ok((group, user) == (7, 2) && permission & !(RECALL_OTHER | PIN) == 0)
    }

    /// User 1 is in groups 7 and 70, user 2 in 7; user 3 left 7.
    async fn groups_of(&self, user: i64, _: usize) -> anyhow::Result<Vec<i64>> {
        Ok(match user {
            1 => vec![7, 70],
            2 => vec![7],
            _ => vec![],
        })
    }

    async fn visibility(
        &self,
        group: i64,
        user: i64,
    ) -> anyhow::Result<Option<(i64, Option<i64>)>> {
        Ok(match (group, user) {
            (7 | 70, 1) => Some((0, None)),
            (7, 2) => Some((1, None)),
            (7, 3) => Some((0, Some(2))),
            _ => None,
        })
    }
}

async fn messages() -> (Messages, SqlOutbox) {
    messages_with(DirectPolicy::Anyone).await
}

const fn u(id: i64) -> Sender {
    Sender::User(id)
}

async fn messages_with(direct_policy: DirectPolicy) -> (Messages, SqlOutbox) {
    build(direct_policy, RateLimits::unlimited()).await
}

async fn build(direct_policy: DirectPolicy, rates: RateLimits) -> (Messages, SqlOutbox) {
    build_behind(direct_policy, rates, Backlog::default(), None).await
}

/// [`build`] with the outbox relay's backlog and a before-send hook given.
async fn build_behind(
    direct_policy: DirectPolicy,
    rates: RateLimits,
    backlog: Backlog,
    before_send: Option<BeforeSendHook>,
) -> (Messages, SqlOutbox) {
    let config = testing::fresh_sql(testing::Backend::Sqlite).await.unwrap();
    let db = imesh_kit::sql::connect_and_migrate::<Migrator>(&config)
        .await
        .unwrap();
    let seqs = SeqAllocator::new(
        Arc::new(MemoryCounters::default()),
        Arc::new(SqlCeilings::new(db.clone())),
        100,
    );
    let reads = imesh_kit::sql::readers(&config, &db).await.unwrap();
    let store = Arc::new(SqlMessageStore::new(db.clone()).reading_from(reads));
    let messages = Messages::new(
        store.clone(),
        Peers {
            relations: Arc::new(Users),
            groups: Arc::new(Groups),
            before_send,
        },
        Parts {
            seqs: Arc::new(seqs),
            ids: Arc::new(Snowflake::new(0)),
            encode: Encoders {
                message: crate::events::encode_fanout,
                recall: crate::events::encode_recall,
                edit: crate::events::encode_edit,
                pin: crate::events::encode_pin,
                hidden: crate::events::encode_hidden,
                reaction: crate::events::encode_reaction,
                reaction_counts: crate::events::encode_reaction_counts,
            },
            relay: Arc::new(Notify::new()),
            backlog,
            limits: Limits {
                max_content_bytes: 300,
                direct_policy,
                recall_window_ms: 60_000,
                edit_window_ms: 120_000,
                receipt_max_members: 3,
                max_relay_lag: std::time::Duration::from_millis(100),
                reaction_coalesce_members: 2,
            },
            rates,
            files: Files {
                store: store.clone(),
                blobs: Some(Arc::new(
                    LocalBlobs::new(
                        &LocalConfig {
                            dir: testing::scratch_dir("files").display().to_string(),
                            public_url: "http://gateway.test/files".into(),
                        },
                        LinkSigner::new(&Secret::new("test-internal-secret-0123")),
                    )
                    .unwrap(),
                )),
                rules: FileRules::default(),
            },
        },
    );
    (messages, SqlOutbox::new(db, OUTBOX_TABLE))
}

fn text(client_msg_id: &str, to: i64, body: &str) -> SendCommand {
    SendCommand {
        client_msg_id: client_msg_id.into(),
        to: Some(Target::User(to)),
        content: Some(Content::Text(body.into())),
        mentions: Mentions::default(),
        receipt: false,
        reply_to_seq: 0,
        forward: None,
    }
}

#[tokio::test]
async fn sends_get_increasing_seqs_in_one_direct_conversation_from_both_sides() {
    let (messages, outbox) = messages().await;
    let a = messages.send(u(1), text("c1", 2, "hi")).await.unwrap();
    let b = messages.send(u(2), text("c1", 1, "hello")).await.unwrap();
    assert_eq!(a.conversation_id, "d:1:2");
    assert_eq!(b.conversation_id, "d:1:2");
    assert_eq!((a.seq, b.seq), (1, 2));
    assert!(!a.duplicate && !b.duplicate);
    assert_eq!(outbox.pending(10).await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_batch_gets_seqs_in_its_order_and_answers_each_send_on_its_own() {
    let (messages, outbox) = messages().await;
    let batch = vec![
        (u(1), text("b1", 2, "one")),
        (u(2), text("b2", 1, "from the peer")),
        (u(1), text("", 2, "no key")),
        (u(1), text("b3", 2, "two")),
        (u(1), text("b4", 3, "blocked")),
        (u(1), text("b1", 2, "a retry in the same batch")),
    ];
    let outcomes = messages.send_batch(batch).await.unwrap();
    let sent = |i: usize| outcomes[i].as_ref().unwrap();
    assert_eq!((sent(0).seq, sent(1).seq, sent(3).seq), (1, 2, 3));
    assert!(matches!(
        outcomes[2],
        Err(Error::Invalid {
            field: "client_msg_id",
            ..
        })
    ));
    assert!(matches!(outcomes[4], Err(Error::Refused(_))));
    assert!(
        sent(5).duplicate && sent(5).msg_id == sent(0).msg_id,
        "{:?}",
        sent(5)
    );
    let ids: Vec<i64> = [0, 1, 3].iter().map(|i| sent(*i).msg_id).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "msg ids in batch order"
    );
    let pending: Vec<i64> = outbox
        .pending(10)
        .await
        .unwrap()
        .iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(pending, ids, "one outbox event per stored send, in order");
    let empty = messages.send_batch(Vec::new()).await.unwrap_err();
    assert!(matches!(empty, Error::Invalid { field: "sends", .. }));
}

#[tokio::test]
async fn sends_are_refused_while_delivery_is_too_far_behind() {
    let backlog = Backlog::default();
    let (messages, outbox) = build_behind(
        DirectPolicy::Anyone,
        RateLimits::unlimited(),
        backlog.clone(),
        None,
    )
    .await;
    messages.send(u(1), text("c1", 2, "hi")).await.unwrap();
    backlog.waiting_since(imesh_kit::ids::unix_ms() - 5_000);
    let refused = messages.send(u(1), text("c2", 2, "hi")).await.unwrap_err();
    assert!(matches!(refused, Error::Overloaded(_)), "{refused:?}");
    assert_eq!(outbox.pending(10).await.unwrap().len(), 1, "nothing stored");
}

#[tokio::test]
async fn a_retried_client_msg_id_returns_the_first_ack_and_stores_nothing() {
    let (messages, outbox) = messages().await;
    let first = messages.send(u(1), text("same", 2, "hi")).await.unwrap();
    let again = messages.send(u(1), text("same", 2, "hi")).await.unwrap();
    assert!(again.duplicate);
    assert_eq!(
        (again.msg_id, again.seq, again.server_time_ms),
        (first.msg_id, first.seq, first.server_time_ms)
    );
    assert_eq!(outbox.pending(10).await.unwrap().len(), 1);
}

#[tokio::test]
async fn bad_sends_name_their_field_and_store_nothing() {
    let (messages, outbox) = messages().await;
    let cases = [
        (text("", 2, "hi"), "client_msg_id"),
        (text("x", 2, "   "), "content.text"),
        (
            SendCommand {
                to: None,
                ..text("x", 2, "hi")
            },
            "to",
        ),
        (
            SendCommand {
                content: Some(Content::Custom("{nope".into())),
                ..text("x", 2, "")
            },
            "content.custom.json",
        ),
        (text("x", 1, "self"), "user_id"),
    ];
    for (command, field) in cases {
        match messages.send(u(1), command).await {
            Err(Error::Invalid { field: f, .. }) => assert_eq!(f, field),
            other => panic!("expected invalid {field}, got {other:?}"),
        }
    }
    assert!(matches!(
        messages.send(u(1), text("x", 2, &"y".repeat(301))).await,
        Err(Error::TooLarge {
            size: 301,
            limit: 300
        })
    ));
    assert!(matches!(
        messages.send(u(1), text("x", 99, "hi")).await,
        Err(Error::UnknownUser(99))
    ));
    assert!(outbox.pending(10).await.unwrap().is_empty());
}

#[tokio::test]
async fn blocked_senders_and_non_friends_under_the_friends_policy_are_refused() {
    let (messages, outbox) = messages().await;
    let refused = messages.send(u(1), text("b1", 3, "hi")).await.unwrap_err();
    assert!(
        matches!(refused, Error::Refused(m) if m.contains("does not accept")),
        "{refused:?}"
    );
    let refused = messages.send(u(3), text("b2", 1, "hi")).await.unwrap_err();
    assert!(
        matches!(refused, Error::Refused(m) if m.contains("you blocked")),
        "{refused:?}"
    );
    assert!(
        messages.send(u(2), text("ok", 1, "hi")).await.is_ok(),
        "anyone may message by default"
    );
    let (friends_only, _) = messages_with(DirectPolicy::FriendsOnly).await;
    assert!(
        friends_only.send(u(1), text("f1", 2, "hi")).await.is_ok(),
        "2 lists 1"
    );
    let refused = friends_only
        .send(u(2), text("f2", 1, "hi"))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, Error::Refused(m) if m.contains("only friends")),
        "{refused:?}"
    );
    assert_eq!(
        outbox.pending(10).await.unwrap().len(),
        1,
        "refused sends stored nothing"
    );
}

#[tokio::test]
async fn group_sends_go_to_the_members_group_svc_names_and_refusals_store_nothing() {
    let (messages, outbox) = messages().await;
    let to_group = |id: &str, group| SendCommand {
        client_msg_id: id.into(),
        to: Some(Target::Group(group)),
        content: Some(Content::Text("all".into())),
        mentions: Mentions::default(),
        receipt: false,
        reply_to_seq: 0,
        forward: None,
    };
    let sent = messages.send(u(1), to_group("g1", 7)).await.unwrap();
    assert_eq!((sent.conversation_id.as_str(), sent.seq), ("g:7", 1));
    let second = messages.send(u(2), to_group("g2", 7)).await.unwrap();
    assert_eq!(
        second.seq, 2,
        "one seq per group conversation, whoever sends"
    );
    let muted = messages.send(u(3), to_group("g3", 7)).await.unwrap_err();
    assert!(
        matches!(muted, Error::GroupRefused(GroupRefusal::Forbidden, ref m) if m.contains("muted")),
        "{muted:?}"
    );
    let unknown = messages.send(u(1), to_group("g4", 8)).await.unwrap_err();
    assert!(
        matches!(unknown, Error::GroupRefused(GroupRefusal::NotFound, _)),
        "{unknown:?}"
    );
    let rows = outbox.pending(10).await.unwrap();
    assert_eq!(rows.len(), 2, "refused sends stored nothing");
    let fanout = imesh_protos::sync::Fanout::decode(rows[0].payload.as_slice()).unwrap();
    assert_eq!(fanout.recipient_ids, vec![1, 2, 3]);
}

#[tokio::test]
async fn history_shows_each_member_only_what_they_could_see() {
    let (messages, _) = messages().await;
    for (i, sender) in [1, 2, 1, 2].into_iter().enumerate() {
        let command = SendCommand {
            client_msg_id: format!("h{i}"),
            to: Some(Target::Group(7)),
            content: Some(Content::Text(format!("m{}", i + 1))),
            mentions: Mentions::default(),
            receipt: false,
            reply_to_seq: 0,
            forward: None,
        };
        messages.send(u(sender), command).await.unwrap();
    }
    let seqs = |page: &[Message]| page.iter().map(|m| m.seq).collect::<Vec<_>>();
    let (all, more) = messages
        .history(u(1), "g:7", HistoryPage::Before(0), 0)
        .await
        .unwrap();
    assert_eq!(
        (seqs(&all), more),
        (vec![4, 3, 2, 1], false),
        "newest first"
    );
    let (older, more) = messages
        .history(u(1), "g:7", HistoryPage::Before(3), 1)
        .await
        .unwrap();
    assert_eq!(
        (seqs(&older), more),
        (vec![2], true),
        "paging back from a seq"
    );
    assert_eq!(
        seqs(
            &messages
                .history(u(2), "g:7", HistoryPage::Before(0), 0)
                .await
                .unwrap()
                .0
        ),
        vec![4, 3, 2],
        "joined at seq 1"
    );
    assert_eq!(
        seqs(
            &messages
                .history(u(3), "g:7", HistoryPage::Before(0), 0)
                .await
                .unwrap()
                .0
        ),
        vec![2, 1],
        "left at seq 2"
    );
    assert!(matches!(
        messages
            .history(u(9), "g:7", HistoryPage::Before(0), 0)
            .await,
        Err(Error::NotParticipant)
    ));
    assert!(matches!(
        messages
            .history(u(9), "d:1:2", HistoryPage::Before(0), 0)
            .await,
        Err(Error::NotParticipant)
    ));
    assert!(matches!(
        messages
            .history(u(1), "x:1", HistoryPage::Before(0), 0)
            .await,
        Err(Error::Invalid {
            field: "conversation_id",
            ..
        })
    ));
    assert!(matches!(
        messages
            .history(u(1), "g:7", HistoryPage::Before(0), 101)
            .await,
        Err(Error::Invalid { field: "limit", .. })
    ));
}

#[tokio::test]
async fn recall_is_the_senders_within_the_window_or_a_moderators_and_happens_once() {
    let (messages, outbox) = messages().await;
    let send = |client_msg_id: &str, to| SendCommand {
        client_msg_id: client_msg_id.into(),
        to: Some(to),
        content: Some(Content::Text("oops".into())),
        mentions: Mentions::default(),
        receipt: false,
        reply_to_seq: 0,
        forward: None,
    };
    let direct = messages
        .send(u(1), send("r1", Target::User(2)))
        .await
        .unwrap();
    let refused = messages
        .recall(u(2), &direct.conversation_id, direct.seq)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, Error::RecallRefused(m) if m.contains("only the sender")),
        "{refused:?}"
    );
    let recalled = messages
        .recall(u(1), &direct.conversation_id, direct.seq)
        .await
        .unwrap();
    assert_eq!(
        (recalled.recalled_by, recalled.content.clone()),
        (1, Content::Text(String::new()))
    );
    let again = messages
        .recall(u(1), &direct.conversation_id, direct.seq)
        .await
        .unwrap();
    assert_eq!(
        again.recalled_at_ms, recalled.recalled_at_ms,
        "recalling twice changes nothing"
    );
    let (history, _) = messages
        .history(u(2), &direct.conversation_id, HistoryPage::Before(0), 0)
        .await
        .unwrap();
    assert_eq!(
        (history[0].recalled_by, history[0].content.clone()),
        (1, Content::Text(String::new())),
        "a tombstone"
    );

    messages
        .send(u(1), send("r2", Target::Group(7)))
        .await
        .unwrap();
    let in_group = messages
        .send(u(1), send("r3", Target::Group(7)))
        .await
        .unwrap();
    assert!(matches!(
        messages.recall(u(3), "g:7", in_group.seq).await,
        Err(Error::RecallRefused(_))
    ));
    assert_eq!(
        messages
            .recall(u(2), "g:7", in_group.seq)
            .await
            .unwrap()
            .recalled_by,
        2,
        "a moderator recalls anyone's"
    );
    assert!(matches!(
        messages.recall(u(1), "g:7", 99).await,
        Err(Error::NoMessage)
    ));
    // Three sends and two recalls queued; the refused and repeated recalls queued nothing.
    let rows = outbox.pending(10).await.unwrap();
    assert_eq!(rows.len(), 5);
    let last = imesh_protos::sync::Fanout::decode(rows[4].payload.as_slice()).unwrap();
    assert_eq!(
        (last.event_id.as_str(), last.recipient_ids.clone()),
        ("r:g:7:2", vec![1, 2, 3])
    );
}

#[tokio::test]
async fn an_edit_is_the_senders_within_the_window_and_raises_the_version_for_both_sides() {
    let (mut messages, outbox) = messages().await;
    let sent = messages.send(u(1), text("e1", 2, "helo")).await.unwrap();
    let (conversation, seq) = (sent.conversation_id.as_str(), sent.seq);
    let new_text = |t: &str| Some(Content::Text(t.into()));
    let by_peer = messages
        .edit(u(2), conversation, seq, new_text("mine now"))
        .await
        .unwrap_err();
    assert!(matches!(by_peer, Error::NotSender), "{by_peer:?}");
    let blank = messages
        .edit(u(1), conversation, seq, new_text(" "))
        .await
        .unwrap_err();
    assert!(
        matches!(
            blank,
            Error::Invalid {
                field: "content.text",
                ..
            }
        ),
        "{blank:?}"
    );
    let first = messages
        .edit(u(1), conversation, seq, new_text("hello"))
        .await
        .unwrap();
    let second = messages
        .edit(u(1), conversation, seq, new_text("hello!"))
        .await
        .unwrap();
    assert_eq!((first.version, second.version), (2, 3));
    assert!(second.edited_at_ms >= sent.server_time_ms);
    let (history, _) = messages
        .history(u(2), conversation, HistoryPage::Before(0), 10)
        .await
        .unwrap();
    assert_eq!(
        (history[0].content.clone(), history[0].version),
        (Content::Text("hello!".into()), 3),
        "history shows the latest version"
    );
    // The send and one event per edit, the last carrying version 3 to both users.
    let rows = outbox.pending(10).await.unwrap();
    assert_eq!(rows.len(), 3);
    let last = imesh_protos::sync::Fanout::decode(rows[2].payload.as_slice()).unwrap();
    assert_eq!(last.recipient_ids, vec![1, 2]);
    let Some(imesh_protos::sync::sync_event::Kind::Edited(edited)) =
        last.event.and_then(|e| e.kind)
    else {
        panic!("not an edit event");
    };
    assert_eq!((edited.seq, edited.version), (seq, 3));

    messages.limits.edit_window_ms = -1;
    let late = messages
        .edit(u(1), conversation, seq, new_text("too late"))
        .await
        .unwrap_err();
    assert!(
        matches!(late, Error::EditRefused(m) if m.contains("window")),
        "{late:?}"
    );
    messages.limits.edit_window_ms = 120_000;
    messages.recall(u(1), conversation, seq).await.unwrap();
    let recalled = messages
        .edit(u(1), conversation, seq, new_text("back"))
        .await
        .unwrap_err();
    assert!(
        matches!(recalled, Error::EditRefused(m) if m.contains("recalled")),
        "{recalled:?}"
    );
    let missing = messages
        .edit(u(1), conversation, seq + 10, new_text("?"))
        .await
        .unwrap_err();
    assert!(matches!(missing, Error::NoMessage), "{missing:?}");
}

#[tokio::test]
async fn a_reply_quotes_an_excerpt_that_stays_and_shows_the_quoted_message_recalled() {
    let (messages, outbox) = messages().await;
    let long = "x".repeat(150);
    let first = messages.send(u(1), text("q1", 2, &long)).await.unwrap();
    let reply = SendCommand {
        reply_to_seq: first.seq,
        ..text("q2", 1, "agreed")
    };
    let answered = messages.send(u(2), reply).await.unwrap();
    let rows = outbox.pending(10).await.unwrap();
    let fanout = imesh_protos::sync::Fanout::decode(rows[1].payload.as_slice()).unwrap();
    let Some(imesh_protos::sync::sync_event::Kind::Message(pushed)) =
        fanout.event.and_then(|e| e.kind)
    else {
        panic!("not a message event");
    };
    let quoted = pushed.reply.expect("the pushed reply quotes");
    assert_eq!(
        (
            quoted.seq,
            quoted.sender_id,
            quoted.excerpt.len(),
            quoted.recalled
        ),
        (first.seq, 1, 100, false)
    );
    let missing = messages
        .send(
            u(2),
            SendCommand {
                reply_to_seq: 99,
                ..text("q3", 1, "to what?")
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            missing,
            Error::Invalid {
                field: "reply_to_seq",
                ..
            }
        ),
        "{missing:?}"
    );
    messages
        .recall(u(1), &first.conversation_id, first.seq)
        .await
        .unwrap();
    let (history, _) = messages
        .history(u(2), &first.conversation_id, HistoryPage::Before(0), 10)
        .await
        .unwrap();
    let reply = history
        .iter()
        .find(|m| m.seq == answered.seq)
        .and_then(|m| m.reply.clone())
        .expect("the reply in history");
    assert!(reply.recalled, "the quoted message was recalled since");
    assert_eq!(reply.excerpt, "x".repeat(100), "its excerpt stays");
}

#[tokio::test]
async fn a_forward_copies_a_readable_message_with_its_first_origin() {
    let (messages, _outbox) = messages().await;
    let original = messages.send(u(1), text("f1", 2, "news")).await.unwrap();
    let forward = |client_msg_id: &str, to, from: &str, seq| SendCommand {
        client_msg_id: client_msg_id.into(),
        to: Some(Target::User(to)),
        forward: Some((from.to_owned(), seq)),
        ..SendCommand::default()
    };
    // Bob forwards alice's message to carol, carol forwards it back to bob.
    let to_carol = messages
        .send(
            u(2),
            forward("f2", 3, &original.conversation_id, original.seq),
        )
        .await
        .unwrap();
    let again = messages
        .send(
            u(3),
            forward("f3", 2, &to_carol.conversation_id, to_carol.seq),
        )
        .await
        .unwrap();
    let (history, _) = messages
        .history(u(2), &again.conversation_id, HistoryPage::Before(0), 10)
        .await
        .unwrap();
    let copy = &history[0];
    assert_eq!(copy.content, Content::Text("news".into()));
    assert_eq!(
        copy.forwarded.map(|f| (f.msg_id, f.sender_id)),
        Some((original.msg_id, 1)),
        "a forward of a forward keeps the first origin"
    );
    // Carol cannot forward what she cannot read, nor bring content of her own.
    let unreadable = messages
        .send(
            u(3),
            forward("f4", 2, &original.conversation_id, original.seq),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            unreadable,
            Error::Invalid {
                field: "forward",
                ..
            }
        ),
        "{unreadable:?}"
    );
    let both = SendCommand {
        content: Some(Content::Text("mine".into())),
        ..forward("f5", 2, &to_carol.conversation_id, to_carol.seq)
    };
    let both = messages.send(u(3), both).await.unwrap_err();
    assert!(
        matches!(
            both,
            Error::Invalid {
                field: "content",
                ..
            }
        ),
        "{both:?}"
    );
}

#[tokio::test]
async fn pins_are_for_direct_members_and_group_holders_of_pin_and_read_as_visible() {
    let (messages, outbox) = messages().await;
    let direct = messages
        .send(u(1), text("p1", 2, "the plan"))
        .await
        .unwrap();
    let pins = messages
        .pin(u(2), &direct.conversation_id, direct.seq, false)
        .await
        .unwrap();
    assert_eq!(
        pins.iter()
            .map(|p| (p.pin.seq, p.pin.pinned_by, p.message.content.clone()))
            .collect::<Vec<_>>(),
        vec![(direct.seq, 2, Content::Text("the plan".into()))]
    );
    let rows = outbox.pending(10).await.unwrap();
    let fanout = imesh_protos::sync::Fanout::decode(rows[1].payload.as_slice()).unwrap();
    assert_eq!(fanout.recipient_ids, vec![1, 2]);
    assert!(matches!(
        fanout.event.and_then(|e| e.kind),
        Some(imesh_protos::sync::sync_event::Kind::Pin(p)) if p.pinned && p.by == 2
    ));

    let to_group = |id: &str| SendCommand {
        client_msg_id: id.into(),
        to: Some(Target::Group(7)),
        content: Some(Content::Text("hi".into())),
        ..SendCommand::default()
    };
    let first = messages.send(u(1), to_group("g1")).await.unwrap();
    let second = messages.send(u(2), to_group("g2")).await.unwrap();
    let plain = messages
        .pin(u(1), "g:7", first.seq, false)
        .await
        .unwrap_err();
    assert!(matches!(plain, Error::PinRefused(_)), "{plain:?}");
    let before_joining = messages
        .pin(u(2), "g:7", first.seq, false)
        .await
        .unwrap_err();
    assert!(
        matches!(before_joining, Error::NoMessage),
        "{before_joining:?}"
    );
    messages.pin(u(2), "g:7", second.seq, false).await.unwrap();
    let seen_by_leaver = messages.pins(u(3), "g:7").await.unwrap();
    assert_eq!(seen_by_leaver.len(), 1, "user 3 reads up to seq 2");
    let after = messages.pin(u(2), "g:7", second.seq, true).await.unwrap();
    assert!(after.is_empty(), "unpinned");
}

#[tokio::test]
async fn deleting_for_me_and_clearing_history_change_only_my_view() {
    let (messages, outbox) = messages().await;
    for (i, body) in ["one", "two", "three"].iter().enumerate() {
        messages
            .send(u(1), text(&format!("h{i}"), 2, body))
            .await
            .unwrap();
    }
    let seqs = |page: &[Message]| page.iter().map(|m| m.seq).collect::<Vec<_>>();
    let hidden = messages
        .delete_for_me(u(1), "d:1:2", vec![2, 2, 99])
        .await
        .unwrap();
    assert_eq!(
        hidden.seqs,
        vec![2, 99],
        "repeats dropped; unknown seqs are harmless"
    );
    let (mine, _) = messages
        .history(u(1), "d:1:2", HistoryPage::Before(0), 10)
        .await
        .unwrap();
    assert_eq!(seqs(&mine), vec![3, 1]);
    let (theirs, _) = messages
        .history(u(2), "d:1:2", HistoryPage::Before(0), 10)
        .await
        .unwrap();
    assert_eq!(seqs(&theirs), vec![3, 2, 1], "the peer's view is untouched");
    let (page, more) = messages
        .history(u(1), "d:1:2", HistoryPage::Before(0), 1)
        .await
        .unwrap();
    assert_eq!((seqs(&page), more), (vec![3], true));

    let cleared = messages.clear_history(u(1), "d:1:2").await.unwrap();
    assert_eq!(cleared.cleared_seq, 3);
    messages.send(u(2), text("h3", 1, "four")).await.unwrap();
    let (after_clear, _) = messages
        .history(u(1), "d:1:2", HistoryPage::Before(0), 10)
        .await
        .unwrap();
    assert_eq!(seqs(&after_clear), vec![4], "later messages show as usual");

    let rows = outbox.pending(10).await.unwrap();
    let fanout = imesh_protos::sync::Fanout::decode(rows[3].payload.as_slice()).unwrap();
    assert_eq!(fanout.recipient_ids, vec![1], "only my devices hear of it");
    let empty = messages
        .delete_for_me(u(1), "d:1:2", Vec::new())
        .await
        .unwrap_err();
    assert!(
        matches!(empty, Error::Invalid { field: "seqs", .. }),
        "{empty:?}"
    );
    let stranger = messages.clear_history(u(3), "d:1:2").await.unwrap_err();
    assert!(matches!(stranger, Error::NotParticipant), "{stranger:?}");
}

#[tokio::test]
async fn a_conversation_keeps_at_most_max_pins_and_one_call_hides_at_most_max_hide() {
    let (messages, _outbox) = messages().await;
    for i in 0..=MAX_PINS {
        messages
            .send(u(1), text(&format!("b{i}"), 2, "note"))
            .await
            .unwrap();
    }
    for seq in 1..=MAX_PINS as i64 {
        messages.pin(u(1), "d:1:2", seq, false).await.unwrap();
    }
    let full = messages
        .pin(u(2), "d:1:2", MAX_PINS as i64 + 1, false)
        .await
        .unwrap_err();
    assert!(matches!(full, Error::PinsFull), "{full:?}");
    let too_many = messages
        .delete_for_me(u(1), "d:1:2", (1..=MAX_HIDE as i64 + 1).collect())
        .await
        .unwrap_err();
    assert!(
        matches!(too_many, Error::Invalid { field: "seqs", .. }),
        "{too_many:?}"
    );
}

#[tokio::test]
async fn reactions_reach_a_direct_conversation_at_once_and_a_large_group_as_flushed_counts() {
    use imesh_protos::sync::{Fanout, sync_event::Kind};
    let (messages, outbox) = messages().await;
    let direct = messages.send(u(1), text("r1", 2, "lunch?")).await.unwrap();
    let conversation = direct.conversation_id.as_str();
    let counts = messages
        .react(u(2), conversation, direct.seq, "👍", false)
        .await
        .unwrap();
    let thumbs = |mine| ReactionCount {
        emoji: "👍".into(),
        count: 1,
        mine,
    };
    assert_eq!(counts, vec![thumbs(true)]);
    let rows = outbox.pending(10).await.unwrap();
    assert_eq!(rows.len(), 2, "the message and the reaction");
    let fanout = Fanout::decode(rows[1].payload.as_slice()).unwrap();
    assert_eq!(fanout.recipient_ids, vec![1, 2]);
    assert!(matches!(
        fanout.event.and_then(|e| e.kind),
        Some(Kind::Reaction(r)) if r.added && r.user_id == 2 && r.emoji == "👍"
    ));
    let again = messages
        .react(u(2), conversation, direct.seq, "👍", false)
        .await
        .unwrap();
    assert_eq!(again, vec![thumbs(true)], "idempotent");
    assert_eq!(outbox.pending(10).await.unwrap().len(), 2, "and silent");
    let (page, _) = messages
        .history(u(1), conversation, HistoryPage::Before(0), 10)
        .await
        .unwrap();
    assert_eq!(page[0].reactions, vec![thumbs(false)], "history, as user 1");
    let long = "x".repeat(MAX_EMOJI_BYTES + 1);
    for bad in ["", "a b", "\u{7}", long.as_str()] {
        let err = messages
            .react(u(2), conversation, direct.seq, bad, false)
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::Invalid { field: "emoji", .. }),
            "{bad:?}: {err:?}"
        );
    }
    let stranger = messages
        .react(u(3), conversation, direct.seq, "👍", false)
        .await
        .unwrap_err();
    assert!(matches!(stranger, Error::NotParticipant), "{stranger:?}");
    messages
        .recall(u(1), conversation, direct.seq)
        .await
        .unwrap();
    let recalled = messages
        .react(u(1), conversation, direct.seq, "🎉", false)
        .await
        .unwrap_err();
    assert!(matches!(recalled, Error::ReactRecalled), "{recalled:?}");
    let taken_back = messages
        .react(u(2), conversation, direct.seq, "👍", true)
        .await
        .unwrap();
    assert!(taken_back.is_empty(), "a reaction is taken back even then");

    // Group 7 has three members, over the fixture's coalescing size of two.
    let sent = messages
        .send(
            u(1),
            SendCommand {
                client_msg_id: "g1".into(),
                to: Some(Target::Group(7)),
                content: Some(Content::Text("vote".into())),
                ..SendCommand::default()
            },
        )
        .await
        .unwrap();
    let before = outbox.pending(100).await.unwrap().len();
    for user in [1, 3] {
        messages
            .react(u(user), "g:7", sent.seq, "✅", false)
            .await
            .unwrap();
    }
    assert_eq!(
        outbox.pending(100).await.unwrap().len(),
        before,
        "no event per reaction in a large group"
    );
    assert_eq!(messages.flush_reactions().await.unwrap(), 1);
    let rows = outbox.pending(100).await.unwrap();
    let fanout = Fanout::decode(rows[before].payload.as_slice()).unwrap();
    assert_eq!(fanout.recipient_ids, vec![1, 2, 3]);
    assert!(matches!(
        fanout.event.and_then(|e| e.kind),
        Some(Kind::ReactionCounts(c)) if c.seq == sent.seq
            && c.reactions.len() == 1 && c.reactions[0].count == 2
    ));
    assert_eq!(
        messages.flush_reactions().await.unwrap(),
        0,
        "nothing moved since"
    );
    let (who, more) = messages
        .reactors(u(1), "g:7", sent.seq, "✅", 1, 10)
        .await
        .unwrap();
    assert_eq!((who, more), (vec![3], false), "a page after user 1");
    let unseen = messages
        .reactors(u(2), "g:7", sent.seq, "✅", 0, 10)
        .await
        .unwrap_err();
    assert!(
        matches!(unseen, Error::NoMessage),
        "sent before user 2 joined"
    );
}

#[tokio::test]
async fn search_shows_each_reader_only_what_they_may_read_and_did_not_hide() {
    let (messages, _) = messages().await;
    let to_group = |id: &str, text: &str| SendCommand {
        client_msg_id: id.into(),
        to: Some(Target::Group(7)),
        content: Some(Content::Text(text.into())),
        ..SendCommand::default()
    };
    // Group 7: user 2 joined after seq 1; user 3 left after seq 2.
    let early = messages
        .send(u(1), to_group("g1", "budget draft"))
        .await
        .unwrap();
    let late = messages
        .send(u(1), to_group("g2", "budget final"))
        .await
        .unwrap();
    let direct = messages
        .send(u(2), text("d1", 1, "budget question"))
        .await
        .unwrap();
    let found = |page: SearchPage| -> Vec<i64> { page.messages.iter().map(|m| m.msg_id).collect() };
    let everywhere = messages.search(u(1), "Budget", "", 0, 0).await.unwrap();
    assert_eq!(
        found(everywhere),
        vec![direct.msg_id, late.msg_id, early.msg_id],
        "user 1 reads all of it, newest first"
    );
    let joined_late = messages.search(u(2), "budget", "", 0, 0).await.unwrap();
    assert_eq!(
        found(joined_late),
        vec![direct.msg_id, late.msg_id],
        "nothing from before user 2 joined"
    );
    let paged = messages.search(u(1), "budget", "", 0, 1).await.unwrap();
    assert_eq!(paged.next_before, direct.msg_id);
    let next = messages
        .search(u(1), "budget", "", paged.next_before, 1)
        .await
        .unwrap();
    assert_eq!(found(next), vec![late.msg_id], "the next page");
    messages
        .delete_for_me(u(1), "g:7", vec![late.seq])
        .await
        .unwrap();
    let in_group = messages.search(u(1), "budget", "g:7", 0, 0).await.unwrap();
    assert_eq!(
        (found(in_group.clone()), in_group.next_before),
        (vec![early.msg_id], 0),
        "one conversation, without what user 1 hid"
    );
    assert!(matches!(
        messages
            .search(u(3), "budget", &direct.conversation_id, 0, 0)
            .await,
        Err(Error::NotParticipant)
    ));
    for (query, field) in [
        ("", "query"),
        ("?!", "query"),
        ("a b c d e f g h i", "query"),
    ] {
        let err = messages.search(u(1), query, "", 0, 0).await.unwrap_err();
        assert!(
            matches!(err, Error::Invalid { field: f, .. } if f == field),
            "{query:?}: {err:?}"
        );
    }
    let system = messages
        .search(Sender::System, "budget", "", 0, 0)
        .await
        .unwrap_err();
    assert!(
        matches!(
            system,
            Error::Invalid {
                field: "conversation_id",
                ..
            }
        ),
        "{system:?}"
    );
}

/// An app server that refuses "spam", masks "darn" and cannot answer about "boom".
struct Moderator;

#[async_trait::async_trait]
impl BeforeSend for Moderator {
    async fn check(&self, message: &Message) -> anyhow::Result<Verdict> {
        let Content::Text(text) = &message.content else {
            return Ok(Verdict::Allow);
        };
        Ok(match text.as_str() {
            "spam" => Verdict::Reject("no ads here".into()),
            "darn" => Verdict::Replace(Content::Text("d**n".into())),
            "boom" => anyhow::bail!("the app server timed out"),
            _ => Verdict::Allow,
        })
    }
}

#[tokio::test]
async fn the_before_send_hook_allows_refuses_or_replaces_and_fails_as_configured() {
    for fail_open in [false, true] {
        let hook = BeforeSendHook {
            hook: Arc::new(Moderator),
            fail_open,
        };
        let (messages, _) = build_behind(
            DirectPolicy::Anyone,
            RateLimits::unlimited(),
            Backlog::default(),
            Some(hook),
        )
        .await;
        messages.send(u(1), text("a", 2, "hello")).await.unwrap();
        let refused = messages.send(u(1), text("b", 2, "spam")).await.unwrap_err();
        assert!(
            matches!(&refused, Error::HookRefused(reason) if reason == "no ads here"),
            "{refused:?}"
        );
        let masked = messages.send(u(1), text("c", 2, "darn")).await.unwrap();
        let stored = messages
            .history(u(2), &masked.conversation_id, HistoryPage::Before(0), 1)
            .await
            .unwrap()
            .0;
        assert_eq!(stored[0].content, Content::Text("d**n".into()));
        let unanswered = messages.send(u(1), text("d", 2, "boom")).await;
        match fail_open {
            true => assert!(unanswered.is_ok(), "fail open sends: {unanswered:?}"),
            false => assert!(
                matches!(unanswered, Err(Error::HookUnavailable(_))),
                "fail closed refuses: {unanswered:?}"
            ),
        }
        let notice = messages.send(Sender::System, text("e", 2, "spam")).await;
        assert!(notice.is_ok(), "the system actor is not asked: {notice:?}");
    }
}
