//! Delete for me and clear my history, end to end through the gateway: the user's other
//! device hears of it, their history loses the messages, the peer's does not; after a
//! clear, new messages show as usual. Runs on every available store set.

use imesh_protos::{
    gateway::{client_frame, server_frame::Body},
    message::{ClearHistoryRequest, DeleteForMeRequest, HiddenForMe},
    sync::sync_event::Kind,
};
use imesh_tests::{Device, Stores, TestCluster};

async fn history_seqs(device: &mut Device, conversation_id: &str) -> Vec<i64> {
    let page = device.history(conversation_id, 0).await;
    page.messages.iter().map(|m| m.seq).collect()
}

async fn hidden(device: &mut Device, conversation_id: &str) -> HiddenForMe {
    device
        .pushed(|kind| match kind {
            Kind::Hidden(hidden) if hidden.conversation_id == conversation_id => Some(hidden),
            _ => None,
        })
        .await
}

async fn scenario(stores: Stores) {
    let env = TestCluster::start(stores).await;
    let (alice, alice_token) = env.user("alice").await;
    let (bob, bob_token) = env.user("bob").await;
    let mut phone = env.signed_in(&alice_token, "alice-phone").await;
    let mut laptop = env.signed_in(&alice_token, "alice-laptop").await;
    let mut b = env.signed_in(&bob_token, "bob-phone").await;
    let mut conversation = String::new();
    for (id, body) in [("m1", "first"), ("m2", "second")] {
        let Body::SendAck(sent) = phone.send_text(bob, id, body).await else {
            panic!("{stores:?}: send refused");
        };
        conversation = sent.conversation_id;
    }

    let request = DeleteForMeRequest {
        conversation_id: conversation.clone(),
        seqs: vec![1],
    };
    let id = phone
        .send_frame(client_frame::Body::DeleteForMe(request))
        .await;
    let Body::Hidden(reply) = phone.reply(id).await else {
        panic!("{stores:?}: delete for me refused");
    };
    assert_eq!(reply.seqs, vec![1], "{stores:?}");
    assert_eq!(
        hidden(&mut laptop, &conversation).await.seqs,
        vec![1],
        "{stores:?}"
    );
    assert_eq!(
        history_seqs(&mut laptop, &conversation).await,
        vec![2],
        "{stores:?}"
    );
    assert_eq!(
        history_seqs(&mut b, &conversation).await,
        vec![2, 1],
        "{stores:?}"
    );

    let request = ClearHistoryRequest {
        conversation_id: conversation.clone(),
    };
    let id = phone
        .send_frame(client_frame::Body::ClearHistory(request))
        .await;
    let Body::Hidden(cleared) = phone.reply(id).await else {
        panic!("{stores:?}: clear history refused");
    };
    assert_eq!(cleared.cleared_seq, 2, "{stores:?}");
    assert!(
        history_seqs(&mut phone, &conversation).await.is_empty(),
        "{stores:?}"
    );
    let Body::SendAck(later) = b.send_text(alice, "m3", "third").await else {
        panic!("{stores:?}: bob's send refused");
    };
    assert_eq!(
        history_seqs(&mut phone, &conversation).await,
        vec![later.seq],
        "{stores:?}: later messages show as usual"
    );
    assert_eq!(
        history_seqs(&mut b, &conversation).await.len(),
        3,
        "{stores:?}"
    );
}

#[tokio::test]
async fn hiding_messages_changes_only_my_view_and_reaches_my_other_devices() {
    for stores in Stores::available() {
        scenario(stores).await;
    }
}
