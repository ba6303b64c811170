//! Delete for me, clear my history and remove a conversation from my list, end to end
//! through the gateway: the user's other device hears of it, their history or list loses
//! it, the peer's does not; after a clear or a removal, new messages show as usual. Runs on
//! every available store set.

use imesh_protos::{
    gateway::{client_frame, server_frame::Body},
    message::{ClearHistoryRequest, DeleteForMeRequest, HiddenForMe},
    sync::{Conversation, ConversationsRequest, RemoveConversationRequest, sync_event::Kind},
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

async fn conversations(device: &mut Device) -> Vec<Conversation> {
    let id = device
        .send_frame(client_frame::Body::Conversations(
            ConversationsRequest::default(),
        ))
        .await;
    let Body::Conversations(list) = device.reply(id).await else {
        panic!("conversations refused");
    };
    list.conversations
}

async fn removing(stores: Stores) {
    let env = TestCluster::start(stores).await;
    let (alice, alice_token) = env.user("alice").await;
    let (_, bob_token) = env.user("bob").await;
    let mut phone = env.signed_in(&alice_token, "alice-phone").await;
    let mut laptop = env.signed_in(&alice_token, "alice-laptop").await;
    let mut b = env.signed_in(&bob_token, "bob-phone").await;
    let Body::SendAck(sent) = b.send_text(alice, "m1", "spam?").await else {
        panic!("{stores:?}: send refused");
    };
    // Alice removes what reached her.
    phone
        .pushed(|kind| match kind {
            Kind::Message(m) if m.seq == sent.seq => Some(()),
            _ => None,
        })
        .await;
    let request = RemoveConversationRequest {
        conversation_id: sent.conversation_id.clone(),
    };
    let id = phone
        .send_frame(client_frame::Body::RemoveConversation(request))
        .await;
    let reply = phone.reply(id).await;
    let Body::Removed(removed) = reply else {
        panic!("{stores:?}: remove refused: {reply:?}");
    };
    assert_eq!(removed.removed_seq, sent.seq, "{stores:?}");
    let heard = laptop
        .pushed(|kind| match kind {
            Kind::Removed(r) if r.conversation_id == sent.conversation_id => Some(r),
            _ => None,
        })
        .await;
    assert_eq!(heard.removed_seq, sent.seq, "{stores:?}");
    assert!(conversations(&mut laptop).await.is_empty(), "{stores:?}");
    assert_eq!(
        conversations(&mut b).await.len(),
        1,
        "{stores:?}: bob keeps it"
    );
    assert_eq!(
        history_seqs(&mut phone, &sent.conversation_id).await,
        vec![sent.seq],
        "{stores:?}: history is untouched"
    );
    let Body::SendAck(later) = b.send_text(alice, "m2", "hello again").await else {
        panic!("{stores:?}: send refused");
    };
    phone
        .pushed(|kind| match kind {
            Kind::Message(m) if m.seq == later.seq => Some(()),
            _ => None,
        })
        .await;
    let back = conversations(&mut phone).await;
    assert_eq!(
        back.iter()
            .map(|c| (c.latest_seq, c.unread))
            .collect::<Vec<_>>(),
        vec![(later.seq, 1)],
        "{stores:?}: back with only the newer message unread"
    );
}

#[tokio::test]
async fn removing_a_conversation_takes_it_off_my_list_until_a_newer_message() {
    for stores in Stores::available() {
        removing(stores).await;
    }
}

#[tokio::test]
async fn hiding_messages_changes_only_my_view_and_reaches_my_other_devices() {
    for stores in Stores::available() {
        scenario(stores).await;
    }
}
