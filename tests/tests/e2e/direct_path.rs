//! The direct path through a real gateway: pipelined sends keep each device's order in
//! every conversation, live and stored, on every store set; a flood past the gateway's
//! bounds gets only acks and clear refusals, every acked message arrives exactly once and
//! in order, nothing refused is stored, and a normal send goes through right after.

use std::collections::HashMap;

use imesh_protos::{
    gateway::server_frame::Body,
    message::{Content, Message, SendRequest, Text, content, send_request},
    sync::{InboxEntry, sync_event::Kind},
};
use imesh_tests::{Device, PATIENCE, Stores, TestCluster};

const RESOURCE_EXHAUSTED: u32 = tonic::Code::ResourceExhausted as u32;

fn text_to(to: i64, client_msg_id: String) -> SendRequest {
    SendRequest {
        to: Some(send_request::To::UserId(to)),
        content: Some(Content {
            kind: Some(content::Kind::Text(Text {
                text: client_msg_id.clone(),
            })),
        }),
        client_msg_id,
        ..SendRequest::default()
    }
}

/// The messages from `sender` among `entries`, in the order the entries came.
fn messages_from(entries: &[InboxEntry], sender: i64) -> Vec<Message> {
    entries
        .iter()
        .filter_map(|e| match e.event.as_ref()?.kind.as_ref()? {
            Kind::Message(m) if m.sender_id == sender => Some(m.clone()),
            _ => None,
        })
        .collect()
}

/// The seq each acked reply carries, failing on anything but an ack.
fn acked_seqs(replies: &[Body]) -> Vec<i64> {
    replies
        .iter()
        .map(|reply| match reply {
            Body::SendAck(ack) => ack.seq,
            other => panic!("expected a send ack, got {other:?}"),
        })
        .collect()
}

fn increasing(seqs: &[i64]) -> bool {
    seqs.windows(2).all(|w| w[0] < w[1])
}

/// Pushes until `count` messages from `sender` have come.
async fn pushed_messages(device: &mut Device, sender: i64, count: usize) -> Vec<Message> {
    let mut entries = device.take_pushes();
    while messages_from(&entries, sender).len() < count {
        entries.push(device.next_push().await);
    }
    messages_from(&entries, sender)
}

#[tokio::test]
async fn pipelined_sends_keep_each_devices_order_in_every_conversation() {
    for stores in Stores::available() {
        let env = TestCluster::start_with(stores, |spec| {
            spec.message.rate_limits.user_per_sec = 0;
            spec.gateway.frames_per_sec = 0;
        })
        .await;
        let (ann, ann_token) = env.admin_user("ann").await;
        let (bob, bob_token) = env.admin_user("bob").await;
        let (cat, cat_token) = env.admin_user("cat").await;
        let mut a = env.tcp_device().await;
        a.auth(&ann_token, "ann-1").await.expect("ann signs in");
        let mut b = env.signed_in(&bob_token, "bob-1").await;
        let mut c = env.signed_in(&cat_token, "cat-1").await;

        // Ann pipelines 48 sends, 8 in flight, alternating between Bob and Cat, while Bob
        // pipelines 24 of his own to Ann in the same conversation.
        let to_both: Vec<SendRequest> = (0..48)
            .map(|k| text_to(if k % 2 == 0 { bob } else { cat }, format!("a{k:02}")))
            .collect();
        let to_ann: Vec<SendRequest> = (0..24).map(|k| text_to(ann, format!("b{k:02}"))).collect();
        let (from_ann, from_bob) = tokio::join!(a.pipeline(to_both, 8), b.pipeline(to_ann, 8));
        let ann_seqs = acked_seqs(&from_ann);
        let to_bob: Vec<i64> = ann_seqs.iter().step_by(2).copied().collect();
        let to_cat: Vec<i64> = ann_seqs.iter().skip(1).step_by(2).copied().collect();
        assert!(increasing(&to_bob), "{stores:?}: ann → bob seqs {to_bob:?}");
        assert!(increasing(&to_cat), "{stores:?}: ann → cat seqs {to_cat:?}");
        let bob_seqs = acked_seqs(&from_bob);
        assert!(
            increasing(&bob_seqs),
            "{stores:?}: bob → ann seqs {bob_seqs:?}"
        );

        // Live: Bob's device is pushed Ann's messages in the order she sent them.
        let live = pushed_messages(&mut b, ann, 24).await;
        let texts: Vec<String> = live.iter().map(|m| m.client_msg_id.clone()).collect();
        let sent: Vec<String> = (0..48).step_by(2).map(|k| format!("a{k:02}")).collect();
        assert_eq!(texts, sent, "{stores:?}: pushed to bob");
        // Stored: Cat's inbox holds them in order too, and so do Ann's own pushes of Bob's.
        let stored = c.pull_at_least(0, 24).await;
        let texts: Vec<String> = messages_from(&stored.entries, ann)
            .iter()
            .map(|m| m.client_msg_id.clone())
            .collect();
        let sent: Vec<String> = (1..48).step_by(2).map(|k| format!("a{k:02}")).collect();
        assert_eq!(texts, sent, "{stores:?}: cat's inbox");
        let live = pushed_messages(&mut a, bob, 24).await;
        let seqs: Vec<i64> = live.iter().map(|m| m.seq).collect();
        assert_eq!(seqs, bob_seqs, "{stores:?}: bob's messages pushed to ann");
    }
}

/// What a flooding sender's replies came to.
#[derive(Default, Debug)]
struct Flood {
    /// client_msg_id → seq of each acked send.
    acked: HashMap<String, i64>,
    refused: usize,
}

/// Writes `count` sends to `to` at once, without waiting, then reads every reply.
async fn flood(device: &mut Device, to: i64, prefix: &str, count: usize) -> Flood {
    let sends: Vec<SendRequest> = (0..count)
        .map(|k| text_to(to, format!("{prefix}-{k:03}")))
        .collect();
    let keys: Vec<String> = sends.iter().map(|s| s.client_msg_id.clone()).collect();
    let replies = device.pipeline(sends, count).await;
    let mut outcome = Flood::default();
    let mut last_seq = 0;
    for (key, reply) in keys.into_iter().zip(replies) {
        match reply {
            Body::SendAck(ack) => {
                assert!(ack.seq > last_seq, "{key}: acked out of order");
                last_seq = ack.seq;
                outcome.acked.insert(key, ack.seq);
            }
            Body::Error(e) => {
                assert_eq!(e.code, RESOURCE_EXHAUSTED, "{key}: {e:?}");
                assert!(
                    e.retry_after_ms >= 1,
                    "{key}: a refusal names a wait: {e:?}"
                );
                assert!(e.message.starts_with("send: "), "{key}: {e:?}");
                assert!(!e.fatal, "{key}: a refusal keeps the connection: {e:?}");
                outcome.refused += 1;
            }
            other => panic!("{key}: neither an ack nor a refusal: {other:?}"),
        }
    }
    outcome
}

#[tokio::test]
async fn a_flood_past_capacity_gets_acks_and_refusals_and_every_ack_arrives_once_in_order() {
    let stores = Stores::available();
    let stores = stores.iter().filter(|s| **s != Stores::MySqlRedis);
    for &stores in stores {
        let env = TestCluster::start_with(stores, |spec| {
            spec.message.rate_limits.user_per_sec = 0;
            spec.gateway.frames_per_sec = 0;
            // Small batches, several out at once: a sender's sends must keep their order
            // across concurrent batches too.
            spec.gateway.send_batches_in_flight = 4;
            spec.gateway.send_batch_max = 8;
            spec.gateway.send_backlog = 16;
            spec.gateway.sends_in_flight = 40;
            spec.gateway.send_hold_ms = 100;
        })
        .await;
        let mut pairs = Vec::new();
        for i in 0..8 {
            let (from, from_token) = env.admin_user(&format!("from{i}")).await;
            let (to, to_token) = env.admin_user(&format!("to{i}")).await;
            let mut sender = env.tcp_device().await;
            sender
                .auth(&from_token, "tcp")
                .await
                .expect("sender signs in");
            let receiver = env.signed_in(&to_token, "ws").await;
            pairs.push((from, to, sender, receiver));
        }
        // Every sender writes 60 sends at once: 480 against a backlog of 16 and 40 in
        // flight per connection.
        let floods = futures::future::join_all(
            pairs
                .iter_mut()
                .map(|(_, to, sender, _)| flood(sender, *to, "f", 60)),
        )
        .await;
        let refused: usize = floods.iter().map(|f| f.refused).sum();
        let acked: usize = floods.iter().map(|f| f.acked.len()).sum();
        assert!(refused > 0, "{stores:?}: the flood met no bound");
        assert!(acked > 0, "{stores:?}: nothing was taken");

        for ((from, _, _, receiver), flood) in pairs.iter_mut().zip(&floods) {
            let inbox = receiver.pull_at_least(0, flood.acked.len()).await;
            let arrived = messages_from(&inbox.entries, *from);
            let got: HashMap<String, i64> = arrived
                .iter()
                .map(|m| (m.client_msg_id.clone(), m.seq))
                .collect();
            assert_eq!(got.len(), arrived.len(), "{stores:?}: a message came twice");
            assert_eq!(
                &got, &flood.acked,
                "{stores:?}: exactly the acked sends arrive"
            );
            let seqs: Vec<i64> = arrived.iter().map(|m| m.seq).collect();
            assert!(increasing(&seqs), "{stores:?}: in order: {seqs:?}");
        }

        // Once the wait named and the hold's grace are over, a normal send goes through
        // (these senders never resend what was refused).
        let (from, to, sender, receiver) = &mut pairs[0];
        let reply = tokio::time::timeout(PATIENCE, taken(sender, text_to(*to, "after".into())))
            .await
            .expect("a reply in time");
        assert!(matches!(reply, Body::SendAck(_)), "{stores:?}: {reply:?}");
        let after = pushed_messages(receiver, *from, floods[0].acked.len() + 1).await;
        assert_eq!(
            after.last().map(|m| m.client_msg_id.as_str()),
            Some("after")
        );
    }
}

#[tokio::test]
async fn a_connection_past_its_sends_in_flight_is_refused_by_name_and_keeps_going() {
    let env = TestCluster::start_with(Stores::Embedded, |spec| {
        spec.message.rate_limits.user_per_sec = 0;
        spec.gateway.frames_per_sec = 0;
        spec.gateway.sends_in_flight = 2;
        spec.gateway.send_hold_ms = 100;
    })
    .await;
    let (_, ann_token) = env.admin_user("ann").await;
    let (bob, _) = env.admin_user("bob").await;
    let mut a = env.tcp_device().await;
    a.auth(&ann_token, "ann-1").await.expect("ann signs in");
    let outcome = flood(&mut a, bob, "w", 30).await;
    assert!(outcome.refused > 0, "{outcome:?}");
    let refusals: Vec<_> = a.take_unsolicited();
    assert!(
        refusals.is_empty(),
        "refusals answer their request: {refusals:?}"
    );
    let reply = tokio::time::timeout(PATIENCE, taken(&mut a, text_to(bob, "after".into())))
        .await
        .expect("taken once the hold is over");
    assert!(matches!(reply, Body::SendAck(_)), "{reply:?}");
}

/// Sends `request` until it is not refused for the moment, waiting as each refusal says.
async fn taken(device: &mut Device, request: SendRequest) -> Body {
    loop {
        match device.send(request.clone()).await {
            Body::Error(e) if e.code == RESOURCE_EXHAUSTED => {
                tokio::time::sleep(std::time::Duration::from_millis(e.retry_after_ms)).await;
            }
            reply => return reply,
        }
    }
}

#[tokio::test]
async fn a_refused_send_holds_its_conversation_until_the_refused_sends_come_again_in_order() {
    let env = TestCluster::start_with(Stores::Embedded, |spec| {
        spec.message.rate_limits.user_per_sec = 0;
        spec.gateway.frames_per_sec = 0;
        spec.gateway.sends_in_flight = 2;
        spec.gateway.send_hold_ms = 60_000;
    })
    .await;
    let (ann, ann_token) = env.admin_user("ann").await;
    let (bob, bob_token) = env.admin_user("bob").await;
    let (cat, _) = env.admin_user("cat").await;
    let mut a = env.tcp_device().await;
    a.auth(&ann_token, "ann-1").await.expect("ann signs in");
    let mut b = env.signed_in(&bob_token, "ws").await;
    let sends: Vec<SendRequest> = (0..30).map(|k| text_to(bob, format!("h-{k:03}"))).collect();
    let key = |k: usize| sends[k].client_msg_id.clone();

    // Written at once against 2 in flight: after the first refusal nothing more is taken.
    let replies = a.pipeline(sends.clone(), sends.len()).await;
    let first = replies
        .iter()
        .position(|r| !matches!(r, Body::SendAck(_)))
        .expect("the bound refused some");
    assert!(first > 0, "{:?}", replies[0]);
    for (k, reply) in replies.iter().enumerate().skip(first + 1) {
        let Body::Error(e) = reply else {
            panic!("{}: taken after an earlier refusal: {reply:?}", key(k));
        };
        assert_eq!(e.code, RESOURCE_EXHAUSTED, "{e:?}");
        assert!(e.retry_after_ms >= 1, "{e:?}");
        assert!(
            e.message.contains(&key(first)),
            "names the send it waits for: {e:?}"
        );
    }

    // Other conversations are not held.
    let reply = a.send(text_to(cat, "c-1".into())).await;
    assert!(matches!(reply, Body::SendAck(_)), "{reply:?}");
    // Resent out of order, a send still waits for the one before it.
    let reply = a.send(sends[first + 1].clone()).await;
    assert!(
        matches!(&reply, Body::Error(e) if e.message.contains(&key(first))),
        "{reply:?}"
    );
    let reply = a.send(sends[first].clone()).await;
    assert!(matches!(reply, Body::SendAck(_)), "{reply:?}");
    let reply = a.send(sends[first + 2].clone()).await;
    assert!(
        matches!(&reply, Body::Error(e) if e.message.contains(&key(first + 1))),
        "{reply:?}"
    );
    // Resent in the order first sent, every one is taken.
    for send in &sends[first + 1..] {
        let reply = a.send(send.clone()).await;
        assert!(
            matches!(reply, Body::SendAck(_)),
            "{}: {reply:?}",
            send.client_msg_id
        );
    }
    let live = pushed_messages(&mut b, ann, sends.len()).await;
    let got: Vec<String> = live.iter().map(|m| m.client_msg_id.clone()).collect();
    let sent: Vec<String> = (0..sends.len()).map(key).collect();
    assert_eq!(got, sent, "bob gets them in the order first sent");
    let seqs: Vec<i64> = live.iter().map(|m| m.seq).collect();
    assert!(increasing(&seqs), "{seqs:?}");
}

#[tokio::test]
async fn a_send_refused_by_the_frame_limit_holds_its_conversation() {
    let env = TestCluster::start_with(Stores::Embedded, |spec| {
        spec.message.rate_limits.user_per_sec = 0;
        spec.gateway.frames_per_sec = 20;
        spec.gateway.sends_in_flight = 100;
        spec.gateway.send_hold_ms = 60_000;
    })
    .await;
    let (_, ann_token) = env.admin_user("ann").await;
    let (bob, _) = env.admin_user("bob").await;
    let mut a = env.tcp_device().await;
    a.auth(&ann_token, "ann-1").await.expect("ann signs in");
    let sends: Vec<SendRequest> = (0..60).map(|k| text_to(bob, format!("t-{k:03}"))).collect();
    let replies = a.pipeline(sends.clone(), sends.len()).await;
    let first = replies
        .iter()
        .position(|r| !matches!(r, Body::SendAck(_)))
        .expect("the frame limit refused some");
    assert!(
        matches!(&replies[first], Body::Error(e) if e.message.starts_with("frames:")),
        "{:?}",
        replies[first]
    );
    let key = sends[first].client_msg_id.clone();
    // Once the frame limit lets frames through again, a later send still waits for it.
    let reply = past_frame_limit(&mut a, sends[first + 1].clone()).await;
    assert!(
        matches!(&reply, Body::Error(e) if e.message.contains(&key)),
        "{reply:?}"
    );
    let reply = past_frame_limit(&mut a, sends[first].clone()).await;
    assert!(matches!(reply, Body::SendAck(_)), "{reply:?}");
    let reply = past_frame_limit(&mut a, sends[first + 1].clone()).await;
    assert!(matches!(reply, Body::SendAck(_)), "{reply:?}");
}

/// Sends `request` until the connection's frame limit lets it in, waiting as each
/// refusal says; returns the first other reply.
async fn past_frame_limit(device: &mut Device, request: SendRequest) -> Body {
    loop {
        match device.send(request.clone()).await {
            Body::Error(e) if e.message.starts_with("frames:") => {
                tokio::time::sleep(std::time::Duration::from_millis(e.retry_after_ms)).await;
            }
            reply => return reply,
        }
    }
}

#[tokio::test]
async fn the_batch_rpcs_are_internal_and_name_the_bad_field() {
    use imesh_kit::identity::Actor;
    use imesh_protos::{
        message::{BatchedSend, SendBatchRequest, message_service_client::MessageServiceClient},
        sync::{AckBatchRequest, DeviceAck, sync_service_client::SyncServiceClient},
    };
    use tonic::Code;
    let env = TestCluster::start(Stores::Embedded).await;
    let (ann, _) = env.admin_user("ann").await;
    let (bob, _) = env.admin_user("bob").await;
    let mut messages = MessageServiceClient::new(env.channel(env.cluster.addrs.message));
    let batch = |sender_id, send: Option<SendRequest>| SendBatchRequest {
        sends: vec![BatchedSend { sender_id, send }],
    };
    let as_user = env
        .caller
        .request(Actor::User(ann), batch(ann, Some(text_to(bob, "u".into()))));
    let refused = messages.send_batch(as_user).await.unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    for (request, field) in [
        (batch(0, Some(text_to(bob, "z".into()))), "sends.sender_id"),
        (batch(ann, None), "sends.send"),
        (SendBatchRequest { sends: Vec::new() }, "sends"),
    ] {
        let refused = messages
            .send_batch(env.caller.request(Actor::System, request))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
        assert!(
            refused.message().starts_with(&format!("{field}: ")),
            "{field}: {refused:?}"
        );
    }
    // One bad item is answered on its own; the good one beside it is stored.
    let mixed = SendBatchRequest {
        sends: vec![
            BatchedSend {
                sender_id: ann,
                send: Some(text_to(bob, String::new())),
            },
            BatchedSend {
                sender_id: ann,
                send: Some(text_to(bob, "good".into())),
            },
        ],
    };
    let outcomes = messages
        .send_batch(env.caller.request(Actor::System, mixed))
        .await
        .unwrap()
        .into_inner()
        .outcomes;
    assert_eq!(
        outcomes[0].code,
        Code::InvalidArgument as i32,
        "{outcomes:?}"
    );
    assert!(
        outcomes[0].error.starts_with("client_msg_id: "),
        "{outcomes:?}"
    );
    assert!(outcomes[1].sent.is_some(), "{outcomes:?}");

    let mut sync = SyncServiceClient::new(env.channel(env.cluster.addrs.sync));
    let acks = || AckBatchRequest {
        acks: vec![DeviceAck {
            user_id: ann,
            device_id: "phone".into(),
            sync_seq: -1,
        }],
    };
    let refused = sync
        .ack_batch(env.caller.request(Actor::User(ann), acks()))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    let refused = sync
        .ack_batch(env.caller.request(Actor::System, acks()))
        .await
        .unwrap_err();
    assert!(
        refused.message().starts_with("acks.sync_seq: "),
        "{refused:?}"
    );
}
