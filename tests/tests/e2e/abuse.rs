//! Hostile clients against the real `imesh up` program, run as a process of its own, over
//! real sockets: a flood of unauthenticated connections from one address holds only that
//! address's cap while a real user signs in from another; an 11th session of one user
//! closes their oldest; password guessing is throttled per account, the right password
//! waits out the lock, and an unknown username costs what a known one does.

use std::{
    net::{IpAddr, SocketAddr},
    time::{Duration, Instant},
};

use imesh_protos::gateway::{ServerFrame, server_frame::Body};
use imesh_tests::{Device, device::TCP_HEADER, eventually, up::UpProcess};
use prost::Message as _;
use tokio::{
    io::AsyncReadExt,
    net::{TcpSocket, TcpStream},
};
use tonic::Code;

/// Platforms of this run (from a comma-separated environment value): one per session of
/// the user who opens 11, so one session per platform replaces none of them.
const PLATFORMS: &str = "ios,android,ipad,web,desktop,macos,windows,linux,tv,watch,car";
/// The gateway's default cap of unauthenticated connections per address.
const PER_ADDR: usize = 64;
const FLOOD: usize = 500;

async fn up() -> UpProcess {
    let env = [
        ("IMESH__GATEWAY__ADMISSION__LIMIT_LOOPBACK", "true"),
        ("IMESH__GATEWAY__ADMISSION__PLATFORMS", PLATFORMS),
    ];
    UpProcess::start(env!("CARGO_BIN_EXE_test-imesh"), &[], &env).await
}

/// A TCP connection to the gateway from `source`, sending nothing.
async fn silent_connection(source: IpAddr, gateway: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(source, 0)).unwrap();
    socket.connect(gateway).await.expect("tcp connects")
}

/// What a silent connection hears within `wait`: `None` while it is held, else the
/// refusal frame before the close.
async fn heard(mut stream: TcpStream, wait: Duration) -> (Option<ServerFrame>, TcpStream) {
    let mut header = [0u8; TCP_HEADER];
    let Ok(read) = tokio::time::timeout(wait, stream.read_exact(&mut header)).await else {
        return (None, stream);
    };
    read.expect("a refusal frame");
    let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let mut body = vec![0; len];
    stream
        .read_exact(&mut body)
        .await
        .expect("the frame's body");
    (Some(ServerFrame::decode(body.as_slice()).unwrap()), stream)
}

#[tokio::test]
async fn hostile_clients_are_held_to_their_limits_while_real_users_get_in() {
    let up = up().await;
    up.register("victim").await;

    // 500 connections from one address that never authenticate.
    let attacker: IpAddr = [127, 0, 0, 2].into();
    let mut flood = Vec::new();
    for _ in 0..FLOOD {
        flood.push(silent_connection(attacker, up.gateway_tcp).await);
    }
    let answers = futures::future::join_all(
        flood
            .into_iter()
            .map(|stream| heard(stream, Duration::from_secs(2))),
    )
    .await;
    let mut held = Vec::new();
    for (frame, stream) in answers {
        match frame {
            None => held.push(stream),
            Some(ServerFrame {
                body: Some(Body::Error(e)),
                ..
            }) => {
                assert_eq!(e.code, Code::ResourceExhausted as u32, "{e:?}");
                assert!(e.fatal && e.retry_after_ms > 0, "{e:?}");
            }
            Some(other) => panic!("unexpected frame {other:?}"),
        }
    }
    assert_eq!(held.len(), PER_ADDR, "only the per-address cap is held");

    // Meanwhile a real user signs in from another address, 11 times over.
    let token = up
        .login("victim", "correct horse", "198.51.100.1")
        .await
        .unwrap();
    let mut sessions = Vec::new();
    for (n, platform) in PLATFORMS.split(',').enumerate() {
        let mut device = Device::connect_tcp(up.gateway_tcp).await;
        device
            .auth_on(&token, &format!("device-{n}"), platform)
            .await
            .unwrap_or_else(|e| panic!("session {n} let in: {e:?}"));
        sessions.push(device);
    }
    let oldest = sessions[0].closing_error().await;
    assert_eq!(
        (oldest.code, oldest.fatal),
        (Code::Aborted as u32, true),
        "the 11th session closes the oldest: {oldest:?}"
    );
    assert!(
        oldest
            .message
            .starts_with("session: closed for a newer session")
    );
    assert!(matches!(sessions[10].ping().await, Body::Pong(_)));
    drop(held);

    // 50 wrong passwords: throttled, and then the right one waits out the lock.
    let guesser = "203.0.113.9";
    let mut throttled = 0;
    for _ in 0..50 {
        match up.login("victim", "wrong horse", guesser).await {
            Err(status) if status.code() == Code::ResourceExhausted => throttled += 1,
            Err(status) => assert_eq!(status.code(), Code::Unauthenticated, "{status:?}"),
            Ok(_) => panic!("a wrong password let in"),
        }
    }
    assert!(throttled >= 40, "only {throttled} of 50 guesses throttled");
    let locked = up
        .login("victim", "correct horse", "198.51.100.1")
        .await
        .expect_err("the right password waits out the lock");
    assert_eq!(locked.code(), Code::ResourceExhausted, "{locked:?}");
    assert!(locked.metadata().contains_key("retry-after-ms"));
    eventually("the lock to end", Duration::from_secs(30), || async {
        up.login("victim", "correct horse", "198.51.100.1")
            .await
            .ok()
    })
    .await;
}

#[tokio::test]
async fn an_unknown_username_takes_as_long_to_refuse_as_a_known_one() {
    let up = up().await;
    const SAMPLES: usize = 9;
    for n in 0..SAMPLES {
        up.register(&format!("known{n}")).await;
    }
    // Warm both paths (the stand-in hash is made on first use).
    let _ = up.login("nobody", "wrong horse", "198.51.100.2").await;
    let _ = up.login("known0", "wrong horse", "198.51.100.2").await;
    let time = |username: String| {
        let up = &up;
        async move {
            let started = Instant::now();
            let refused = up.login(&username, "wrong horse", "198.51.100.3").await;
            assert_eq!(refused.unwrap_err().code(), Code::Unauthenticated);
            started.elapsed()
        }
    };
    let (mut known, mut unknown) = (Vec::new(), Vec::new());
    for n in 0..SAMPLES {
        known.push(time(format!("known{n}")).await);
        unknown.push(time(format!("ghost{n}")).await);
    }
    known.sort();
    unknown.sort();
    let (known, unknown) = (known[SAMPLES / 2], unknown[SAMPLES / 2]);
    // Refusing without hashing takes well under a millisecond against tens for a hash, so
    // a factor of two tells the two apart on a busy machine, where one side's median can
    // drift by a third.
    let (slow, fast) = (known.max(unknown), known.min(unknown));
    assert!(
        slow.as_secs_f64() <= fast.as_secs_f64() * 2.0,
        "median refusal: known {known:?}, unknown {unknown:?}"
    );
}
