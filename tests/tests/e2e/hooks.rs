//! The company's app server, end to end: a real HTTPS server (its certificate signed by a
//! test CA that imesh is told to trust) checks every signature, vets each user's message
//! before it is stored (allow, refuse with a reason the sender sees, replace the content)
//! and takes the after-event webhooks (messages stored, edited, recalled, group and
//! friendship changes), refusing the first batch so the outbox must deliver it again.

use std::{
    collections::{BTreeSet, HashMap},
    path::Path,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{Json, Router, extract::State, http::HeaderMap, http::StatusCode, routing::post};
use imesh_kit::{
    config::HookConfig,
    hooks::{SIGNATURE_HEADER, signature},
    identity::Actor,
    tls::{Tls, TlsConfig},
};
use imesh_protos::{
    gateway::server_frame::Body,
    group::CreateGroupRequest,
    relation::{RespondFriendRequestRequest, SendFriendRequestRequest},
    sync::sync_event::Kind,
};
use imesh_tests::{Stores, TestCluster, eventually};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use serde_json::{Value, json};
use tokio::net::TcpListener;

const SECRET: &str = "app-server-secret-0123456789";

#[derive(Default)]
struct AppServer {
    /// Every webhook event taken, by event id (a redelivery lands on the same key).
    events: Mutex<HashMap<String, Value>>,
    refused_once: AtomicBool,
    /// Requests whose signature did not verify.
    forged: AtomicUsize,
}

impl AppServer {
    fn verified(&self, headers: &HeaderMap, body: &[u8]) -> bool {
        let given = headers
            .get(SIGNATURE_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let time = given
            .strip_prefix("t=")
            .and_then(|rest| rest.split(',').next())
            .and_then(|t| t.parse::<i64>().ok())
            .unwrap_or(0);
        let fresh = (imesh_kit::ids::unix_ms() - time).abs() < 60_000;
        let ok = fresh && given == signature(SECRET, time, body);
        if !ok {
            self.forged.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }
}

async fn check(
    State(app): State<Arc<AppServer>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> (StatusCode, Json<Value>) {
    if !app.verified(&headers, &body) {
        return (StatusCode::UNAUTHORIZED, Json(json!({})));
    }
    let asked: Value = serde_json::from_slice(&body).unwrap();
    let verdict = match asked["message"]["content"]["text"]["text"].as_str() {
        Some("buy cheap pills") => json!({"action": "reject", "reason": "no ads here"}),
        Some("darn it") => json!({"action": "replace", "content": {"text": {"text": "d**n it"}}}),
        _ => json!({"action": "allow"}),
    };
    (StatusCode::OK, Json(verdict))
}

async fn events(
    State(app): State<Arc<AppServer>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> StatusCode {
    if !app.verified(&headers, &body) {
        return StatusCode::UNAUTHORIZED;
    }
    if !app.refused_once.swap(true, Ordering::Relaxed) {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let batch: Value = serde_json::from_slice(&body).unwrap();
    let mut taken = app.events.lock().unwrap();
    for event in batch["events"].as_array().unwrap() {
        taken.insert(
            event["event_id"].as_str().unwrap().to_owned(),
            event.clone(),
        );
    }
    StatusCode::OK
}

/// Accepts TLS connections for axum.
struct TlsListener {
    tcp: TcpListener,
    tls: Arc<Tls>,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            if let Ok(stream) = self.tls.accept(tcp).await {
                return (stream, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// Starts the app server over HTTPS with a certificate for localhost signed by a fresh CA
/// written to `dir/ca.pem`; its base URL.
async fn serve_app_server(app: Arc<AppServer>, dir: &Path) -> String {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "app server test CA");
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".into()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.join("cert.pem"), leaf.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
    let config = TlsConfig {
        cert_file: dir.join("cert.pem").display().to_string(),
        key_file: dir.join("key.pem").display().to_string(),
        ..TlsConfig::default()
    };
    let tls = Tls::load(&config, None, &[b"http/1.1"]).unwrap().unwrap();
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = tcp.local_addr().unwrap().port();
    let router = Router::new()
        .route("/check", post(check))
        .route("/events", post(events))
        .with_state(app);
    tokio::spawn(async move { axum::serve(TlsListener { tcp, tls }, router).await });
    format!("https://localhost:{port}")
}

async fn scenario(stores: Stores) {
    let dir = std::env::temp_dir().join(format!(
        "imesh-hooks-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let app = Arc::new(AppServer::default());
    let base = serve_app_server(app.clone(), &dir).await;
    let hook = |path: &str| HookConfig {
        url: format!("{base}{path}"),
        secret: imesh_kit::config::Secret::new(SECRET),
        timeout_ms: 5_000,
        ca_file: dir.join("ca.pem").display().to_string(),
    };
    let env = TestCluster::start_with(stores, |spec| {
        spec.message.before_send = hook("/check");
        spec.message.before_send_fail_open = false;
        spec.sync.webhooks = hook("/events");
    })
    .await;
    let (alice, alice_token) = env.user("alice").await;
    let (bob, bob_token) = env.user("bob").await;
    let mut a = env.signed_in(&alice_token, "alice-phone").await;
    let mut b = env.signed_in(&bob_token, "bob-phone").await;

    let Body::SendAck(hello) = a.send_text(bob, "m1", "hello bob").await else {
        panic!("{stores:?}: an allowed message was refused");
    };
    let Body::Error(refused) = a.send_text(bob, "m2", "buy cheap pills").await else {
        panic!("{stores:?}: the app server's refusal was ignored");
    };
    assert_eq!(refused.code, tonic::Code::PermissionDenied as u32);
    assert!(
        refused.message.contains("no ads here"),
        "{stores:?}: the sender sees the reason: {refused:?}"
    );
    let Body::SendAck(replaced) = a.send_text(bob, "m3", "darn it").await else {
        panic!("{stores:?}: a replaced message was refused");
    };
    let seen = b
        .pushed(|kind| match kind {
            Kind::Message(m) if m.seq == replaced.seq => Some(m),
            _ => None,
        })
        .await;
    assert_eq!(
        seen.content.and_then(|c| c.kind),
        Some(imesh_protos::message::content::Kind::Text(
            imesh_protos::message::Text {
                text: "d**n it".into()
            }
        )),
        "{stores:?}: bob gets the replaced content"
    );

    env.create_group(
        alice,
        CreateGroupRequest {
            name: "hooks".into(),
            member_ids: vec![bob],
            ..Default::default()
        },
    )
    .await;
    let ask = SendFriendRequestRequest {
        to_user_id: bob,
        message: "hi".into(),
        add_source: "search".into(),
    };
    let sent = env
        .relation()
        .send_friend_request(env.caller.request(Actor::User(alice), ask))
        .await
        .unwrap()
        .into_inner();
    let accept = RespondFriendRequestRequest {
        request_id: sent.request.unwrap().request_id,
        accept: true,
    };
    env.relation()
        .respond_friend_request(env.caller.request(Actor::User(bob), accept))
        .await
        .unwrap();

    let wanted: BTreeSet<&str> = ["message.stored", "group.changed", "friendship.changed"].into();
    let taken = eventually("the webhooks", Duration::from_secs(20), || {
        let events = app.events.lock().unwrap().clone();
        let types: BTreeSet<&str> = events
            .values()
            .filter_map(|e| wanted.get(e["type"].as_str()?).copied())
            .collect();
        let all = types == wanted;
        async move { all.then_some(events) }
    })
    .await;
    let texts: BTreeSet<String> = taken
        .values()
        .filter(|e| e["type"] == "message.stored")
        .filter_map(|e| Some(e["data"]["content"]["text"]["text"].as_str()?.to_owned()))
        .collect();
    assert!(
        texts.contains("hello bob") && texts.contains("d**n it"),
        "{stores:?}: {texts:?}"
    );
    assert!(
        !texts.contains("buy cheap pills"),
        "{stores:?}: a refused message is never stored"
    );
    assert!(
        taken
            .values()
            .any(|e| e["data"]["msgId"] == json!(hello.msg_id.to_string())),
        "{stores:?}: events carry the message as the proto3 JSON mapping"
    );
    assert_eq!(
        app.forged.load(Ordering::Relaxed),
        0,
        "every call was signed"
    );
    std::fs::remove_dir_all(&dir).ok();
}

fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(0u8)
}

#[tokio::test]
async fn the_app_server_vets_sends_and_hears_of_events_over_signed_https() {
    for stores in Stores::available() {
        scenario(stores).await;
    }
}
