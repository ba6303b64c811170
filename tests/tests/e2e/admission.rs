//! The gateway's admission limits end to end, over real WebSocket and TCP clients: the
//! sessions a user may hold, the platforms a session may name, a full gateway, and the
//! unauthenticated connections one address may hold.

use std::time::Duration;

use imesh_protos::gateway::server_frame::Body;
use imesh_tests::{Device, PATIENCE, Stores, TestCluster, eventually};
use tonic::Code;

async fn pong(device: &mut Device) -> bool {
    matches!(device.ping().await, Body::Pong(_))
}

#[tokio::test]
async fn a_session_past_the_users_cap_closes_their_oldest_with_a_reason() {
    let env = TestCluster::start_with(Stores::Embedded, |spec| {
        spec.gateway.admission.sessions_per_user = 3;
    })
    .await;
    let (_, token) = env.user("cap").await;
    let mut devices = Vec::new();
    for n in 0..3 {
        devices.push(env.signed_in(&token, &format!("d{n}")).await);
    }
    let mut fourth = env.tcp_device().await;
    fourth
        .auth(&token, "d3")
        .await
        .expect("the newest session is let in");
    let oldest = devices[0].closing_error().await;
    assert_eq!(oldest.code, Code::Aborted as u32);
    assert_eq!(
        oldest.message,
        "session: closed for a newer session of this user (at most 3)"
    );
    assert!(pong(&mut fourth).await);
    for device in &mut devices[1..] {
        assert!(pong(device).await, "the other sessions serve on");
    }
    // Another user is not counted against this one.
    let (_, other) = env.user("uncapped").await;
    let mut theirs = env.signed_in(&other, "o1").await;
    assert!(pong(&mut theirs).await);
}

#[tokio::test]
async fn with_refuse_new_a_session_past_the_cap_is_refused_and_the_old_ones_stay() {
    let env = TestCluster::start_with(Stores::Embedded, |spec| {
        spec.gateway.admission.sessions_per_user = 2;
        spec.gateway.admission.session_overflow = gateway::admission::Overflow::RefuseNew;
    })
    .await;
    let (_, token) = env.user("strict").await;
    let mut first = env.signed_in(&token, "a").await;
    let mut second = env.signed_in(&token, "b").await;
    let mut third = env.device().await;
    let refused = third.auth(&token, "c").await.expect_err("refused");
    assert_eq!(refused.code, Code::ResourceExhausted as u32);
    assert_eq!(
        refused.message,
        "session: this user already holds 2 sessions here"
    );
    assert!(third.read().await.is_none(), "closed after the refusal");
    assert!(pong(&mut first).await && pong(&mut second).await);
    // A session that leaves makes room.
    first.close().await;
    eventually("room for a new session", PATIENCE, || async {
        let mut again = env.device().await;
        again.auth(&token, "c").await.ok()
    })
    .await;
}

#[tokio::test]
async fn a_platform_outside_the_known_set_is_refused_naming_the_field() {
    let env = TestCluster::start_with(Stores::Embedded, |spec| {
        spec.gateway.admission = gateway::admission::Limits::default();
    })
    .await;
    let (_, token) = env.user("plat").await;
    let mut odd = env.tcp_device().await;
    let refused = odd
        .auth_on(&token, "p1", "ios-500")
        .await
        .expect_err("refused");
    assert_eq!(refused.code, Code::InvalidArgument as u32);
    assert_eq!(refused.field, "auth.platform");
    assert!(refused.fatal);
    assert!(
        refused
            .message
            .starts_with("auth.platform: must be one of ios, android")
    );
    let mut phone = env.device().await;
    phone
        .auth_on(&token, "p1", "ios")
        .await
        .expect("a known platform");
    assert!(pong(&mut phone).await);
}

#[tokio::test]
async fn a_full_gateway_refuses_new_sessions_and_turns_not_ready() {
    let env = TestCluster::start_with(Stores::Embedded, |spec| {
        spec.gateway.admission.max_connections = 2;
    })
    .await;
    let (_, token) = env.user("full").await;
    let mut health = tonic_health::pb::health_client::HealthClient::new(
        env.channel(env.cluster.addrs.gateway_grpc),
    );
    let status = |health: &mut tonic_health::pb::health_client::HealthClient<_>| {
        let mut health = health.clone();
        async move {
            let request = tonic_health::pb::HealthCheckRequest::default();
            health.check(request).await.unwrap().into_inner().status
        }
    };
    let serving = tonic_health::pb::health_check_response::ServingStatus::Serving as i32;
    assert_eq!(status(&mut health).await, serving);
    let _first = env.signed_in(&token, "a").await;
    let second = env.signed_in(&token, "b").await;
    let mut third = env.tcp_device().await;
    let refused = third.auth(&token, "c").await.expect_err("refused");
    assert_eq!(refused.code, Code::ResourceExhausted as u32);
    assert_eq!(
        refused.message,
        "connections: this gateway is full; connect to another"
    );
    assert!(refused.fatal && refused.retry_after_ms > 0);
    // Readiness is polled every few seconds.
    eventually("readiness NOT_SERVING", Duration::from_secs(15), || {
        let mut health = health.clone();
        async move { (status(&mut health).await != serving).then_some(()) }
    })
    .await;
    second.close().await;
    eventually("readiness SERVING again", Duration::from_secs(15), || {
        let mut health = health.clone();
        async move { (status(&mut health).await == serving).then_some(()) }
    })
    .await;
}

#[tokio::test]
async fn unauthenticated_connections_past_the_per_address_cap_are_refused_at_once() {
    let env = TestCluster::start_with(Stores::Embedded, |spec| {
        spec.gateway.admission.unauthenticated_per_addr = 3;
        spec.gateway.admission.limit_loopback = true;
    })
    .await;
    let addrs = env.cluster.addrs;
    let mut held = vec![
        Device::connect_tcp(addrs.gateway_tcp).await,
        env.device().await,
        Device::connect_tcp(addrs.gateway_tcp).await,
    ];
    // Over TCP: a fatal frame with the wait, then the close.
    let mut fourth = Device::connect_tcp(addrs.gateway_tcp).await;
    let refused = fourth.closing_error().await;
    assert_eq!(refused.code, Code::ResourceExhausted as u32);
    assert_eq!(
        refused.message,
        "connections: more than 3 unauthenticated from your address"
    );
    assert!(refused.retry_after_ms > 0);
    // Over WebSocket: 429 with Retry-After before the upgrade.
    let url = format!("ws://{}/ws", addrs.gateway);
    match tokio_tungstenite::connect_async(url.as_str()).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 429);
            assert!(response.headers().contains_key("retry-after"));
        }
        other => panic!("expected 429, got {:?}", other.map(|(_, r)| r.status())),
    }
    // Authenticating frees a place (before the client hears AuthOk), and so does leaving.
    let (_, token) = env.user("addr").await;
    held[0]
        .auth(&token, "a")
        .await
        .expect("auth on a held connection");
    let mut next = Device::connect_tcp(addrs.gateway_tcp).await;
    next.auth(&token, "b")
        .await
        .expect("a place freed by the auth");
    held.pop().expect("a held connection").close().await;
    eventually("a place freed by a close", PATIENCE, || async {
        let mut device = Device::connect_tcp(addrs.gateway_tcp).await;
        device.auth(&token, "c").await.ok()
    })
    .await;
    assert!(pong(&mut held[0]).await);
}

/// A PROXY protocol v2 header naming `client` as the connection's source.
fn proxy_v2(client: [u8; 4]) -> Vec<u8> {
    use ppp::v2::{Builder, Command, IPv4, Protocol, Version};
    let addresses = IPv4::new(client, [127, 0, 0, 1], 40_000, 8081);
    Builder::with_addresses(Version::Two | Command::Proxy, Protocol::Stream, addresses)
        .build()
        .unwrap()
}

#[tokio::test]
async fn behind_a_trusted_proxy_each_client_counts_by_the_address_the_proxy_names() {
    let env = TestCluster::start_with(Stores::Embedded, |spec| {
        spec.gateway.admission.unauthenticated_per_addr = 1;
        spec.gateway.admission.limit_loopback = true;
        spec.gateway.admission.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()];
    })
    .await;
    let addrs = env.cluster.addrs;
    // TCP: two connections through the proxy for one client, one for another.
    let mut first = Device::connect_tcp(addrs.gateway_tcp).await;
    first.write_tcp(&proxy_v2([203, 0, 113, 5])).await;
    let mut other = Device::connect_tcp(addrs.gateway_tcp).await;
    other.write_tcp(&proxy_v2([203, 0, 113, 6])).await;
    let mut second = Device::connect_tcp(addrs.gateway_tcp).await;
    second.write_tcp(&proxy_v2([203, 0, 113, 5])).await;
    let refused = second.closing_error().await;
    assert_eq!(
        refused.message,
        "connections: more than 1 unauthenticated from your address"
    );
    let (_, token) = env.user("proxied").await;
    for device in [&mut first, &mut other] {
        device
            .auth(&token, "through-proxy")
            .await
            .expect("admitted by its own address");
    }

    // WebSocket: by the first X-Forwarded-For address.
    let upgrade = |client: &'static str| {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let mut request = format!("ws://{}/ws", addrs.gateway)
            .into_client_request()
            .unwrap();
        let forwarded = format!("{client}, 10.0.0.1").parse().unwrap();
        request.headers_mut().insert("x-forwarded-for", forwarded);
        tokio_tungstenite::connect_async(request)
    };
    let _held = upgrade("198.51.100.20")
        .await
        .expect("the first from that client");
    let _elsewhere = upgrade("198.51.100.21").await.expect("another client");
    match upgrade("198.51.100.20").await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 429);
        }
        other => panic!("expected 429, got {:?}", other.map(|(_, r)| r.status())),
    }
}
