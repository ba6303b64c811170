//! TLS on the gateway's client listeners, with a test CA: a client trusting it signs in
//! over wss and over TLS on the framed TCP port, and the bytes on the wire hold no token;
//! a plaintext client on the TLS port is refused; a renewed certificate is served to new
//! connections without a restart.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
};

use futures::{SinkExt, StreamExt};
use imesh_protos::gateway::{Auth, ClientFrame, ServerFrame, client_frame, server_frame::Body};
use imesh_tests::{PATIENCE, Stores, TestCluster, device::tcp_header, eventually};
use prost::Message as _;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf},
    net::TcpStream,
};
use tokio_rustls::{TlsConnector, client::TlsStream};
use tokio_tungstenite::tungstenite::Message;

type Ca = CertifiedIssuer<'static, KeyPair>;

fn test_ca() -> Ca {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "imesh test CA");
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

/// Writes a certificate for localhost signed by `ca` and its key into `dir`; the
/// certificate's DER.
fn issue(ca: &Ca, dir: &Path, name: &str) -> CertificateDer<'static> {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    let cert = params.signed_by(&key, ca).unwrap();
    // Written beside, then renamed over: a reader never sees half a file.
    for (file, pem) in [("cert.pem", cert.pem()), ("key.pem", key.serialize_pem())] {
        let partial = dir.join(format!("{file}.new"));
        std::fs::write(&partial, pem).unwrap();
        std::fs::rename(&partial, dir.join(file)).unwrap();
    }
    cert.der().clone()
}

fn connector(ca: &Ca) -> TlsConnector {
    trusting(ca.der().clone())
}

/// A TLS client trusting `root`.
fn trusting(root: CertificateDer<'static>) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

/// A TCP stream that keeps a copy of every byte crossing it, both ways.
struct Recorded {
    inner: TcpStream,
    wire: Arc<Mutex<Vec<u8>>>,
}

impl AsyncRead for Recorded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = buf.filled()[before..].to_vec();
        self.wire.lock().unwrap().extend(read);
        polled
    }
}

impl AsyncWrite for Recorded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = polled {
            self.wire.lock().unwrap().extend(&data[..n]);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

async fn tls_to(ca: &Ca, addr: SocketAddr) -> (TlsStream<Recorded>, Arc<Mutex<Vec<u8>>>) {
    let wire = Arc::new(Mutex::new(Vec::new()));
    let inner = TcpStream::connect(addr).await.unwrap();
    let recorded = Recorded {
        inner,
        wire: wire.clone(),
    };
    let name = ServerName::try_from("localhost").unwrap();
    let stream = connector(ca)
        .connect(name, recorded)
        .await
        .expect("TLS handshake");
    (stream, wire)
}

fn auth_frame(token: &str) -> Vec<u8> {
    let auth = Auth {
        token: token.into(),
        device_id: "tls-device".into(),
        platform: "ios".into(),
    };
    ClientFrame {
        request_id: 1,
        body: Some(client_frame::Body::Auth(auth)),
    }
    .encode_to_vec()
}

/// One framed TCP frame from `stream`; `None` at its end.
async fn read_frame(stream: &mut (impl AsyncRead + Unpin)) -> Option<ServerFrame> {
    let mut header = [0u8; imesh_tests::device::TCP_HEADER];
    stream.read_exact(&mut header).await.ok()?;
    let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let mut body = vec![0; len];
    stream.read_exact(&mut body).await.ok()?;
    Some(ServerFrame::decode(body.as_slice()).unwrap())
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

async fn cluster_with_tls(dir: &Path) -> TestCluster {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    TestCluster::start_with(Stores::Embedded, |spec| {
        spec.gateway.tls.cert_file = cert.display().to_string();
        spec.gateway.tls.key_file = key.display().to_string();
        spec.gateway.tls.reload_secs = 1;
    })
    .await
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("imesh-tls-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn a_client_trusting_the_ca_signs_in_over_tls_tcp_and_wss_and_no_token_crosses_in_clear() {
    let (ca, dir) = (test_ca(), temp_dir("signin"));
    issue(&ca, &dir, "gateway");
    let env = cluster_with_tls(&dir).await;
    let (_, token) = env.user("secret").await;

    // Framed TCP over TLS.
    let (mut stream, wire) = tls_to(&ca, env.cluster.addrs.gateway_tcp).await;
    let frame = auth_frame(&token);
    let mut framed = tcp_header(frame.len(), 1);
    framed.extend(frame);
    stream.write_all(&framed).await.unwrap();
    let reply = tokio::time::timeout(PATIENCE, read_frame(&mut stream))
        .await
        .unwrap();
    assert!(matches!(reply.and_then(|f| f.body), Some(Body::AuthOk(_))));
    assert!(
        !contains(&wire.lock().unwrap(), token.as_bytes()),
        "the token crossed in clear"
    );

    // WebSocket over TLS.
    let (stream, wire) = tls_to(&ca, env.cluster.addrs.gateway).await;
    let url = format!("wss://localhost:{}/ws", env.cluster.addrs.gateway.port());
    let (mut ws, _) = tokio_tungstenite::client_async(url, stream)
        .await
        .expect("wss upgrade");
    ws.send(Message::Binary(auth_frame(&token).into()))
        .await
        .unwrap();
    let reply = tokio::time::timeout(PATIENCE, ws.next()).await.unwrap();
    let Some(Ok(Message::Binary(bytes))) = reply else {
        panic!("no reply: {reply:?}");
    };
    let reply = ServerFrame::decode(bytes).unwrap();
    assert!(matches!(reply.body, Some(Body::AuthOk(_))), "{reply:?}");
    assert!(
        !contains(&wire.lock().unwrap(), token.as_bytes()),
        "the token crossed in clear"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn a_plaintext_client_on_the_tls_port_is_refused() {
    let (ca, dir) = (test_ca(), temp_dir("plain"));
    issue(&ca, &dir, "gateway");
    let env = cluster_with_tls(&dir).await;
    let (_, token) = env.user("plain").await;
    let mut plain = TcpStream::connect(env.cluster.addrs.gateway_tcp)
        .await
        .unwrap();
    let frame = auth_frame(&token);
    let mut framed = tcp_header(frame.len(), 1);
    framed.extend(frame);
    plain.write_all(&framed).await.unwrap();
    // The handshake fails: the connection closes (after a TLS alert at most), no frame.
    let mut answer = Vec::new();
    let read = tokio::time::timeout(PATIENCE, plain.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the connection was closed");
    assert!(
        read_frame(&mut answer.as_slice())
            .await
            .is_none_or(|f| !matches!(f.body, Some(Body::AuthOk(_)))),
        "no session over plaintext"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn a_renewed_certificate_is_served_to_new_connections_without_a_restart() {
    let (ca, dir) = (test_ca(), temp_dir("renew"));
    let first = issue(&ca, &dir, "first");
    let env = cluster_with_tls(&dir).await;
    let served = |addr| {
        let ca = &ca;
        async move {
            let (stream, _) = tls_to(ca, addr).await;
            let (_, session) = stream.get_ref();
            session.peer_certificates().unwrap()[0].clone().into_owned()
        }
    };
    assert_eq!(served(env.cluster.addrs.gateway_tcp).await, first);
    let renewed = issue(&ca, &dir, "renewed");
    eventually("the renewed certificate served", PATIENCE, || async {
        (served(env.cluster.addrs.gateway_tcp).await == renewed).then_some(())
    })
    .await;
    assert_eq!(
        served(env.cluster.addrs.gateway).await,
        renewed,
        "both listeners"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn imesh_up_serves_tls_with_the_self_signed_certificate_it_keeps_private() {
    let up = imesh_tests::up::UpProcess::start(
        env!("CARGO_BIN_EXE_test-imesh"),
        &["--tls-self-signed"],
        &[],
    )
    .await;
    let pem = std::fs::read(up.data.join("tls-cert.pem")).expect("the certificate kept");
    let connector = trusting(CertificateDer::from_pem_slice(&pem).unwrap());
    for addr in [up.gateway, up.gateway_tcp] {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let name = ServerName::try_from("localhost").unwrap();
        connector
            .connect(name, tcp)
            .await
            .expect("a handshake with the kept certificate");
    }
    use std::os::unix::fs::PermissionsExt;
    for private in ["tls-key.pem", "dev-secrets"] {
        let mode = std::fs::metadata(up.data.join(private))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{private} readable by its owner only");
    }
}
