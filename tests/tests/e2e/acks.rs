//! Acks of pushes end to end: a push the device does not acknowledge is written once more
//! after the ack timeout, and after another the connection is closed with a fatal error
//! (the device resyncs from its cursor); a device that acks keeps its connection and never
//! sees a push twice; a device that lets the window fill is closed at once.

use imesh_protos::gateway::server_frame::Body;
use imesh_tests::{Stores, TestCluster};
use tonic::Code;

async fn sent(env: &TestCluster, from: i64, to: i64, id: &str) {
    env.send_text(from, to, id, id).await;
}

#[tokio::test]
async fn an_unacked_push_is_resent_once_then_the_connection_closes_while_an_acking_one_stays() {
    let env = TestCluster::start_with(Stores::Embedded, |spec| {
        spec.gateway.ack_timeout_ms = 300;
    })
    .await;
    let (ann, _) = env.user("ann").await;
    let (ben_id, ben_token) = env.user("ben").await;
    let (cat_id, cat_token) = env.user("cat").await;
    let mut ben = env.signed_in(&ben_token, "ben-1").await;
    let mut cat = env.signed_in(&cat_token, "cat-1").await;

    sent(&env, ann, cat_id, "to-cat").await;
    let to_cat = cat.next_push().await;
    cat.ack(to_cat.sync_seq).await;

    sent(&env, ann, ben_id, "to-ben").await;
    let first = ben.next_push().await;
    let again = ben.next_push().await;
    assert_eq!(again, first, "the same entry, written again");
    let e = ben.closing_error().await;
    assert_eq!((e.code, e.fatal), (Code::DeadlineExceeded as u32, true));
    assert!(e.message.starts_with("ack: "), "{e:?}");

    // Ben's push was sent after Cat's and has been given up since: Cat's acked push had
    // every chance to be resent, and was not.
    assert!(matches!(cat.ping().await, Body::Pong(_)));
    assert_eq!(cat.take_pushes(), vec![]);
    assert_eq!(cat.take_unsolicited(), vec![]);

    // Ben reconnects and finds the entry after his cursor.
    let mut ben = env.signed_in(&ben_token, "ben-1").await;
    let page = ben.pull(0).await;
    assert!(page.entries.contains(&first), "{page:?}");
}

#[tokio::test]
async fn a_full_window_of_unacked_pushes_closes_the_connection() {
    let env = TestCluster::start_with(Stores::Embedded, |spec| {
        spec.gateway.unacked_window = 2;
    })
    .await;
    let (ann, _) = env.user("ann").await;
    let (ben_id, ben_token) = env.user("ben").await;
    let mut ben = env.signed_in(&ben_token, "ben-1").await;

    // One at a time, so each is its own push.
    for i in 0..3 {
        sent(&env, ann, ben_id, &format!("m{i}")).await;
        if i < 2 {
            ben.next_push().await;
        }
    }
    let e = ben.closing_error().await;
    assert_eq!(
        (e.code, e.fatal, e.message.as_str()),
        (
            Code::DeadlineExceeded as u32,
            true,
            "ack: more than 2 pushes unacknowledged; pull after your cursor"
        )
    );
}

/// The cursor sync-svc holds for `user`'s `device` (an ack of 0 moves nothing back).
async fn stored_cursor(env: &TestCluster, user: i64, device: &str) -> i64 {
    use imesh_kit::identity::Actor;
    use imesh_protos::sync::{AckRequest, sync_service_client::SyncServiceClient};
    let ask = AckRequest {
        device_id: device.into(),
        sync_seq: 0,
    };
    SyncServiceClient::new(env.channel(env.cluster.addrs.sync))
        .ack(env.caller.request(Actor::User(user), ask))
        .await
        .expect("ack answered")
        .into_inner()
        .acked_sync_seq
}

#[tokio::test]
async fn acks_reach_sync_svc_coalesced_and_a_bad_one_is_refused_by_field() {
    let env = TestCluster::start(Stores::Embedded).await;
    let (ann, _) = env.user("ann").await;
    let (ben, ben_token) = env.user("ben").await;
    let mut phone = env.signed_in(&ben_token, "phone").await;
    for k in 0..3 {
        sent(&env, ann, ben, &format!("m{k}")).await;
    }
    let mut last = 0;
    for _ in 0..3 {
        last = phone.next_push().await.sync_seq;
        phone.ack(last).await;
    }
    imesh_tests::eventually(
        "the acked cursor in sync-svc",
        imesh_tests::PATIENCE,
        || async { (stored_cursor(&env, ben, "phone").await == last).then_some(()) },
    )
    .await;
    let id = phone
        .send_frame(imesh_protos::gateway::client_frame::Body::Ack(
            imesh_protos::gateway::Ack { sync_seq: -1 },
        ))
        .await;
    match phone.reply(id).await {
        Body::Error(e) => {
            assert_eq!(
                (e.code, e.field.as_str()),
                (Code::InvalidArgument as u32, "ack.sync_seq")
            );
            assert!(!e.fatal, "{e:?}");
        }
        other => panic!("expected an error frame, got {other:?}"),
    }
    assert!(
        matches!(phone.ping().await, Body::Pong(_)),
        "the connection goes on"
    );
}
