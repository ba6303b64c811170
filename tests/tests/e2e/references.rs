//! Replies and forwards end to end, through the gateway: a reply reaches the peer quoting
//! an excerpt, and once the quoted message is recalled history marks it recalled; a forward
//! into a group reaches its members as a copy carrying the original's origin, and a user
//! cannot forward what they cannot read. Runs on every available store set.

use imesh_protos::{
    gateway::server_frame::Body,
    group::CreateGroupRequest,
    message::{Content, Message, MessageRef, SendRequest, Text, content, send_request::To},
    sync::sync_event::Kind,
};
use imesh_tests::{Device, Stores, TestCluster};
use tonic::Code;

fn text(text: &str) -> Option<Content> {
    Some(Content {
        kind: Some(content::Kind::Text(Text { text: text.into() })),
    })
}

/// The next pushed message `sender` sent, skipping other events.
async fn next_message_from(device: &mut Device, sender: i64) -> Message {
    device
        .pushed(|kind| match kind {
            Kind::Message(m) if m.sender_id == sender => Some(m),
            _ => None,
        })
        .await
}

async fn scenario(stores: Stores) {
    let env = TestCluster::start(stores).await;
    let (alice, alice_token) = env.user("alice").await;
    let (bob, bob_token) = env.user("bob").await;
    let (carol, carol_token) = env.user("carol").await;
    let mut a = env.signed_in(&alice_token, "alice-phone").await;
    let mut b = env.signed_in(&bob_token, "bob-phone").await;
    let mut c = env.signed_in(&carol_token, "carol-phone").await;

    let Body::SendAck(question) = b.send_text(alice, "q", "lunch at noon?").await else {
        panic!("{stores:?}: send refused");
    };
    next_message_from(&mut a, bob).await;
    let reply = SendRequest {
        client_msg_id: "r".into(),
        to: Some(To::UserId(bob)),
        content: text("yes"),
        reply_to_seq: question.seq,
        ..SendRequest::default()
    };
    let Body::SendAck(_) = a.send(reply).await else {
        panic!("{stores:?}: reply refused");
    };
    let pushed = next_message_from(&mut b, alice).await;
    let quoted = pushed.reply.expect("the reply quotes");
    assert_eq!(
        (
            quoted.seq,
            quoted.sender_id,
            quoted.excerpt.as_str(),
            quoted.recalled
        ),
        (question.seq, bob, "lunch at noon?", false),
        "{stores:?}"
    );

    // Alice forwards bob's question into a group with carol.
    let group = env
        .create_group(
            alice,
            CreateGroupRequest {
                name: "team".into(),
                member_ids: vec![carol],
                ..Default::default()
            },
        )
        .await;
    let forward = SendRequest {
        client_msg_id: "f".into(),
        to: Some(To::GroupId(group)),
        forward: Some(MessageRef {
            conversation_id: question.conversation_id.clone(),
            seq: question.seq,
        }),
        ..SendRequest::default()
    };
    let Body::SendAck(_) = a.send(forward).await else {
        panic!("{stores:?}: forward refused");
    };
    let copy = next_message_from(&mut c, alice).await;
    assert_eq!(copy.content, text("lunch at noon?"), "{stores:?}");
    let origin = copy.forwarded.expect("the copy's origin");
    assert_eq!(
        (origin.msg_id, origin.sender_id),
        (question.msg_id, bob),
        "{stores:?}"
    );
    // Carol is not in alice and bob's conversation: nothing of it can be forwarded by her.
    let stolen = SendRequest {
        client_msg_id: "s".into(),
        to: Some(To::GroupId(group)),
        forward: Some(MessageRef {
            conversation_id: question.conversation_id.clone(),
            seq: question.seq,
        }),
        ..SendRequest::default()
    };
    let Body::Error(refused) = c.send(stolen).await else {
        panic!("{stores:?}: carol forwarded a message she cannot read");
    };
    assert_eq!(refused.code, Code::InvalidArgument as u32, "{stores:?}");
    assert!(
        refused.message.starts_with("forward:"),
        "{stores:?}: {refused:?}"
    );

    // Bob recalls the question: the reply's quote is marked recalled, its excerpt stays.
    let Body::Recall(_) = b.recall(&question.conversation_id, question.seq).await else {
        panic!("{stores:?}: recall refused");
    };
    let history = a.history(&question.conversation_id, 0).await;
    let quote = history
        .messages
        .iter()
        .find_map(|m| m.reply.clone())
        .expect("the reply in history");
    assert!(quote.recalled, "{stores:?}");
    assert_eq!(quote.excerpt, "lunch at noon?", "{stores:?}");
}

#[tokio::test]
async fn replies_quote_and_forwards_copy_with_their_origin() {
    for stores in Stores::available() {
        scenario(stores).await;
    }
}
