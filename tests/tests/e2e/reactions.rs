//! Reactions end to end, through the gateway: a member reacts to a message, the other's
//! devices hear of it, history shows the counts with the reader's own marked, the list of
//! who reacted pages, and a bad emoji is refused naming the field. Runs on every available
//! store set.

use imesh_protos::{
    gateway::{client_frame, server_frame::Body},
    group::CreateGroupRequest,
    message::{ListReactorsRequest, ReactRequest, ReactionChanged, ReactionCount},
    sync::sync_event::Kind,
};
use imesh_tests::{Device, Stores, TestCluster};
use tonic::Code;

async fn react(device: &mut Device, conversation_id: &str, seq: i64, emoji: &str) -> Body {
    let request = ReactRequest {
        conversation_id: conversation_id.into(),
        seq,
        emoji: emoji.into(),
        remove: false,
    };
    let id = device.send_frame(client_frame::Body::React(request)).await;
    device.reply(id).await
}

/// The next reaction change of `conversation_id` pushed to `device`.
async fn reaction_changed(device: &mut Device, conversation_id: &str) -> ReactionChanged {
    device
        .pushed(|kind| match kind {
            Kind::Reaction(changed) if changed.conversation_id == conversation_id => Some(changed),
            _ => None,
        })
        .await
}

fn count(emoji: &str, count: i64, mine: bool) -> ReactionCount {
    ReactionCount {
        emoji: emoji.into(),
        count,
        mine,
    }
}

async fn scenario(stores: Stores) {
    let env = TestCluster::start(stores).await;
    let (alice, alice_token) = env.user("alice").await;
    let (bob, bob_token) = env.user("bob").await;
    let mut a = env.signed_in(&alice_token, "alice-phone").await;
    let mut b = env.signed_in(&bob_token, "bob-phone").await;
    let mut laptop = env.signed_in(&bob_token, "bob-laptop").await;

    let Body::SendAck(sent) = a.send_text(bob, "m", "ship it?").await else {
        panic!("{stores:?}: send refused");
    };
    let conversation = sent.conversation_id.as_str();
    let Body::Reactions(after) = react(&mut b, conversation, sent.seq, "🚀").await else {
        panic!("{stores:?}: bob's reaction refused");
    };
    assert_eq!(after.reactions, vec![count("🚀", 1, true)], "{stores:?}");
    let heard = reaction_changed(&mut a, conversation).await;
    assert_eq!(
        (heard.seq, heard.emoji.as_str(), heard.user_id, heard.added),
        (sent.seq, "🚀", bob, true),
        "{stores:?}"
    );
    let Body::Reactions(both) = react(&mut a, conversation, sent.seq, "🚀").await else {
        panic!("{stores:?}: alice's reaction refused");
    };
    assert_eq!(both.reactions, vec![count("🚀", 2, true)], "{stores:?}");
    for device in [&mut b, &mut laptop] {
        let heard = reaction_changed(device, conversation).await;
        assert_eq!(
            (heard.user_id, heard.emoji.as_str()),
            (bob, "🚀"),
            "{stores:?}: both of bob's devices hear of his own reaction"
        );
        let heard = reaction_changed(device, conversation).await;
        assert_eq!(heard.user_id, alice, "{stores:?}: and of alice's");
    }

    let page = b.history(conversation, 0).await;
    assert_eq!(
        page.messages[0].reactions,
        vec![count("🚀", 2, true)],
        "{stores:?}: history carries the counts"
    );
    let request = ListReactorsRequest {
        conversation_id: conversation.into(),
        seq: sent.seq,
        emoji: "🚀".into(),
        after_user_id: 0,
        limit: 1,
    };
    let id = b
        .send_frame(client_frame::Body::ListReactors(request))
        .await;
    let Body::Reactors(first) = b.reply(id).await else {
        panic!("{stores:?}: list_reactors refused");
    };
    assert_eq!(
        (first.user_ids, first.has_more),
        (vec![alice.min(bob)], true),
        "{stores:?}: one a page, in id order"
    );

    let Body::Error(refused) = react(&mut b, conversation, sent.seq, "two words").await else {
        panic!("{stores:?}: an emoji with a space was taken");
    };
    assert_eq!(refused.code, Code::InvalidArgument as u32, "{stores:?}");
    assert!(refused.message.starts_with("emoji:"), "{refused:?}");
    let Body::Error(missing) = react(&mut b, conversation, sent.seq + 100, "🚀").await else {
        panic!("{stores:?}: a reaction to no message was taken");
    };
    assert_eq!(missing.code, Code::NotFound as u32, "{stores:?}");

    // In a (small) group every member hears of each reaction.
    let group = env
        .create_group(
            alice,
            CreateGroupRequest {
                name: "crew".into(),
                member_ids: vec![bob],
                ..Default::default()
            },
        )
        .await;
    let Body::SendAck(said) = b.send_group_text(group, "g", "standup at 10").await else {
        panic!("{stores:?}: group send refused");
    };
    let Body::Reactions(_) = react(&mut a, &said.conversation_id, said.seq, "👌").await else {
        panic!("{stores:?}: the group reaction refused");
    };
    let heard = reaction_changed(&mut laptop, &said.conversation_id).await;
    assert_eq!((heard.seq, heard.user_id), (said.seq, alice), "{stores:?}");
}

#[tokio::test]
async fn a_reaction_reaches_the_other_member_and_shows_in_history() {
    for stores in Stores::available() {
        scenario(stores).await;
    }
}
