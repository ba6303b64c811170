//! Typing indicators end to end through the gateway: the peer's device (and a small group's
//! other members) get a live Typing event that is never stored; a repeat within the
//! interval is throttled; an outsider is refused.

use imesh_protos::{
    gateway::{client_frame, server_frame::Body},
    group::CreateGroupRequest,
    notify::{TypingRequest, TypingResponse},
    sync::{Typing, sync_event::Kind},
};
use imesh_tests::{Device, Stores, TestCluster};
use tonic::Code;

async fn typing(device: &mut Device, conversation_id: &str) -> Body {
    let request = TypingRequest {
        conversation_id: conversation_id.into(),
    };
    let id = device.send_frame(client_frame::Body::Typing(request)).await;
    device.reply(id).await
}

/// The next push, which must be a live Typing event.
async fn typed(device: &mut Device) -> Typing {
    let entry = device.next_push().await;
    assert_eq!(entry.sync_seq, 0, "live only: {entry:?}");
    match entry.event.and_then(|e| e.kind) {
        Some(Kind::Typing(t)) => t,
        other => panic!("not a Typing event: {other:?}"),
    }
}

#[tokio::test]
async fn typing_reaches_the_peer_and_small_group_members_live_only() {
    let env = TestCluster::start(Stores::Embedded).await;
    let (ann, ann_token) = env.user("ann").await;
    let (ben, ben_token) = env.user("ben").await;
    let (cat, cat_token) = env.user("cat").await;
    let (_, dan_token) = env.user("dan").await;
    let mut ann_dev = env.signed_in(&ann_token, "ann-1").await;
    let mut ben_dev = env.signed_in(&ben_token, "ben-1").await;
    let mut cat_dev = env.signed_in(&cat_token, "cat-1").await;
    let mut dan_dev = env.signed_in(&dan_token, "dan-1").await;

    let direct = format!("d:{}:{}", ann.min(ben), ann.max(ben));
    let sent = typing(&mut ann_dev, &direct).await;
    assert_eq!(
        sent,
        Body::Typing(TypingResponse {
            devices: 1,
            throttled: false
        })
    );
    let t = typed(&mut ben_dev).await;
    assert_eq!(
        (t.conversation_id.as_str(), t.user_id),
        (direct.as_str(), ann)
    );
    let again = typing(&mut ann_dev, &direct).await;
    assert_eq!(
        again,
        Body::Typing(TypingResponse {
            devices: 0,
            throttled: true
        })
    );
    assert!(ben_dev.pull(0).await.entries.is_empty(), "never stored");

    let group = env
        .create_group(
            ann,
            CreateGroupRequest {
                name: "trio".into(),
                member_ids: vec![ben, cat],
                ..Default::default()
            },
        )
        .await;
    let conversation = format!("g:{group}");
    typing(&mut cat_dev, &conversation).await;
    for device in [&mut ann_dev, &mut ben_dev] {
        // Group creation leaves inbox events first; the typing event follows them.
        let t = loop {
            let entry = device.next_push().await;
            if let Some(Kind::Typing(t)) = entry.event.and_then(|e| e.kind) {
                break t;
            }
        };
        assert_eq!(
            (t.conversation_id.as_str(), t.user_id),
            (conversation.as_str(), cat)
        );
    }

    let Body::Error(e) = typing(&mut dan_dev, &conversation).await else {
        panic!("an outsider typed");
    };
    assert_eq!(e.code, Code::NotFound as u32, "{e:?}");
    let Body::Error(e) = typing(&mut dan_dev, "g:x").await else {
        panic!("a bad id was taken");
    };
    assert_eq!(
        (e.code, e.field.as_str()),
        (Code::InvalidArgument as u32, "conversation_id")
    );
}
