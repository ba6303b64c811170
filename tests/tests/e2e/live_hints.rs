//! A connected device follows super groups its user joins while connected: the group
//! change pushed to it makes the gateway re-list the user's super groups, and the group's
//! live "conversation advanced" hints reach the device without a reconnect.

use std::time::Duration;

use imesh_protos::{
    group::{CreateGroupRequest, GroupType},
    message::{Content, SendRequest, Text, content, send_request::To},
    sync::sync_event::Kind,
};
use imesh_tests::{PATIENCE, Stores, TestCluster, eventually};

#[tokio::test]
async fn a_super_group_joined_while_connected_sends_its_live_hints_there() {
    let env = TestCluster::start(Stores::Embedded).await;
    let (alice, alice_token) = env.user("alice").await;
    let (bob, bob_token) = env.user("bob").await;
    let mut a = env.signed_in(&alice_token, "alice-1").await;
    let mut b = env.signed_in(&bob_token, "bob-1").await;
    let create = CreateGroupRequest {
        name: "all hands".into(),
        member_ids: vec![bob],
        r#type: GroupType::Super as i32,
        ..Default::default()
    };
    let group = env.create_group(alice, create).await;
    let conversation = format!("g:{group}");

    // The gateway re-lists Bob's groups after the change reaches him; until it has, a send
    // brings no hint, so keep sending (a few ms apart) until one comes.
    let mut i = 0;
    eventually("a live hint", PATIENCE, async || {
        i += 1;
        let send = SendRequest {
            client_msg_id: format!("m{i}"),
            to: Some(To::GroupId(group)),
            content: Some(Content {
                kind: Some(content::Kind::Text(Text { text: "hi".into() })),
            }),
            ..SendRequest::default()
        };
        a.send(send).await;
        let mut hinted = false;
        while let Some(entry) = b.push_within(Duration::from_millis(100)).await {
            if let Some(Kind::Advanced(hint)) = entry.event.and_then(|e| e.kind) {
                assert_eq!(hint.conversation_id, conversation);
                assert_eq!(entry.sync_seq, 0, "live only");
                hinted = true;
            }
        }
        hinted.then_some(())
    })
    .await;
}
