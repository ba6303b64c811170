//! Read receipts end to end through the gateway: five members read a receipt message at
//! different moments, the sender's device sees its count rise to five in coalesced events
//! and the who-read list match; only the sender and admins see who read; a member who quits
//! stops counting; asks for receipts where there are none are refused by field. Runs on
//! every available store set.

use imesh_kit::identity::Actor;
use imesh_protos::{
    gateway::{client_frame, server_frame::Body},
    group::{CreateGroupRequest, QuitGroupRequest, group_service_client::GroupServiceClient},
    message::{Content, SendRequest, Text, content, send_request::To},
    sync::{
        MarkReadRequest, ReadMark, ReceiptCount, ReceiptCountsRequest, ReceiptReadersRequest,
        sync_event::Kind,
    },
};
use imesh_tests::{Device, PATIENCE, Stores, TestCluster, eventually};
use tonic::Code;

fn asking(client_msg_id: &str, to: To) -> SendRequest {
    SendRequest {
        client_msg_id: client_msg_id.into(),
        to: Some(to),
        content: Some(Content {
            kind: Some(content::Kind::Text(Text {
                text: "please confirm you read this".into(),
            })),
        }),
        receipt: true,
        ..SendRequest::default()
    }
}

async fn mark_read(device: &mut Device, conversation_id: &str, read_seq: i64) {
    let mark = MarkReadRequest {
        marks: vec![ReadMark {
            conversation_id: conversation_id.into(),
            read_seq,
        }],
    };
    let id = device.send_frame(client_frame::Body::MarkRead(mark)).await;
    assert!(matches!(device.reply(id).await, Body::MarkRead(_)));
}

/// Waits for message `seq` to reach the device: clients read what they have.
async fn received(device: &mut Device, seq: i64) {
    loop {
        if let Some(Kind::Message(m)) = device.next_push().await.event.and_then(|e| e.kind)
            && m.seq == seq
        {
            assert!(m.receipt, "the message shows it asks for receipts");
            return;
        }
    }
}

/// Pushed read counts of message `seq` until one reaches `read`; every count seen.
async fn counts_until(device: &mut Device, seq: i64, read: u32) -> Vec<ReceiptCount> {
    let mut seen = Vec::new();
    loop {
        if let Some(Kind::Receipt(count)) = device.next_push().await.event.and_then(|e| e.kind)
            && count.seq == seq
        {
            let done = count.read >= read;
            seen.push(count);
            if done {
                return seen;
            }
        }
    }
}

async fn readers(device: &mut Device, conversation_id: &str, seq: i64, unread: bool) -> Body {
    let request = ReceiptReadersRequest {
        conversation_id: conversation_id.into(),
        seq,
        unread,
        ..ReceiptReadersRequest::default()
    };
    let id = device
        .send_frame(client_frame::Body::ReceiptReaders(request))
        .await;
    device.reply(id).await
}

async fn scenario(stores: Stores) {
    let env = TestCluster::start(stores).await;
    let (alice, alice_token) = env.user("alice").await;
    let mut members = Vec::new();
    for i in 0..5 {
        let (id, token) = env.user(&format!("reader{i}")).await;
        members.push((id, env.signed_in(&token, &format!("reader{i}-phone")).await));
    }
    let mut a = env.signed_in(&alice_token, "alice-phone").await;
    let create = CreateGroupRequest {
        name: "all hands".into(),
        member_ids: members.iter().map(|(id, _)| *id).collect(),
        ..CreateGroupRequest::default()
    };
    let group = env.create_group(alice, create).await;
    let conversation = format!("g:{group}");
    a.notice_seq(&conversation, "group.created").await;
    let Body::SendAck(sent) = a.send(asking("r-1", To::GroupId(group))).await else {
        panic!("{stores:?}: receipt message refused")
    };

    // Two read at once, then one, then the last two: the counts only rise, to five.
    let mut seen = Vec::new();
    for (readers_now, expect) in [(0..2, 2), (2..3, 3), (3..5, 5)] {
        for (_, device) in &mut members[readers_now] {
            received(device, sent.seq).await;
            mark_read(device, &conversation, sent.seq).await;
        }
        seen.extend(counts_until(&mut a, sent.seq, expect).await);
    }
    assert!(
        seen.windows(2).all(|w| w[0].read < w[1].read),
        "{stores:?}: one event per window, never the same count twice: {seen:?}"
    );
    assert_eq!(
        seen.last().map(|c| (c.read, c.total)),
        Some((5, 5)),
        "{stores:?}"
    );
    assert!(seen.len() <= 5, "{stores:?}: coalesced, not one per reader");

    let ids: Vec<i64> = members.iter().map(|(id, _)| *id).collect();
    match readers(&mut a, &conversation, sent.seq, false).await {
        Body::ReceiptReaders(page) => assert_eq!(page.user_ids, ids, "{stores:?}: by join"),
        other => panic!("{stores:?}: {other:?}"),
    }
    match readers(&mut a, &conversation, sent.seq, true).await {
        Body::ReceiptReaders(page) => assert!(page.user_ids.is_empty(), "{stores:?}"),
        other => panic!("{stores:?}: {other:?}"),
    }
    match readers(&mut members[0].1, &conversation, sent.seq, false).await {
        Body::Error(e) => assert_eq!(e.code, Code::PermissionDenied as u32, "{stores:?}"),
        other => panic!("{stores:?}: a plain member saw who read: {other:?}"),
    }

    // A reader quits: they no longer count, read or total.
    let quit = QuitGroupRequest { group_id: group };
    GroupServiceClient::new(env.channel(env.cluster.addrs.group))
        .quit_group(env.caller.request(Actor::User(ids[0]), quit))
        .await
        .unwrap();
    let (_, reader) = &mut members[1];
    let counted = eventually("the quit reader no longer counted", PATIENCE, async || {
        let request = ReceiptCountsRequest {
            conversation_id: conversation.clone(),
            seqs: vec![sent.seq],
        };
        let id = reader
            .send_frame(client_frame::Body::ReceiptCounts(request))
            .await;
        let Body::ReceiptCounts(reply) = reader.reply(id).await else {
            panic!("{stores:?}: counts refused")
        };
        reply.counts.into_iter().find(|c| c.total == 4)
    })
    .await;
    assert_eq!(counted.read, 4, "{stores:?}");

    // Receipts where there are none: a direct message, a conversation that is not a group.
    match a.send(asking("r-d", To::UserId(ids[1]))).await {
        Body::Error(e) => assert_eq!(
            (e.code, e.field.as_str()),
            (Code::InvalidArgument as u32, "receipt"),
            "{stores:?}"
        ),
        other => panic!("{stores:?}: {other:?}"),
    }
    match readers(&mut a, "d:1:2", 1, false).await {
        Body::Error(e) => assert_eq!(e.field, "conversation_id", "{stores:?}"),
        other => panic!("{stores:?}: {other:?}"),
    }
}

#[tokio::test]
async fn readers_raise_the_senders_count_and_the_who_read_list_on_every_store_set() {
    for stores in Stores::available() {
        scenario(stores).await;
    }
}
