//! Search end to end, through the gateway: a user finds the messages of their direct
//! conversations and groups holding every word they typed, newest first, a page at a time;
//! a recalled message is not found; a bad query is refused naming the field. Runs on every
//! available store set (SQLite FTS5, PostgreSQL and MySQL full-text indexes).

use imesh_protos::{
    gateway::{client_frame, server_frame::Body},
    group::CreateGroupRequest,
    message::{RecallRequest, SearchRequest, SearchResponse},
};
use imesh_tests::{Device, Stores, TestCluster};
use tonic::Code;

async fn search(device: &mut Device, query: &str, before_msg_id: i64, limit: u32) -> Body {
    let request = SearchRequest {
        query: query.into(),
        conversation_id: String::new(),
        before_msg_id,
        limit,
    };
    let id = device.send_frame(client_frame::Body::Search(request)).await;
    device.reply(id).await
}

fn texts(found: &SearchResponse) -> Vec<String> {
    found
        .messages
        .iter()
        .filter_map(|m| match m.content.as_ref()?.kind.as_ref()? {
            imesh_protos::message::content::Kind::Text(t) => Some(t.text.clone()),
            _ => None,
        })
        .collect()
}

async fn scenario(stores: Stores) {
    let env = TestCluster::start(stores).await;
    let (alice, alice_token) = env.user("alice").await;
    let (bob, bob_token) = env.user("bob").await;
    let (carol, _) = env.user("carol").await;
    let mut a = env.signed_in(&alice_token, "alice-phone").await;
    let mut b = env.signed_in(&bob_token, "bob-phone").await;
    let group = env
        .create_group(
            alice,
            CreateGroupRequest {
                name: "launch".into(),
                member_ids: vec![bob],
                ..Default::default()
            },
        )
        .await;
    let Body::SendAck(first) = a.send_text(bob, "m1", "Rocket launch moved").await else {
        panic!("{stores:?}: send refused");
    };
    let Body::SendAck(_) = a
        .send_group_text(group, "m2", "launch checklist ready")
        .await
    else {
        panic!("{stores:?}: group send refused");
    };
    let Body::SendAck(_) = a.send_text(carol, "m3", "launch gossip for carol").await else {
        panic!("{stores:?}: send refused");
    };

    let Body::Search(found) = search(&mut b, "LAUNCH", 0, 0).await else {
        panic!("{stores:?}: search refused");
    };
    assert_eq!(
        texts(&found),
        vec!["launch checklist ready", "Rocket launch moved"],
        "{stores:?}: bob's conversations only, newest first"
    );
    let Body::Search(page) = search(&mut b, "launch", 0, 1).await else {
        panic!("{stores:?}: search refused");
    };
    let Body::Search(next) = search(&mut b, "launch", page.next_before_msg_id, 1).await else {
        panic!("{stores:?}: search refused");
    };
    assert_eq!(texts(&next), vec!["Rocket launch moved"], "{stores:?}");

    let request = RecallRequest {
        conversation_id: first.conversation_id.clone(),
        seq: first.seq,
    };
    let id = a.send_frame(client_frame::Body::Recall(request)).await;
    let Body::Recall(_) = a.reply(id).await else {
        panic!("{stores:?}: recall refused");
    };
    let Body::Search(found) = search(&mut b, "rocket", 0, 0).await else {
        panic!("{stores:?}: search refused");
    };
    assert!(found.messages.is_empty(), "{stores:?}: recalled, not found");

    let Body::Error(refused) = search(&mut b, "  ?? ", 0, 0).await else {
        panic!("{stores:?}: a query without words was taken");
    };
    assert_eq!(refused.code, Code::InvalidArgument as u32, "{stores:?}");
    assert!(refused.message.starts_with("query:"), "{refused:?}");
}

#[tokio::test]
async fn a_user_finds_their_own_messages_by_words_newest_first() {
    for stores in Stores::available() {
        scenario(stores).await;
    }
}
