//! Groups end to end through the gateway: group messages reach every member's device, an
//! admin recalls a message everywhere,
//! mute-all silences members but not admins, a kicked member can no longer send and hears
//! nothing more, and a late joiner's history starts at the seq they joined at. Runs on
//! every available store set.

use imesh_kit::grpc::Channel;
use imesh_kit::identity::Actor;
use imesh_protos::{
    gateway::server_frame::Body,
    group::{
        CreateGroupRequest, GetMembersRequest, GroupChanged, ImportMembersRequest,
        InviteMembersRequest, KickMembersRequest, MuteAllRequest, SetAdminRequest,
        group_service_client::GroupServiceClient,
    },
    message::content,
    sync::{InboxEntry, sync_event::Kind},
};
use imesh_tests::{Device, Stores, TestCluster};
use tonic::Code;

fn text_of(entry: &InboxEntry) -> Option<String> {
    match entry.event.clone()?.kind? {
        Kind::Message(m) => match m.content?.kind? {
            content::Kind::Text(t) => Some(t.text),
            _ => None,
        },
        _ => None,
    }
}

/// Waits for a pushed message with `text`, skipping other pushes.
async fn pushed_text(device: &mut Device, text: &str) {
    while text_of(&device.next_push().await).as_deref() != Some(text) {}
}

/// The next pushed group event of kind `op`, skipping others.
async fn group_event(device: &mut Device, op: &str) -> GroupChanged {
    loop {
        if let Some(Kind::Group(changed)) = device.next_push().await.event.and_then(|e| e.kind)
            && changed.op == op
        {
            return changed;
        }
    }
}

fn refused(body: Body) -> (u32, String) {
    match body {
        Body::Error(e) => (e.code, e.message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

async fn scenario(stores: Stores) {
    let env = TestCluster::start(stores).await;
    let groups = || GroupServiceClient::<Channel>::new(env.channel(env.cluster.addrs.group));
    let mut users = Vec::new();
    for name in ["alice", "bob", "carol", "dave"] {
        let (id, token) = env.user(name).await;
        let device = env.signed_in(&token, &format!("{name}-phone")).await;
        users.push((id, device));
    }
    let [(alice, mut a), (bob, mut b), (carol, mut c), (dave, mut d)] =
        <[_; 4]>::try_from(users).ok().unwrap();

    let create = CreateGroupRequest {
        name: "team".into(),
        member_ids: vec![bob, carol, dave],
        ..Default::default()
    };
    let group = groups()
        .create_group(env.caller.request(Actor::User(alice), create))
        .await
        .unwrap()
        .into_inner();
    let g = group.group.unwrap().group_id;
    for device in [&mut a, &mut b, &mut c, &mut d] {
        let created = group_event(device, "created").await;
        assert_eq!(created.members.len(), 4, "{stores:?}");
    }
    let admin = SetAdminRequest {
        group_id: g,
        user_id: bob,
        admin: true,
    };
    groups()
        .set_admin(env.caller.request(Actor::User(alice), admin))
        .await
        .unwrap();

    // Creating the group and naming an admin left notices in its conversation (the relay
    // stores them in order, so the last one present means both are).
    assert_eq!(
        c.notice_seq(&format!("g:{g}"), "group.admin").await,
        2,
        "{stores:?}"
    );
    let Body::SendAck(first) = c.send_group_text(g, "c1", "hello team").await else {
        panic!("member send refused")
    };
    assert_eq!(
        (first.conversation_id.clone(), first.seq),
        (format!("g:{g}"), 3)
    );
    for device in [&mut a, &mut b, &mut d] {
        pushed_text(device, "hello team").await;
    }

    // Only the sender or an admin recalls; everyone's devices hear of it; history keeps a tombstone.
    let conversation = format!("g:{g}");
    let (code, _) = refused(d.recall(&conversation, first.seq).await);
    assert_eq!(
        code,
        Code::PermissionDenied as u32,
        "{stores:?}: dave is neither sender nor admin"
    );
    let Body::Recall(recall) = b.recall(&conversation, first.seq).await else {
        panic!("admin recall refused")
    };
    assert_eq!(recall.message.unwrap().recalled_by, bob);
    loop {
        if let Some(Kind::Recalled(r)) = a.next_push().await.event.and_then(|e| e.kind) {
            assert_eq!((r.seq, r.recalled_by), (first.seq, bob), "{stores:?}");
            break;
        }
    }
    let tombstone = a
        .history(&conversation, first.seq + 1)
        .await
        .messages
        .remove(0);
    assert!(
        tombstone.recalled_by == bob && tombstone.content.is_none(),
        "{stores:?}: {tombstone:?}"
    );

    // Mute-all: members are silenced, admins are not.
    groups()
        .mute_all(env.caller.request(
            Actor::User(alice),
            MuteAllRequest {
                group_id: g,
                muted: true,
            },
        ))
        .await
        .unwrap();
    let (code, message) = refused(c.send_group_text(g, "c2", "can I speak?").await);
    assert_eq!(code, Code::PermissionDenied as u32, "{stores:?}: {message}");
    assert!(message.contains("everyone is muted"), "{message}");
    let Body::SendAck(_) = b.send_group_text(g, "b1", "admins still talk").await else {
        panic!("admin silenced")
    };
    pushed_text(&mut d, "admins still talk").await;
    groups()
        .mute_all(env.caller.request(
            Actor::User(alice),
            MuteAllRequest {
                group_id: g,
                muted: false,
            },
        ))
        .await
        .unwrap();

    // Dave is kicked: his device hears of it, his sends are refused, nothing more reaches him.
    let kick = KickMembersRequest {
        group_id: g,
        user_ids: vec![dave],
    };
    groups()
        .kick_members(env.caller.request(Actor::User(bob), kick))
        .await
        .unwrap();
    let kicked = group_event(&mut d, "kicked").await;
    assert_eq!(
        (kicked.operator_id, kicked.members[0].user_id),
        (bob, dave),
        "{stores:?}"
    );
    let (code, message) = refused(d.send_group_text(g, "d1", "let me back").await);
    assert_eq!(code, Code::PermissionDenied as u32, "{stores:?}: {message}");
    // The kick's notice (and every one before it) is in before the next message.
    c.notice_seq(&format!("g:{g}"), "group.kicked").await;
    let Body::SendAck(after_kick) = c.send_group_text(g, "c3", "without dave").await else {
        panic!("send refused")
    };
    pushed_text(&mut a, "without dave").await;
    let dave_inbox = d.pull(0).await;
    assert!(
        dave_inbox
            .entries
            .iter()
            .filter_map(text_of)
            .all(|t| t != "without dave"),
        "{stores:?}"
    );

    // A late joiner's history starts after the seq at which they joined.
    let (erin, _) = env.user("erin").await;
    let invite = InviteMembersRequest {
        group_id: g,
        user_ids: vec![erin],
    };
    let joined = groups()
        .invite_members(env.caller.request(Actor::User(carol), invite))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(joined.members[0].join_seq, after_kick.seq, "{stores:?}");
    let lookup = GetMembersRequest {
        group_id: g,
        user_ids: vec![erin, dave],
    };
    let rows = groups()
        .get_members(env.caller.request(Actor::User(alice), lookup))
        .await
        .unwrap()
        .into_inner()
        .members;
    assert_eq!(rows.len(), 2);
    env.cluster.stop().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_messages_follow_membership_mute_recall_and_join_seq() {
    for stores in Stores::available() {
        scenario(stores).await;
    }
}

#[tokio::test]
async fn a_long_message_to_a_thousand_member_group_is_pushed_not_only_pullable() {
    let env = TestCluster::start(Stores::Embedded).await;
    let (owner, owner_token) = env.user("owner").await;
    let (member, member_token) = env.user("member").await;
    let create = CreateGroupRequest {
        name: "everyone".into(),
        max_member: 1000,
        ..Default::default()
    };
    let group = env.create_group(owner, create).await;
    // Ids that are no users of this cluster (far below its snowflake ids) fill the group
    // to 1,000 members: each gets an inbox entry, as a member would.
    let import = ImportMembersRequest {
        group_id: group,
        user_ids: std::iter::once(member).chain(1..=998).collect(),
    };
    GroupServiceClient::new(env.channel(env.cluster.addrs.group))
        .import_members(env.caller.request(Actor::System, import))
        .await
        .expect("imported");
    let mut sender = env.signed_in(&owner_token, "owner-phone").await;
    let mut reader = env.signed_in(&member_token, "member-phone").await;
    // 1,000 entries of 11 KB: one batch of 11 MB for the live hops, past what one call
    // may carry.
    let text = "x".repeat(11 * 1024);
    assert!(matches!(
        sender.send_group_text(group, "long-1", &text).await,
        Body::SendAck(_)
    ));
    pushed_text(&mut reader, &text).await;
}
