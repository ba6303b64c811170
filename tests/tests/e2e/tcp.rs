//! The TCP transport end to end: a TCP device and a WebSocket device talk through the
//! same gateway; coalesced and split frames are reassembled; a body that is not a frame
//! gets an error frame and the connection goes on; an oversized or foreign header, a bad
//! first frame and a truncated frame end only their own connection; presence queries show
//! a TCP device online until it leaves; a draining gateway tells devices on both
//! transports to reconnect; a silent connection is closed after the idle timeout while a
//! pinging one stays.

use imesh_protos::{
    gateway::{Auth, ClientFrame, Ping, client_frame, server_frame::Body},
    notify::QueryPresenceRequest,
    sync::sync_event::Kind,
};
use imesh_tests::{Device, PATIENCE, Stores, TestCluster, device::tcp_header, eventually};
use prost::Message as _;
use std::time::{Duration, Instant};
use tonic::Code;

fn ping(request_id: u64) -> Vec<u8> {
    let frame = ClientFrame {
        request_id,
        body: Some(client_frame::Body::Ping(Ping {})),
    };
    let body = frame.encode_to_vec();
    let mut bytes = tcp_header(body.len(), 1);
    bytes.extend(body);
    bytes
}

/// The next frame's error, expecting one.
async fn error_of(device: &mut Device) -> imesh_protos::gateway::Error {
    match device.read().await.and_then(|f| f.body) {
        Some(Body::Error(e)) => e,
        other => panic!("expected an error frame, got {other:?}"),
    }
}

/// Waits for a pushed message from `sender` (senders' own devices get theirs too).
async fn pushed_from(device: &mut Device, sender: i64) {
    loop {
        let kind = device.next_push().await.event.and_then(|e| e.kind);
        if matches!(kind, Some(Kind::Message(m)) if m.sender_id == sender) {
            return;
        }
    }
}

async fn pong(device: &mut Device, request_id: u64) {
    assert!(matches!(device.reply(request_id).await, Body::Pong(_)));
}

#[tokio::test]
async fn tcp_and_websocket_devices_talk_and_broken_tcp_framing_ends_only_its_connection() {
    let env = TestCluster::start(Stores::Embedded).await;
    let (alice, alice_token) = env.user("alice").await;
    let (bob, bob_token) = env.user("bob").await;
    let mut a = env.tcp_device().await;
    a.auth(&alice_token, "alice-tcp")
        .await
        .expect("auth over tcp");
    let mut b = env.signed_in(&bob_token, "bob-ws").await;

    // A message each way between the transports.
    assert!(matches!(
        a.send_text(bob, "t1", "over tcp").await,
        Body::SendAck(_)
    ));
    pushed_from(&mut b, alice).await;
    assert!(matches!(
        b.send_text(alice, "w1", "over ws").await,
        Body::SendAck(_)
    ));
    pushed_from(&mut a, bob).await;

    // Two frames in one write; one frame in two writes.
    let mut both = ping(101);
    both.extend(ping(102));
    a.write_tcp(&both).await;
    pong(&mut a, 101).await;
    pong(&mut a, 102).await;
    let split = ping(103);
    a.write_tcp(&split[..7]).await;
    a.write_tcp(&split[7..]).await;
    pong(&mut a, 103).await;

    // A good header around a body that is not a frame: an error, and the connection goes on.
    let mut junk = tcp_header(3, 1);
    junk.extend([0xFF, 0xFF, 0xFF]);
    a.write_tcp(&junk).await;
    let e = error_of(&mut a).await;
    assert_eq!(
        (e.code, e.fatal),
        (Code::InvalidArgument as u32, false),
        "{e:?}"
    );
    assert!(e.message.starts_with("frame:"), "{e:?}");
    a.write_tcp(&ping(104)).await;
    pong(&mut a, 104).await;

    // Headers the stream cannot be followed past: an error naming the field, then EOF.
    for (header, field) in [
        (tcp_header(10 << 20, 1), "header.length"),
        (tcp_header(1, 9), "header.version"),
    ] {
        let mut c = env.tcp_device().await;
        c.auth(&alice_token, "alice-tcp-2").await.expect("auth");
        c.write_tcp(&header).await;
        let e = error_of(&mut c).await;
        assert!(e.fatal && e.message.starts_with(field), "{e:?}");
        assert!(c.read().await.is_none(), "closed after {field}");
    }
    // A first frame that is not auth, and a frame cut short by the client leaving.
    let mut d = env.tcp_device().await;
    d.write_tcp(&ping(1)).await;
    let e = error_of(&mut d).await;
    assert_eq!(
        (e.code, e.fatal),
        (Code::Unauthenticated as u32, true),
        "{e:?}"
    );
    assert!(d.read().await.is_none());
    let mut t = env.tcp_device().await;
    let auth = ClientFrame {
        request_id: 1,
        body: Some(client_frame::Body::Auth(Auth {
            token: alice_token.clone(),
            device_id: "alice-tcp-3".into(),
            platform: "test".into(),
        })),
    }
    .encode_to_vec();
    let mut cut = tcp_header(auth.len(), 1);
    cut.extend(&auth[..auth.len() / 2]);
    t.write_tcp(&cut).await;
    t.close().await;

    // The first connection served on through all of it.
    a.write_tcp(&ping(105)).await;
    pong(&mut a, 105).await;

    // Online dots: bob sees alice online on her platform until her connection closes.
    let (stranger, _) = env.user("carol").await;
    let query =
        |users: Vec<i64>| client_frame::Body::Presence(QueryPresenceRequest { user_ids: users });
    let id = b.send_frame(query(vec![alice, stranger, alice])).await;
    let Body::Presence(seen) = b.reply(id).await else {
        panic!("presence refused")
    };
    let dots: Vec<(i64, bool, Vec<String>)> = seen
        .users
        .into_iter()
        .map(|u| (u.user_id, u.online, u.platforms))
        .collect();
    assert_eq!(
        dots,
        vec![
            (alice, true, vec!["test-alice-tcp".to_owned()]),
            (stranger, false, vec![])
        ]
    );
    a.close().await;
    eventually("alice offline", PATIENCE, async || {
        let id = b.send_frame(query(vec![alice])).await;
        let Body::Presence(seen) = b.reply(id).await else {
            panic!("presence refused")
        };
        (!seen.users[0].online).then_some(())
    })
    .await;
    let id = b.send_frame(query(vec![])).await;
    match b.reply(id).await {
        Body::Error(e) => assert_eq!(e.field, "user_ids", "{e:?}"),
        other => panic!("an empty query went through: {other:?}"),
    }
}

#[tokio::test]
async fn a_draining_gateway_tells_every_connected_device_to_reconnect() {
    let env = TestCluster::start(Stores::Embedded).await;
    let (_, alice_token) = env.user("alice").await;
    let mut over_tcp = env.tcp_device().await;
    over_tcp
        .auth(&alice_token, "alice-tcp")
        .await
        .expect("auth");
    let mut over_ws = env.signed_in(&alice_token, "alice-ws").await;
    let stopping = tokio::spawn(env.cluster.stop());
    for device in [&mut over_tcp, &mut over_ws] {
        let e = device.closing_error().await;
        assert_eq!(e.code, Code::Unavailable as u32, "{e:?}");
        assert!(e.message.contains("shutting down"), "{e:?}");
    }
    let stopped = tokio::time::timeout(PATIENCE, stopping).await;
    stopped
        .expect("the cluster stops")
        .unwrap()
        .expect("cleanly");
}

#[tokio::test]
async fn a_silent_connection_is_closed_after_the_idle_timeout_and_a_pinging_one_stays() {
    let env = TestCluster::start_with(Stores::Embedded, |spec| {
        spec.gateway.idle_timeout_secs = 1;
    })
    .await;
    let (_, alice_token) = env.user("alice").await;
    let mut silent = env.tcp_device().await;
    // Taken before the silent device's last frame is sent, so the gateway heard it later.
    let last_sent = Instant::now();
    silent
        .auth(&alice_token, "alice-silent")
        .await
        .expect("auth");
    let mut pinging = env.signed_in(&alice_token, "alice-pinging").await;
    let e = tokio::select! {
        e = silent.closing_error() => e,
        () = keep_alive(&mut pinging) => unreachable!("keep_alive never ends"),
    };
    assert_eq!(e.code, Code::DeadlineExceeded as u32, "{e:?}");
    assert!(e.message.starts_with("idle:"), "{e:?}");
    assert!(
        last_sent.elapsed() >= Duration::from_secs(1),
        "closed early"
    );
    // The pinging device outlives the timeout by more than a sweep.
    let a_timeout_later =
        tokio::time::timeout(Duration::from_millis(1500), keep_alive(&mut pinging));
    assert!(
        a_timeout_later.await.is_err(),
        "the pinging device kept going"
    );
    assert!(matches!(pinging.ping().await, Body::Pong(_)));
}

/// Pings every 200 ms, as a client keeping its connection alive does, until dropped.
async fn keep_alive(device: &mut Device) {
    loop {
        assert!(matches!(device.ping().await, Body::Pong(_)));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
