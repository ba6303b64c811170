//! Editing a message end to end, through the gateway: the sender's edit reaches the peer
//! and the sender's other device as an `Edited` event with the new version, history and the
//! conversation list read the latest version, in a direct conversation and a group; nobody
//! else may edit it.
//! Runs on every available store set.

use imesh_protos::{
    gateway::{client_frame, server_frame::Body},
    group::CreateGroupRequest,
    message::{Content, EditRequest, Edited, Text, content},
    sync::{ConversationsRequest, sync_event::Kind},
};
use imesh_tests::{Device, Stores, TestCluster};
use tonic::Code;

fn text(text: &str) -> Option<Content> {
    Some(Content {
        kind: Some(content::Kind::Text(Text { text: text.into() })),
    })
}

async fn edit(device: &mut Device, conversation_id: &str, seq: i64, new: &str) -> Body {
    let request = EditRequest {
        conversation_id: conversation_id.into(),
        seq,
        content: text(new),
    };
    let id = device.send_frame(client_frame::Body::Edit(request)).await;
    device.reply(id).await
}

/// The next pushed edit, skipping other events.
async fn edited(device: &mut Device) -> Edited {
    device
        .pushed(|kind| match kind {
            Kind::Edited(edited) => Some(edited),
            _ => None,
        })
        .await
}

fn text_of(content: Option<Content>) -> String {
    match content.and_then(|c| c.kind) {
        Some(content::Kind::Text(t)) => t.text,
        other => panic!("not a text: {other:?}"),
    }
}

async fn scenario(stores: Stores) {
    let env = TestCluster::start(stores).await;
    let (alice, alice_token) = env.user("alice").await;
    let (bob, bob_token) = env.user("bob").await;
    let (carol, carol_token) = env.user("carol").await;
    let mut phone = env.signed_in(&alice_token, "alice-phone").await;
    let mut laptop = env.signed_in(&alice_token, "alice-laptop").await;
    let mut b = env.signed_in(&bob_token, "bob-phone").await;
    let mut c = env.signed_in(&carol_token, "carol-phone").await;

    // Direct: alice fixes a typo; bob and alice's laptop see version 2.
    let Body::SendAck(sent) = phone.send_text(bob, "d1", "helo bob").await else {
        panic!("{stores:?}: send refused");
    };
    let Body::Edit(reply) = edit(&mut phone, &sent.conversation_id, sent.seq, "hello bob").await
    else {
        panic!("{stores:?}: edit refused");
    };
    let message = reply.message.expect("the edited message");
    assert_eq!((message.version, message.seq), (2, sent.seq), "{stores:?}");
    for device in [&mut b, &mut laptop] {
        let seen = edited(device).await;
        assert_eq!(
            (seen.seq, seen.version, text_of(seen.content)),
            (sent.seq, 2, "hello bob".to_owned()),
            "{stores:?}"
        );
    }
    let history = b.history(&sent.conversation_id, 0).await;
    let latest = history.messages.first().expect("the message").clone();
    assert_eq!(
        (latest.version, text_of(latest.content)),
        (2, "hello bob".to_owned()),
        "{stores:?}: history reads the latest version"
    );
    assert!(latest.edited_at_ms >= latest.server_time_ms, "{stores:?}");
    let id = b
        .send_frame(client_frame::Body::Conversations(
            ConversationsRequest::default(),
        ))
        .await;
    let Body::Conversations(list) = b.reply(id).await else {
        panic!("{stores:?}: no conversation list");
    };
    let listed = list
        .conversations
        .into_iter()
        .find(|c| c.conversation_id == sent.conversation_id)
        .and_then(|c| c.last_message)
        .expect("the conversation's last message");
    assert_eq!(
        (listed.version, text_of(listed.content)),
        (2, "hello bob".to_owned()),
        "{stores:?}: the list shows the edited last message"
    );

    // Only the sender edits: bob's attempt is refused naming the field.
    let Body::Error(refused) = edit(&mut b, &sent.conversation_id, sent.seq, "bob was here").await
    else {
        panic!("{stores:?}: bob edited alice's message");
    };
    assert_eq!(refused.code, Code::PermissionDenied as u32, "{stores:?}");
    assert!(
        refused.message.starts_with("seq:"),
        "{stores:?}: {refused:?}"
    );

    // A group: every member's devices get the edit.
    let group = env
        .create_group(
            alice,
            CreateGroupRequest {
                name: "team".into(),
                member_ids: vec![bob, carol],
                ..Default::default()
            },
        )
        .await;
    let Body::SendAck(sent) = phone.send_group_text(group, "g1", "meting at 3").await else {
        panic!("{stores:?}: group send refused");
    };
    let Body::Edit(_) = edit(&mut phone, &sent.conversation_id, sent.seq, "meeting at 3").await
    else {
        panic!("{stores:?}: group edit refused");
    };
    for device in [&mut b, &mut c, &mut laptop] {
        let seen = edited(device).await;
        assert_eq!(
            (
                seen.conversation_id.as_str(),
                seen.version,
                text_of(seen.content)
            ),
            (sent.conversation_id.as_str(), 2, "meeting at 3".to_owned()),
            "{stores:?}"
        );
    }
}

#[tokio::test]
async fn an_edit_reaches_every_device_and_history_reads_the_latest_version() {
    for stores in Stores::available() {
        scenario(stores).await;
    }
}
