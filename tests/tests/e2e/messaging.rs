//! The messaging core end to end through the gateway and gRPC, one behaviour a test, each
//! on every available store set: media and mentions reach members' devices, @all needs
//! AT_ALL, the conversation list counts unread and flags mentions, a read on one device
//! reaches the reader's other devices and the direct peer, settings follow the user's
//! devices, internal callers send notices, a flooding sender is rate-limited with a wait,
//! and super groups store each message once.

use imesh_kit::identity::Actor;
use imesh_protos::{
    gateway::{client_frame, server_frame::Body},
    group::{CreateGroupRequest, GroupType, group_service_client::GroupServiceClient},
    message::{
        Content, HistoryRequest, Media, Notice, SendNoticeRequest, SendRequest, content,
        message_service_client::MessageServiceClient, send_request::To,
    },
    sync::{
        Conversation, ConversationsRequest, MarkReadRequest, ReadMark, ReadMoved,
        UpdateConversationRequest, sync_event::Kind,
    },
};
use imesh_tests::{Device, PATIENCE, Stores, TestCluster, eventually};
use tonic::Code;

fn content(kind: content::Kind) -> Option<Content> {
    Some(Content { kind: Some(kind) })
}

fn text(text: &str) -> Option<Content> {
    content(content::Kind::Text(imesh_protos::message::Text {
        text: text.into(),
    }))
}

async fn conversations(device: &mut Device) -> (Vec<Conversation>, i64) {
    let id = device
        .send_frame(client_frame::Body::Conversations(
            ConversationsRequest::default(),
        ))
        .await;
    match device.reply(id).await {
        Body::Conversations(page) => (page.conversations, page.total_unread),
        other => panic!("unexpected reply to conversations: {other:?}"),
    }
}

/// A group of `kind` owned by `owner` with `members`; its id.
async fn create_group(env: &TestCluster, owner: i64, members: Vec<i64>, kind: GroupType) -> i64 {
    let create = CreateGroupRequest {
        name: "team".into(),
        member_ids: members,
        r#type: kind as i32,
        ..Default::default()
    };
    GroupServiceClient::new(env.channel(env.cluster.addrs.group))
        .create_group(env.caller.request(Actor::User(owner), create))
        .await
        .unwrap()
        .into_inner()
        .group
        .unwrap()
        .group_id
}

fn find<'a>(list: &'a [Conversation], id: &str) -> &'a Conversation {
    list.iter()
        .find(|c| c.conversation_id == id)
        .unwrap_or_else(|| panic!("{id} in {list:?}"))
}

/// Alice, Bob (on a phone and a laptop) and Carol signed in, and Alice's group of the three.
struct Team {
    env: TestCluster,
    alice: i64,
    bob: i64,
    carol: i64,
    a: Device,
    b: Device,
    b2: Device,
    c: Device,
    group: i64,
}

impl Team {
    async fn start(stores: Stores) -> Self {
        let env = TestCluster::start(stores).await;
        let (alice, alice_token) = env.user("alice").await;
        let (bob, bob_token) = env.user("bob").await;
        let (carol, carol_token) = env.user("carol").await;
        let a = env.signed_in(&alice_token, "alice-phone").await;
        let b = env.signed_in(&bob_token, "bob-phone").await;
        let b2 = env.signed_in(&bob_token, "bob-laptop").await;
        let mut c = env.signed_in(&carol_token, "carol-phone").await;
        let group = create_group(&env, alice, vec![bob, carol], GroupType::Normal).await;
        assert_eq!(
            c.notice_seq(&format!("g:{group}"), "group.created").await,
            1,
            "{stores:?}"
        );
        Self {
            env,
            alice,
            bob,
            carol,
            a,
            b,
            b2,
            c,
            group,
        }
    }

    fn direct(&self) -> String {
        let (alice, bob) = (self.alice, self.bob);
        format!("d:{}:{}", alice.min(bob), alice.max(bob))
    }
}

#[tokio::test]
async fn an_image_mentioning_a_member_reaches_the_group_as_sent_and_flags_the_mention() {
    for stores in Stores::available() {
        let Team {
            carol,
            mut a,
            mut b,
            mut c,
            group,
            ..
        } = Team::start(stores).await;
        let image = Media {
            url: "https://cdn.example.com/mock.png".into(),
            size_bytes: 48_213,
            mime_type: "image/png".into(),
            width: 800,
            height: 600,
            ..Media::default()
        };
        let Body::SendAck(sent) = a
            .send(SendRequest {
                client_msg_id: "img-1".into(),
                to: Some(To::GroupId(group)),
                content: content(content::Kind::Image(image.clone())),
                mentioned_user_ids: vec![carol],
                ..SendRequest::default()
            })
            .await
        else {
            panic!("{stores:?}: image send refused")
        };
        let got = b
            .pushed(|k| match k {
                Kind::Message(m) if m.seq == sent.seq => Some(m),
                _ => None,
            })
            .await;
        assert_eq!(
            got.content,
            content(content::Kind::Image(image)),
            "{stores:?}"
        );
        assert_eq!(got.mentioned_user_ids, vec![carol], "{stores:?}");
        c.pushed(|k| matches!(k, Kind::Message(m) if m.seq == sent.seq).then_some(()))
            .await;
        let (list, _) = conversations(&mut c).await;
        let state = find(&list, &format!("g:{group}"));
        assert_eq!((state.unread, state.mentioned), (2, true), "{stores:?}");
    }
}

#[tokio::test]
async fn mentioning_everyone_needs_the_at_all_permission() {
    for stores in Stores::available() {
        let Team {
            mut a,
            mut c,
            group,
            ..
        } = Team::start(stores).await;
        let at_all = |client_msg_id: &str| SendRequest {
            client_msg_id: client_msg_id.into(),
            to: Some(To::GroupId(group)),
            content: text("everyone: standup"),
            mention_all: true,
            ..SendRequest::default()
        };
        match c.send(at_all("all-c")).await {
            Body::Error(e) => {
                assert_eq!(e.code, Code::PermissionDenied as u32, "{stores:?}: {e:?}")
            }
            other => panic!("{stores:?}: @all by a member went through: {other:?}"),
        }
        assert!(
            matches!(a.send(at_all("all-a")).await, Body::SendAck(_)),
            "{stores:?}: the owner holds AT_ALL"
        );
    }
}

#[tokio::test]
async fn a_read_reaches_the_readers_other_devices_and_the_direct_peer_and_lowers_unread() {
    for stores in Stores::available() {
        let team = Team::start(stores).await;
        let direct = team.direct();
        let Team {
            bob,
            mut a,
            mut b,
            mut b2,
            group,
            ..
        } = team;
        for i in 0..3 {
            let reply = a.send_text(bob, &format!("d{i}"), &format!("hi {i}")).await;
            assert!(matches!(reply, Body::SendAck(_)), "{stores:?}: {reply:?}");
        }
        // Inbox appends trail the send acks: poll the list until all three are counted.
        let list = eventually("bob's unread at 3", PATIENCE, async || {
            let (list, _) = conversations(&mut b).await;
            list.iter()
                .any(|c| c.conversation_id == direct && c.unread == 3)
                .then_some(list)
        })
        .await;
        assert_eq!(
            list[0].conversation_id, direct,
            "{stores:?}: most recent first"
        );
        let mark = MarkReadRequest {
            marks: vec![ReadMark {
                conversation_id: direct.clone(),
                read_seq: 2,
            }],
        };
        let id = b.send_frame(client_frame::Body::MarkRead(mark)).await;
        let Body::MarkRead(marked) = b.reply(id).await else {
            panic!("{stores:?}: mark read refused")
        };
        assert_eq!(marked.marks[0].read_seq, 2, "{stores:?}");
        let moved = |k| match k {
            Kind::Read(r) => Some(r),
            _ => None,
        };
        let expected = ReadMoved {
            conversation_id: direct.clone(),
            user_id: bob,
            read_seq: 2,
        };
        assert_eq!(
            b2.pushed(moved).await,
            expected,
            "{stores:?}: bob's other device"
        );
        assert_eq!(
            a.pushed(moved).await,
            expected,
            "{stores:?}: the direct peer"
        );
        let (list, _) = conversations(&mut a).await;
        assert_eq!(find(&list, &direct).peer_read_seq, 2, "{stores:?}");
        let (list, total) = conversations(&mut b).await;
        let group_unread = find(&list, &format!("g:{group}")).unread;
        assert_eq!(
            (find(&list, &direct).unread, total),
            (1, 1 + group_unread),
            "{stores:?}"
        );
    }
}

#[tokio::test]
async fn muting_a_conversation_reaches_the_users_other_devices() {
    for stores in Stores::available() {
        let team = Team::start(stores).await;
        let direct = team.direct();
        let Team {
            bob,
            mut a,
            mut b,
            mut b2,
            ..
        } = team;
        let reply = a.send_text(bob, "d0", "hi").await;
        assert!(matches!(reply, Body::SendAck(_)), "{stores:?}: {reply:?}");
        // The conversation is bob's once the message's inbox append (after the ack) is in.
        eventually("the conversation in bob's list", PATIENCE, async || {
            let (list, _) = conversations(&mut b).await;
            list.iter()
                .any(|c| c.conversation_id == direct)
                .then_some(())
        })
        .await;
        let mute = UpdateConversationRequest {
            conversation_id: direct.clone(),
            pinned: None,
            muted: Some(true),
        };
        let id = b
            .send_frame(client_frame::Body::UpdateConversation(mute))
            .await;
        let settings = match b.reply(id).await {
            Body::ConversationSettings(settings) => settings,
            other => panic!("{stores:?}: settings refused: {other:?}"),
        };
        assert!(settings.muted && !settings.pinned, "{stores:?}");
        let seen = b2
            .pushed(|k| match k {
                Kind::Settings(s) => Some(s),
                _ => None,
            })
            .await;
        assert_eq!(seen, settings, "{stores:?}");
        let (list, _) = conversations(&mut b).await;
        assert!(find(&list, &direct).muted, "{stores:?}");
    }
}

#[tokio::test]
async fn an_internal_caller_sends_one_notice_to_users_and_groups_in_one_call() {
    for stores in Stores::available() {
        let Team {
            env,
            bob,
            mut b,
            mut c,
            group,
            ..
        } = Team::start(stores).await;
        let notice = content(content::Kind::Notice(Notice {
            code: "maintenance".into(),
            text: "Maintenance at 02:00".into(),
            json: String::new(),
        }));
        let request = SendNoticeRequest {
            client_msg_id: "maint-1".into(),
            user_ids: vec![bob],
            group_ids: vec![group],
            content: notice.clone(),
        };
        let mut messages = MessageServiceClient::new(env.channel(env.cluster.addrs.message));
        let results = messages
            .send_notice(env.caller.request(Actor::System, request))
            .await
            .unwrap()
            .into_inner()
            .results;
        assert!(
            results.iter().all(|r| r.sent.is_some()),
            "{stores:?}: {results:?}"
        );
        let mine = format!("s:{bob}");
        let note = b
            .pushed(|k| match k {
                Kind::Message(m) if m.conversation_id == mine => Some(m),
                _ => None,
            })
            .await;
        assert_eq!(
            (note.sender_id, note.content),
            (0, notice.clone()),
            "{stores:?}"
        );
        c.pushed(|k| matches!(k, Kind::Message(m) if m.content == notice).then_some(()))
            .await;
    }
}

#[tokio::test]
async fn a_flooding_sender_is_limited_per_user_with_a_wait() {
    for stores in Stores::available() {
        let Team { env, alice, .. } = Team::start(stores).await;
        // 30 sends written at once are cut at the per-user rate of 20/s; dave has sent
        // nothing yet, so his burst is whole.
        let (_, dave_token) = env.user("dave").await;
        let mut d = env.signed_in(&dave_token, "dave-phone").await;
        let mut ids = Vec::new();
        for i in 0..30 {
            let flood = SendRequest {
                client_msg_id: format!("flood-{i}"),
                to: Some(To::UserId(alice)),
                content: text("spam"),
                ..SendRequest::default()
            };
            ids.push(d.send_frame(client_frame::Body::Send(flood)).await);
        }
        let mut limited = Vec::new();
        for reply in d.replies(&ids).await {
            match reply {
                Body::SendAck(_) => {}
                Body::Error(e) if e.code == Code::ResourceExhausted as u32 => limited.push(e),
                other => panic!("{stores:?}: unexpected reply {other:?}"),
            }
        }
        assert!(
            !limited.is_empty(),
            "{stores:?}: 30 sends at once were not limited"
        );
        assert!(
            limited.len() <= 10,
            "{stores:?}: the first 20 pass: {}",
            limited.len()
        );
        assert!(
            limited
                .iter()
                .all(|e| e.retry_after_ms > 0 && e.message.starts_with("user_id"))
        );
    }
}

async fn super_group_scenario(stores: Stores) {
    let env = TestCluster::start(stores).await;
    let (alice, alice_token) = env.user("alice").await;
    let (bob, bob_token) = env.user("bob").await;
    let (carol, carol_token) = env.user("carol").await;
    let mut a = env.signed_in(&alice_token, "alice-phone").await;
    let mut b = env.signed_in(&bob_token, "bob-phone").await;
    let mut c = env.signed_in(&carol_token, "carol-phone").await;
    let group = create_group(&env, alice, vec![bob, carol], GroupType::Super).await;
    let conversation = format!("g:{group}");
    // A device connecting now follows the super group live (its first reply means the
    // gateway has registered it).
    let mut b2 = env.signed_in(&bob_token, "bob-tablet").await;
    assert!(matches!(b2.ping().await, Body::Pong(_)), "{stores:?}");
    // The creation notice is seq 1; the three updates are 2–4.
    assert_eq!(
        b.notice_seq(&conversation, "group.created").await,
        1,
        "{stores:?}"
    );
    for i in 1..=3 {
        let reply = a
            .send(SendRequest {
                client_msg_id: format!("sg-{i}"),
                to: Some(To::GroupId(group)),
                content: text(&format!("update {i}")),
                mentioned_user_ids: if i == 3 { vec![carol] } else { vec![] },
                ..SendRequest::default()
            })
            .await;
        assert!(matches!(reply, Body::SendAck(_)), "{stores:?}: {reply:?}");
    }
    // Online members get coalesced "conversation now at seq N" hints, not the messages.
    loop {
        let hint = b2
            .pushed(|k| match k {
                Kind::Advanced(a) => Some(a),
                Kind::Message(m) if m.conversation_id == conversation => {
                    panic!("{stores:?}: a super group message was pushed: {m:?}")
                }
                _ => None,
            })
            .await;
        assert_eq!(hint.conversation_id, conversation, "{stores:?}");
        if hint.latest_seq == 4 {
            break;
        }
    }
    // Members catch up by seq from the conversation itself.
    let page = b
        .history_page(HistoryRequest {
            conversation_id: conversation.clone(),
            after_seq: 2,
            ..HistoryRequest::default()
        })
        .await;
    let seqs: Vec<i64> = page.messages.iter().map(|m| m.seq).collect();
    assert_eq!(seqs, vec![3, 4], "{stores:?}");
    // Reading opens bob's state; carol's mention opened hers (the state trails the ack).
    let mark = MarkReadRequest {
        marks: vec![ReadMark {
            conversation_id: conversation.clone(),
            read_seq: 1,
        }],
    };
    let id = b.send_frame(client_frame::Body::MarkRead(mark)).await;
    assert!(matches!(b.reply(id).await, Body::MarkRead(_)), "{stores:?}");
    let (list, _) = conversations(&mut b).await;
    assert_eq!(find(&list, &conversation).unread, 3, "{stores:?}");
    let state = eventually("carol's state opened", PATIENCE, async || {
        let (list, _) = conversations(&mut c).await;
        list.into_iter().find(|s| s.conversation_id == conversation)
    })
    .await;
    assert!(state.mentioned, "{stores:?}: {state:?}");
    // Nothing went into the members' inboxes but the group's own events.
    let inbox = b.pull(0).await;
    assert!(
        inbox.entries.iter().all(|e| !matches!(
            e.event.as_ref().and_then(|e| e.kind.as_ref()),
            Some(Kind::Message(_))
        )),
        "{stores:?}: a super group message was written to an inbox"
    );
}

#[tokio::test]
async fn super_groups_store_each_message_once_and_members_catch_up_by_seq() {
    for stores in Stores::available() {
        super_group_scenario(stores).await;
    }
}
