//! Bad input on the slice: refused with a precise error, nothing lost, the server serving on.

use imesh_kit::identity::Actor;
use imesh_protos::{
    gateway::{client_frame, server_frame::Body},
    message::{HistoryRequest, SendRequest, message_service_client::MessageServiceClient},
    sync::{MarkReadRequest, UpdateConversationRequest},
};
use imesh_tests::{JWT_SECRET, Stores, TestCluster};
use tonic::Code;

#[tokio::test]
async fn bad_and_expired_tokens_get_an_auth_error_and_the_connection_closes() {
    let env = TestCluster::start(Stores::Embedded).await;
    let expired = jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &serde_json::json!({ "sub": "42", "iat": 1, "exp": 1000 }),
        &jsonwebtoken::EncodingKey::from_secret(JWT_SECRET.as_bytes()).unwrap(),
    )
    .unwrap();
    for (token, says) in [
        ("not-a-token", "not a valid token"),
        (expired.as_str(), "expired"),
    ] {
        let mut device = env.device().await;
        let error = device
            .auth(token, "phone")
            .await
            .expect_err("token refused");
        assert_eq!(error.code, Code::Unauthenticated as u32);
        assert!(error.fatal && error.message.contains(says), "{error:?}");
        assert!(
            device.read().await.is_none(),
            "the connection is closed after an auth error"
        );
    }
    // Any frame other than auth first is refused the same way.
    let mut device = env.device().await;
    let Body::Error(error) = device.ping().await else {
        panic!("ping before auth accepted")
    };
    assert_eq!(error.code, Code::Unauthenticated as u32);
    assert!(device.read().await.is_none());
}

#[tokio::test]
async fn malformed_frames_get_an_error_and_the_connection_keeps_serving() {
    let env = TestCluster::start(Stores::Embedded).await;
    let (_, token) = env.user("carol").await;
    let mut device = env.signed_in(&token, "phone").await;
    device.send_raw(vec![0xff, 0xff, 0xff, 0x01]).await;
    let frame = device.read().await.expect("an error frame, not a close");
    let Some(Body::Error(error)) = frame.body else {
        panic!("expected an error: {frame:?}")
    };
    assert_eq!(error.code, Code::InvalidArgument as u32);
    assert!(
        !error.fatal && error.message.starts_with("frame:"),
        "{error:?}"
    );
    assert!(
        matches!(device.ping().await, Body::Pong(_)),
        "still serving after a malformed frame"
    );
}

#[tokio::test]
async fn sends_to_unknown_users_and_bad_bodies_are_refused_precisely() {
    let env = TestCluster::start(Stores::Embedded).await;
    let (dave, token) = env.user("dave").await;
    let (erin, _) = env.user("erin").await;
    let mut device = env.signed_in(&token, "phone").await;
    let error = |body: Body| match body {
        Body::Error(e) => e,
        other => panic!("expected an error, got {other:?}"),
    };
    let unknown = error(device.send_text(123_456, "u1", "anyone?").await);
    assert_eq!(unknown.code, Code::NotFound as u32, "{unknown:?}");
    let empty = error(device.send_text(erin, "e1", "").await);
    assert_eq!(
        (empty.code, empty.field.as_str()),
        (Code::InvalidArgument as u32, "content.text"),
        "{empty:?}"
    );
    let oversized = error(device.send_text(erin, "o1", &"x".repeat(13 * 1024)).await);
    assert_eq!(oversized.code, Code::InvalidArgument as u32);
    assert!(
        oversized.message.contains("12288"),
        "the error names the limit: {oversized:?}"
    );
    // Nothing was stored: the next good message is the conversation's first.
    let Body::SendAck(ack) = device.send_text(erin, "ok", "hi").await else {
        panic!("good send refused")
    };
    assert_eq!(ack.seq, 1);
    assert_ne!(dave, erin);
    // A history page goes one way: before a seq or after one, not both.
    let both = HistoryRequest {
        conversation_id: ack.conversation_id.clone(),
        before_seq: 5,
        after_seq: 1,
        limit: 0,
    };
    let id = device.send_frame(client_frame::Body::History(both)).await;
    let refused = error(device.reply(id).await);
    assert_eq!(
        (refused.code, refused.field.as_str()),
        (Code::InvalidArgument as u32, "after_seq"),
        "{refused:?}"
    );
    // Marks and settings name their faults too.
    let id = device
        .send_frame(client_frame::Body::MarkRead(MarkReadRequest {
            marks: vec![],
        }))
        .await;
    assert_eq!(error(device.reply(id).await).field, "marks");
    let stranger = UpdateConversationRequest {
        conversation_id: "d:1:2".into(),
        pinned: Some(true),
        muted: None,
    };
    let id = device
        .send_frame(client_frame::Body::UpdateConversation(stranger))
        .await;
    assert_eq!(error(device.reply(id).await).code, Code::NotFound as u32);
}

#[tokio::test]
async fn internal_grpc_needs_the_credential_and_takes_identity_from_metadata_only() {
    let env = TestCluster::start(Stores::Embedded).await;
    let (alice, _) = env.user("alice").await;
    let (bob, _) = env.user("bob").await;
    let mut messages = MessageServiceClient::new(env.channel(env.cluster.addrs.message));
    let request = || SendRequest {
        client_msg_id: "g1".into(),
        to: Some(imesh_protos::message::send_request::To::UserId(bob)),
        content: Some(imesh_protos::message::Content {
            kind: Some(imesh_protos::message::content::Kind::Text(
                imesh_protos::message::Text { text: "hi".into() },
            )),
        }),
        ..SendRequest::default()
    };
    let missing = messages
        .send(tonic::Request::new(request()))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::Unauthenticated);
    let as_system = messages
        .send(env.caller.request(Actor::System, request()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        as_system.conversation_id,
        format!("s:{bob}"),
        "the system actor writes to the user's notice conversation"
    );
    let sent = messages
        .send(env.caller.request(Actor::User(alice), request()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        sent.conversation_id,
        format!("d:{}:{}", alice.min(bob), alice.max(bob))
    );
}

#[tokio::test]
async fn a_flooding_connection_is_told_to_wait_and_keeps_serving() {
    let env = TestCluster::start_with(Stores::Embedded, |spec| {
        spec.gateway.frames_per_sec = 5;
    })
    .await;
    let (_, token) = env.user("flood").await;
    let mut device = env.signed_in(&token, "phone").await;
    // A burst of twice the rate passes; the frames past it are refused one by one.
    let mut sent = Vec::new();
    for _ in 0..30 {
        sent.push(
            device
                .send_frame(client_frame::Body::Ping(imesh_protos::gateway::Ping {}))
                .await,
        );
    }
    let replies = device.replies(&sent).await;
    let pongs = replies
        .iter()
        .filter(|r| matches!(r, Body::Pong(_)))
        .count();
    let waits: Vec<u64> = replies
        .iter()
        .filter_map(|r| match r {
            Body::Error(e) if e.code == Code::ResourceExhausted as u32 => {
                assert!(e.message.contains("5 per second"), "{e:?}");
                assert!(!e.fatal, "{e:?}");
                Some(e.retry_after_ms)
            }
            _ => None,
        })
        .collect();
    assert!(
        (10..=12).contains(&pongs),
        "a burst of 10 passes: {replies:?}"
    );
    assert_eq!(
        pongs + waits.len(),
        30,
        "every frame is answered: {replies:?}"
    );
    assert!(waits.iter().all(|ms| (1..=1000).contains(ms)), "{waits:?}");
    // The bucket refills: the same connection is served again within the wait it named.
    let device = std::sync::Arc::new(tokio::sync::Mutex::new(device));
    imesh_tests::eventually(
        "a pong after the wait",
        std::time::Duration::from_secs(2),
        || {
            let device = device.clone();
            async move { matches!(device.lock().await.ping().await, Body::Pong(_)).then_some(()) }
        },
    )
    .await;
}
