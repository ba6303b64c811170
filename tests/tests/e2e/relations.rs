//! The relation chain end to end: a friend request and its acceptance reach both users'
//! devices as sync events, a block refuses direct messages at the gateway, and disabling a
//! user revokes their tokens. Runs on every available store set.

use imesh_kit::identity::Actor;
use imesh_protos::{
    gateway::server_frame::Body,
    relation::{
        self as pb, BlockRequest, FriendStatus, RequestState, RespondFriendRequestRequest,
        SendFriendRequestRequest, SetDisabledRequest,
    },
    sync::{InboxEntry, sync_event::Kind},
};
use imesh_tests::{Device, Stores, TestCluster};
use tonic::Code;

fn kind(entry: &InboxEntry) -> Kind {
    entry.event.clone().and_then(|e| e.kind).expect("an event")
}

/// The next pushed friend-request event.
async fn request_event(device: &mut Device) -> pb::FriendRequest {
    loop {
        if let Kind::FriendRequest(changed) = kind(&device.next_push().await) {
            return changed.request.expect("a request");
        }
    }
}

/// The next pushed relation-row event.
async fn friendship_event(device: &mut Device) -> pb::Friendship {
    loop {
        if let Kind::Friendship(changed) = kind(&device.next_push().await) {
            return changed.friendship.expect("a row");
        }
    }
}

async fn scenario(stores: Stores) {
    let env = TestCluster::start(stores).await;
    let (alice, alice_token) = env.user("alice").await;
    let (bob, bob_token) = env.user("bob").await;
    let mut a = env.signed_in(&alice_token, "alice-phone").await;
    let mut b = env.signed_in(&bob_token, "bob-phone").await;

    let ask = SendFriendRequestRequest {
        to_user_id: bob,
        message: "hi, it's alice".into(),
        add_source: "search".into(),
    };
    let sent = env
        .relation()
        .send_friend_request(env.caller.request(Actor::User(alice), ask))
        .await
        .unwrap()
        .into_inner();
    let request = sent.request.expect("a pending request");
    let seen_by_bob = request_event(&mut b).await;
    assert_eq!(
        (seen_by_bob.request_id, seen_by_bob.state()),
        (request.request_id, RequestState::Pending),
        "{stores:?}"
    );
    assert_eq!(seen_by_bob.message, "hi, it's alice");

    let accept = RespondFriendRequestRequest {
        request_id: request.request_id,
        accept: true,
    };
    env.relation()
        .respond_friend_request(env.caller.request(Actor::User(bob), accept))
        .await
        .unwrap();
    for (device, owner, peer) in [(&mut a, alice, bob), (&mut b, bob, alice)] {
        let row = friendship_event(device).await;
        assert_eq!(
            (row.owner_id, row.peer_id, row.status()),
            (owner, peer, FriendStatus::Friend),
            "{stores:?}"
        );
    }

    // Friends can talk; once bob blocks alice, her messages are refused and nothing is stored.
    let Body::SendAck(_) = a.send_text(bob, "m1", "hello friend").await else {
        panic!("send refused")
    };
    env.relation()
        .block(
            env.caller
                .request(Actor::User(bob), BlockRequest { peer_id: alice }),
        )
        .await
        .unwrap();
    let Body::Error(refused) = a.send_text(bob, "m2", "still there?").await else {
        panic!("a blocked send went through")
    };
    assert_eq!(
        refused.code,
        Code::PermissionDenied as u32,
        "{stores:?}: {refused:?}"
    );
    assert!(refused.message.contains("does not accept"), "{refused:?}");

    // Disabling bob revokes the token he holds: a new connection with it is refused.
    let disable = SetDisabledRequest {
        user_id: bob,
        disabled: true,
    };
    env.relation()
        .set_disabled(env.caller.request(Actor::System, disable))
        .await
        .unwrap();
    let mut again = env.device().await;
    let error = again
        .auth(&bob_token, "bob-tablet")
        .await
        .expect_err("a revoked token");
    assert_eq!(
        error.code,
        Code::Unauthenticated as u32,
        "{stores:?}: {error:?}"
    );
    assert!(
        error.fatal && error.message.contains("revoked"),
        "{error:?}"
    );
    env.cluster.stop().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn friend_requests_reach_both_devices_and_blocks_and_disables_take_effect() {
    for stores in Stores::available() {
        scenario(stores).await;
    }
}
