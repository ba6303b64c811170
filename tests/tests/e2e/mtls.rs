//! Mutual TLS between services, every service a process of its own with `grpc.tls` set: a
//! message crosses gateway → message-svc → sync-svc → notify-svc → gateway over it and
//! arrives; a plaintext caller gets no answer at all, a TLS caller without a certificate
//! gets health, reflection and the probes but UNAUTHENTICATED for service calls, and a
//! caller with a certificate of another CA fails the handshake, while the services keep
//! serving the right peers.

use std::{net::SocketAddr, path::Path, sync::Arc};

use imesh_kit::{
    config::{GrpcConfig, PeerTlsConfig, Secret},
    grpc::{self, Peers},
    identity::{Actor, Caller},
};
use imesh_protos::{
    gateway::server_frame::Body,
    message::content,
    relation::{
        CreateUserRequest, IssueTokenRequest, relation_service_client::RelationServiceClient,
    },
    sync::sync_event,
};
use imesh_tests::{
    Device, INTERNAL_SECRET,
    processes::{Deployment, Programs},
};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::{
    Code,
    transport::{Certificate, ClientTlsConfig, Endpoint},
};
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

type Ca = CertifiedIssuer<'static, KeyPair>;

/// The name every service's certificate carries (the setting's default).
const SERVER_NAME: &str = "imesh-internal";

fn ca(name: &str) -> Ca {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

/// Writes `<dir>/<name>.pem` and `<dir>/<name>-key.pem`: a certificate for the internal
/// name signed by `ca`.
fn issue(ca: &Ca, dir: &Path, name: &str) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec![SERVER_NAME.into()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    let cert = params.signed_by(&key, ca).unwrap();
    std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
    std::fs::write(dir.join(format!("{name}-key.pem")), key.serialize_pem()).unwrap();
}

/// Peers presenting `<name>.pem` and trusting the internal CA.
fn peers(dir: &Path, name: &str) -> Peers {
    let file = |f: String| dir.join(f).display().to_string();
    Peers::new(&GrpcConfig {
        tls: PeerTlsConfig {
            cert_file: file(format!("{name}.pem")),
            key_file: file(format!("{name}-key.pem")),
            ca_file: file("ca.pem".into()),
            ..PeerTlsConfig::default()
        },
        ..GrpcConfig::default()
    })
    .unwrap()
}

/// A TLS channel that trusts the internal CA and presents no certificate.
fn anonymous(dir: &Path, addr: SocketAddr) -> tonic::transport::Channel {
    let ca = Certificate::from_pem(std::fs::read(dir.join("ca.pem")).unwrap());
    Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(
            ClientTlsConfig::new()
                .ca_certificate(ca)
                .domain_name(SERVER_NAME),
        )
        .unwrap()
        .connect_lazy()
}

/// GET `path` over HTTPS without a client certificate: the status line.
async fn https_get(dir: &Path, addr: SocketAddr, path: &str) -> String {
    let roots = imesh_kit::tls::roots(&dir.join("ca.pem")).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from(SERVER_NAME).unwrap(), tcp)
        .await
        .expect("TLS without a client certificate is accepted");
    let request = format!("GET {path} HTTP/1.1\r\nHost: imesh\r\nConnection: close\r\n\r\n");
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tls.read_to_string(&mut response).await.unwrap();
    response.lines().next().unwrap_or_default().to_owned()
}

async fn user(relation: &mut RelationServiceClient<grpc::Channel>, name: &str) -> (i64, String) {
    let caller = Caller::new(&Secret::new(INTERNAL_SECRET)).unwrap();
    let create = CreateUserRequest {
        username: name.into(),
        nickname: String::new(),
    };
    let user_id = relation
        .create_user(caller.request(Actor::System, create))
        .await
        .expect("a peer with the internal certificate creates a user")
        .into_inner()
        .user
        .unwrap()
        .user_id;
    let token = relation
        .issue_token(caller.request(Actor::System, IssueTokenRequest { user_id }))
        .await
        .unwrap()
        .into_inner()
        .token;
    (user_id, token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_talk_over_mutual_tls_and_refuse_callers_without_the_cas_certificate() {
    let dir = std::env::temp_dir().join(format!("imesh-mtls-{}", imesh_tests::up::free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    let internal = ca("imesh internal CA");
    std::fs::write(dir.join("ca.pem"), internal.pem()).unwrap();
    issue(&internal, &dir, "service");
    issue(&ca("another CA"), &dir, "stranger");
    let file = |f: &str| dir.join(f).display().to_string();
    let deployment = Deployment::start(
        Programs {
            service: env!("CARGO_BIN_EXE_test-service"),
            gateway: env!("CARGO_BIN_EXE_test-gateway"),
        },
        &[
            ("IMESH__GRPC__TLS__CERT_FILE", file("service.pem")),
            ("IMESH__GRPC__TLS__KEY_FILE", file("service-key.pem")),
            ("IMESH__GRPC__TLS__CA_FILE", file("ca.pem")),
        ],
    )
    .await;
    let a = deployment.addrs;

    // A message end to end: every hop between the processes is mutual TLS.
    let mut relation = RelationServiceClient::new(
        peers(&dir, "service")
            .channel(&a.relation.to_string())
            .unwrap(),
    );
    let (_, alice_token) = user(&mut relation, "alice").await;
    let (bob, bob_token) = user(&mut relation, "bob").await;
    let mut alice = Device::connect(a.gateway).await;
    alice
        .auth(&alice_token, "alice-phone")
        .await
        .expect("alice signed in");
    let mut bob_phone = Device::connect(a.gateway).await;
    bob_phone
        .auth(&bob_token, "bob-phone")
        .await
        .expect("bob signed in");
    let Body::SendAck(_) = alice.send_text(bob, "m1", "over mutual TLS").await else {
        panic!("send refused");
    };
    let entry = bob_phone.next_push().await;
    let Some(sync_event::Kind::Message(message)) = entry.event.and_then(|e| e.kind) else {
        panic!("not a message");
    };
    let Some(content::Kind::Text(text)) = message.content.and_then(|c| c.kind) else {
        panic!("not a text");
    };
    assert_eq!(text.text, "over mutual TLS");

    for (name, addr) in [
        ("relation", a.relation),
        ("message", a.message),
        ("gateway", a.gateway_grpc),
    ] {
        // Plaintext: the TLS port answers nothing a gRPC client can read.
        let plain = HealthClient::new(grpc::channel(&addr.to_string()).unwrap())
            .check(HealthCheckRequest::default())
            .await;
        assert!(
            plain.is_err(),
            "{name}: plaintext health answered {plain:?}"
        );

        // TLS without a certificate: health and the probes, no service calls.
        let serving = HealthClient::new(anonymous(&dir, addr))
            .check(HealthCheckRequest::default())
            .await
            .unwrap_or_else(|e| panic!("{name}: health over TLS without a certificate: {e}"));
        assert_eq!(serving.into_inner().status, 1, "{name}: SERVING");
        for probe in ["/livez", "/readyz"] {
            let status = https_get(&dir, addr, probe).await;
            assert!(
                status.starts_with("HTTP/1.1 200"),
                "{name} {probe}: {status}"
            );
        }

        // A certificate of another CA: the handshake fails, nothing is called.
        let stranger =
            HealthClient::new(peers(&dir, "stranger").channel(&addr.to_string()).unwrap())
                .check(HealthCheckRequest::default())
                .await;
        assert!(
            stranger.is_err(),
            "{name}: a stranger's certificate got {stranger:?}"
        );
    }
    let caller = Caller::new(&Secret::new(INTERNAL_SECRET)).unwrap();
    let create = CreateUserRequest {
        username: "mallory".into(),
        nickname: String::new(),
    };
    let refused = RelationServiceClient::new(anonymous(&dir, a.relation))
        .create_user(caller.request(Actor::System, create))
        .await
        .expect_err("a service call without a client certificate");
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    assert!(
        refused.message().contains("client certificate"),
        "{refused:?}"
    );

    // The services still serve the right peers.
    user(&mut relation, "carol").await;
    let Body::SendAck(_) = alice.send_text(bob, "m2", "still here").await else {
        panic!("send refused after the strangers");
    };
    bob_phone.next_push().await;
    drop(deployment);
    let _ = std::fs::remove_dir_all(&dir);
}
