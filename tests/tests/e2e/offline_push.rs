//! Offline push end to end: a message to a user with no live connection reaches a real
//! HTTP receiver as a webhook with the badge and the preview; a muted (do-not-disturb)
//! conversation and the user's quiet hours send none; the preview policy set from a device
//! hides the text.

use std::{net::SocketAddr, sync::Arc};

use axum::{Json, Router, extract::State, routing::post};
use imesh_kit::identity::Actor;
use imesh_protos::{
    gateway::{client_frame, server_frame::Body},
    notify::{QueryPresenceRequest, notify_service_client::NotifyServiceClient},
    sync::{
        Preview, PushSettings, UpdateConversationRequest, sync_service_client::SyncServiceClient,
    },
};
use imesh_tests::{PATIENCE, Stores, TestCluster, eventually, scrape};
use serde_json::Value;
use tokio::sync::Mutex;

type Received = Arc<Mutex<Vec<Value>>>;

/// An HTTP server on loopback that keeps every JSON body POSTed to `/push`.
async fn receiver() -> (SocketAddr, Received) {
    let received = Received::default();
    let app = Router::new()
        .route(
            "/push",
            post(
                |State(r): State<Received>, Json(body): Json<Value>| async move {
                    r.lock().await.push(body);
                },
            ),
        )
        .with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, received)
}

/// The notification for message `msg_id`, once it has come.
async fn notified(received: &Received, msg_id: i64) -> Value {
    eventually("the webhook", PATIENCE, || async {
        let got = received.lock().await;
        got.iter().find(|n| n["msg_id"] == msg_id).cloned()
    })
    .await
}

/// Waits until notify-svc has decided not to push `n` messages in all.
async fn suppressed(env: &TestCluster, n: u64) {
    eventually("the suppressed count", PATIENCE, || async {
        let text = scrape(env.cluster.addrs.notify).await;
        let count: u64 = text
            .lines()
            .find(|l| l.contains("offline_pushes_total{") && l.contains("outcome=\"suppressed\""))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0);
        (count >= n).then_some(())
    })
    .await;
}

async fn none_for(received: &Received, msg_id: i64) {
    let got = received.lock().await;
    assert!(
        got.iter().all(|n| n["msg_id"] != msg_id),
        "pushed although it should not be: {got:?}"
    );
}

#[tokio::test]
async fn offline_users_get_webhooks_except_in_muted_conversations_and_quiet_hours() {
    let (addr, received) = receiver().await;
    let env = TestCluster::start_with(Stores::Embedded, |spec| {
        spec.notify.offline_push.webhook_url = format!("http://{addr}/push");
    })
    .await;
    let (bob, bob_token) = env.user("bob").await;
    let (alice, _) = env.user("alice").await;
    let (carol, _) = env.user("carol").await;

    let hello = env.send_text(alice, bob, "a1", "hello bob").await;
    let n = notified(&received, hello.msg_id).await;
    assert_eq!(n["user_id"], bob);
    assert_eq!(n["sender_id"], alice);
    assert_eq!(n["body"], "hello bob");
    assert_eq!(n["preview"], "full");
    assert_eq!(n["badge"], 1);
    assert_eq!(n["seq"], hello.seq);
    assert_eq!(
        n["conversation_id"],
        format!("d:{}:{}", alice.min(bob), alice.max(bob))
    );

    // Bob mutes Carol: her next message sends nothing, and leaves the badge.
    let first = env.send_text(carol, bob, "c1", "hi").await;
    assert_eq!(notified(&received, first.msg_id).await["badge"], 2);
    let mute = UpdateConversationRequest {
        conversation_id: format!("d:{}:{}", carol.min(bob), carol.max(bob)),
        muted: Some(true),
        pinned: None,
    };
    SyncServiceClient::new(env.channel(env.cluster.addrs.sync))
        .update_conversation(env.caller.request(Actor::User(bob), mute))
        .await
        .unwrap();
    let muted = env.send_text(carol, bob, "c2", "still there?").await;
    suppressed(&env, 1).await;
    let again = env.send_text(alice, bob, "a2", "again").await;
    assert_eq!(notified(&received, again.msg_id).await["badge"], 2);
    none_for(&received, muted.msg_id).await;

    // Quiet hours all day, set from Bob's phone; then he goes offline.
    let mut phone = env.signed_in(&bob_token, "phone").await;
    let all_day = PushSettings {
        quiet_start_min: 0,
        quiet_end_min: 1440,
        utc_offset_min: 0,
        preview: Preview::Sender as i32,
    };
    let id = phone
        .send_frame(client_frame::Body::PushSettings(all_day))
        .await;
    assert_eq!(phone.reply(id).await, Body::PushSettings(all_day));
    phone.close().await;
    let notify = NotifyServiceClient::new(env.channel(env.cluster.addrs.notify));
    eventually("bob offline", PATIENCE, || {
        let mut notify = notify.clone();
        let ask = env.caller.request(
            Actor::System,
            QueryPresenceRequest {
                user_ids: vec![bob],
            },
        );
        async move {
            let users = notify.query_presence(ask).await.unwrap().into_inner().users;
            (!users[0].online).then_some(())
        }
    })
    .await;
    let quiet = env.send_text(alice, bob, "a3", "psst").await;
    suppressed(&env, 2).await;

    // Quiet hours off, previews still sender-only.
    let loud = PushSettings {
        quiet_start_min: 0,
        quiet_end_min: 0,
        ..all_day
    };
    SyncServiceClient::new(env.channel(env.cluster.addrs.sync))
        .update_push_settings(env.caller.request(Actor::User(bob), loud))
        .await
        .unwrap();
    let after = env.send_text(alice, bob, "a4", "wake up").await;
    let n = notified(&received, after.msg_id).await;
    assert_eq!(
        (n["preview"].as_str(), n["body"].as_str()),
        (Some("sender"), Some(""))
    );
    assert_eq!(n["sender_id"], alice);
    none_for(&received, quiet.msg_id).await;

    // Bad settings are refused by field.
    let bad = PushSettings {
        quiet_start_min: 2000,
        ..loud
    };
    let e = SyncServiceClient::new(env.channel(env.cluster.addrs.sync))
        .update_push_settings(env.caller.request(Actor::User(bob), bad))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().starts_with("quiet_start_min: "), "{e:?}");
}
