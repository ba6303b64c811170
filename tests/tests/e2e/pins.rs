//! Pinned messages end to end, through the gateway: either member of a direct conversation
//! pins, the other's devices hear of it and the list shows the message; in a group the
//! owner pins and a plain member is refused. Runs on every available store set.

use imesh_protos::{
    gateway::{client_frame, server_frame::Body},
    group::CreateGroupRequest,
    message::{ListPinsRequest, PinChanged, PinRequest, PinsResponse},
    sync::sync_event::Kind,
};
use imesh_tests::{Device, Stores, TestCluster};
use tonic::Code;

async fn pin(device: &mut Device, conversation_id: &str, seq: i64, unpin: bool) -> Body {
    let request = PinRequest {
        conversation_id: conversation_id.into(),
        seq,
        unpin,
    };
    let id = device.send_frame(client_frame::Body::Pin(request)).await;
    device.reply(id).await
}

async fn list(device: &mut Device, conversation_id: &str) -> PinsResponse {
    let request = ListPinsRequest {
        conversation_id: conversation_id.into(),
    };
    let id = device
        .send_frame(client_frame::Body::ListPins(request))
        .await;
    match device.reply(id).await {
        Body::Pins(pins) => pins,
        other => panic!("unexpected reply to list_pins: {other:?}"),
    }
}

/// The next pin change of `conversation_id` pushed to `device`.
async fn pin_changed(device: &mut Device, conversation_id: &str) -> PinChanged {
    device
        .pushed(|kind| match kind {
            Kind::Pin(changed) if changed.conversation_id == conversation_id => Some(changed),
            _ => None,
        })
        .await
}

async fn scenario(stores: Stores) {
    let env = TestCluster::start(stores).await;
    let (alice, alice_token) = env.user("alice").await;
    let (bob, bob_token) = env.user("bob").await;
    let mut a = env.signed_in(&alice_token, "alice-phone").await;
    let mut b = env.signed_in(&bob_token, "bob-phone").await;

    let Body::SendAck(sent) = a.send_text(bob, "m", "the address: 5 Elm St").await else {
        panic!("{stores:?}: send refused");
    };
    let Body::Pins(after) = pin(&mut b, &sent.conversation_id, sent.seq, false).await else {
        panic!("{stores:?}: bob's pin refused");
    };
    assert_eq!(after.pins.len(), 1, "{stores:?}");
    let heard = pin_changed(&mut a, &sent.conversation_id).await;
    assert_eq!(
        (heard.seq, heard.pinned, heard.by),
        (sent.seq, true, bob),
        "{stores:?}"
    );
    let listed = list(&mut a, &sent.conversation_id).await;
    let first = listed.pins.first().expect("the pin");
    assert_eq!(
        (
            first.seq,
            first.pinned_by,
            first.message.as_ref().map(|m| m.msg_id)
        ),
        (sent.seq, bob, Some(sent.msg_id)),
        "{stores:?}"
    );
    let Body::Pins(unpinned) = pin(&mut a, &sent.conversation_id, sent.seq, true).await else {
        panic!("{stores:?}: unpin refused");
    };
    assert!(unpinned.pins.is_empty(), "{stores:?}");

    // In a group only holders of PIN (the owner here) pin.
    let group = env
        .create_group(
            alice,
            CreateGroupRequest {
                name: "team".into(),
                member_ids: vec![bob],
                ..Default::default()
            },
        )
        .await;
    let Body::SendAck(said) = b.send_group_text(group, "g", "agenda").await else {
        panic!("{stores:?}: group send refused");
    };
    let Body::Error(refused) = pin(&mut b, &said.conversation_id, said.seq, false).await else {
        panic!("{stores:?}: a plain member pinned");
    };
    assert_eq!(refused.code, Code::PermissionDenied as u32, "{stores:?}");
    let Body::Pins(_) = pin(&mut a, &said.conversation_id, said.seq, false).await else {
        panic!("{stores:?}: the owner's pin refused");
    };
    let heard = pin_changed(&mut b, &said.conversation_id).await;
    assert_eq!((heard.seq, heard.by), (said.seq, alice), "{stores:?}");
}

#[tokio::test]
async fn members_pin_and_hear_of_pins_and_a_plain_group_member_may_not() {
    for stores in Stores::available() {
        scenario(stores).await;
    }
}
