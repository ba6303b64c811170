//! Presence changes reach friends: when a user connects and disconnects, a friend's device
//! gets live PresenceChanged events with the user's platforms; a stranger hears nothing.

use imesh_kit::identity::Actor;
use imesh_protos::{
    relation::SendFriendRequestRequest,
    sync::{PresenceChanged, sync_event::Kind},
};
use imesh_tests::{Device, Stores, TestCluster};

/// Makes `a` and `b` friends: each asks the other.
async fn befriend(env: &TestCluster, a: i64, b: i64) {
    for (from, to) in [(a, b), (b, a)] {
        let ask = SendFriendRequestRequest {
            to_user_id: to,
            ..Default::default()
        };
        env.relation()
            .send_friend_request(env.caller.request(Actor::User(from), ask))
            .await
            .expect("friend request");
    }
}

/// The next PresenceChanged push, skipping other events (e.g. the friendship's).
async fn presence_of(device: &mut Device) -> PresenceChanged {
    loop {
        let entry = device.next_push().await;
        if let Some(Kind::Presence(p)) = entry.event.and_then(|e| e.kind) {
            assert_eq!(entry.sync_seq, 0, "live only");
            return p;
        }
    }
}

#[tokio::test]
async fn friends_hear_when_a_user_comes_and_goes() {
    let env = TestCluster::start(Stores::Embedded).await;
    let (ann, ann_token) = env.user("ann").await;
    let (ben, ben_token) = env.user("ben").await;
    let (_, cat_token) = env.user("cat").await;
    befriend(&env, ann, ben).await;
    let mut ben_dev = env.signed_in(&ben_token, "ben-1").await;
    let mut cat_dev = env.signed_in(&cat_token, "cat-1").await;

    let ann_dev = env.signed_in(&ann_token, "ann-1").await;
    assert_eq!(
        presence_of(&mut ben_dev).await,
        PresenceChanged {
            user_id: ann,
            online: true,
            platforms: vec!["test-ann-1".into()]
        }
    );
    ann_dev.close().await;
    assert_eq!(
        presence_of(&mut ben_dev).await,
        PresenceChanged {
            user_id: ann,
            online: false,
            platforms: vec![]
        }
    );
    assert!(matches!(
        cat_dev.ping().await,
        imesh_protos::gateway::server_frame::Body::Pong(_)
    ));
    assert_eq!(cat_dev.take_pushes(), vec![], "a stranger hears nothing");
}
