//! The server side of TLS (rustls, ring), for the gateway's client listeners and for the
//! gRPC port of every service (where it also checks the callers' certificates). The PEM
//! files are read again when they change (a cert-manager renewal needs no restart): new
//! handshakes get the new pair, open connections keep theirs. A pair that does not load is
//! logged and the last good one stays.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, SystemTime},
};

use anyhow::Context as _;
use parking_lot::{Mutex, RwLock};
use rustls::{
    RootCertStore, ServerConfig,
    crypto::ring,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier},
    sign::CertifiedKey,
};
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, server::TlsStream};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct TlsConfig {
    /// The certificate chain (PEM, leaf first); empty: plaintext listeners.
    pub cert_file: String,
    /// Its private key (PEM).
    pub key_file: String,
    /// How often the files are checked for a change.
    pub reload_secs: u64,
    /// A handshake not done in this long closes the connection.
    pub handshake_timeout_ms: u64,
}

impl Default for TlsConfig {
    fn default() -> Self {
        Self {
            cert_file: String::new(),
            key_file: String::new(),
            reload_secs: 10,
            handshake_timeout_ms: 5_000,
        }
    }
}

impl TlsConfig {
    pub fn enabled(&self) -> bool {
        !self.cert_file.is_empty()
    }
}

/// A listener's TLS: the certificate it presents, and the handshake's bounds.
pub struct Tls {
    acceptor: TlsAcceptor,
    pair: Arc<Pair>,
    handshake_timeout: Duration,
    reload: Duration,
}

impl Tls {
    /// The listener's TLS, or `None` for plaintext; fails on files that do not load.
    /// With `client_ca`, a client may present a certificate, and one not signed by that CA
    /// fails the handshake; whether a call needs one is the server's to decide
    /// ([`peer_verified`]). `alpn` lists the application protocols offered (none: the
    /// client's choice is not negotiated).
    pub fn load(
        config: &TlsConfig,
        client_ca: Option<&Path>,
        alpn: &[&[u8]],
    ) -> anyhow::Result<Option<Arc<Self>>> {
        if !config.enabled() {
            return Ok(None);
        }
        anyhow::ensure!(
            !config.key_file.is_empty(),
            "tls.key_file: must be set with tls.cert_file"
        );
        let pair = Arc::new(Pair::load(
            config.cert_file.clone().into(),
            config.key_file.clone().into(),
        )?);
        let provider = Arc::new(ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?;
        let builder = match client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => builder.with_client_cert_verifier(
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca)?), provider)
                    .allow_unauthenticated()
                    .build()?,
            ),
        };
        let mut server = builder.with_cert_resolver(pair.clone());
        server.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Some(Arc::new(Self {
            acceptor: TlsAcceptor::from(Arc::new(server)),
            pair,
            handshake_timeout: Duration::from_millis(config.handshake_timeout_ms),
            reload: Duration::from_secs(config.reload_secs.max(1)),
        })))
    }

    /// The server's half of a handshake, within the handshake timeout.
    pub async fn accept(&self, tcp: TcpStream) -> std::io::Result<TlsStream<TcpStream>> {
        tokio::time::timeout(self.handshake_timeout, self.acceptor.accept(tcp))
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timed out")
            })?
    }

    /// Reads the files again whenever they change, until `stop`.
    pub async fn watch(self: Arc<Self>, stop: CancellationToken) {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(self.reload) => {}
            }
            if let Err(e) = self.pair.reload_if_changed() {
                tracing::warn!(error = %format!("{e:#}"), "TLS certificate not reloaded; the last good one stays");
            }
        }
    }
}

/// The certificate and key new handshakes get, and the file times they were read at.
#[derive(Debug)]
struct Pair {
    files: (PathBuf, PathBuf),
    current: RwLock<Arc<CertifiedKey>>,
    read_at: Mutex<(SystemTime, SystemTime)>,
}

impl Pair {
    fn load(cert: PathBuf, key: PathBuf) -> anyhow::Result<Self> {
        let read_at = (modified(&cert)?, modified(&key)?);
        let current = read_pair(&cert, &key)?;
        Ok(Self {
            files: (cert, key),
            current: RwLock::new(Arc::new(current)),
            read_at: Mutex::new(read_at),
        })
    }

    fn reload_if_changed(&self) -> anyhow::Result<()> {
        let (cert, key) = &self.files;
        let now = (modified(cert)?, modified(key)?);
        if *self.read_at.lock() == now {
            return Ok(());
        }
        let pair = read_pair(cert, key)?;
        *self.current.write() = Arc::new(pair);
        *self.read_at.lock() = now;
        tracing::info!(cert = %cert.display(), "TLS certificate reloaded");
        Ok(())
    }
}

impl ResolvesServerCert for Pair {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().clone())
    }
}

/// Whether the connection a request came on presented a client certificate (checked
/// against the CA at the handshake).
pub fn peer_verified(extensions: &http::Extensions) -> bool {
    extensions
        .get::<tonic::transport::server::TlsConnectInfo<tonic::transport::server::TcpConnectInfo>>()
        .and_then(|info| info.peer_certs())
        .is_some_and(|certs| !certs.is_empty())
}

/// The certificates of a CA file, as trust anchors.
pub fn roots(ca: &Path) -> anyhow::Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca)
        .with_context(|| format!("{}: holds no PEM certificate", ca.display()))?
    {
        roots
            .add(cert.with_context(|| format!("{}: a certificate does not parse", ca.display()))?)
            .with_context(|| format!("{}: not a CA certificate", ca.display()))?;
    }
    anyhow::ensure!(!roots.is_empty(), "{}: holds no certificate", ca.display());
    Ok(roots)
}

fn modified(path: &Path) -> anyhow::Result<SystemTime> {
    let meta = std::fs::metadata(path).with_context(|| format!("tls: {}", path.display()))?;
    Ok(meta.modified()?)
}

fn read_pair(cert: &Path, key: &Path) -> anyhow::Result<CertifiedKey> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .with_context(|| format!("tls.cert_file: {} holds no PEM certificate", cert.display()))?;
    anyhow::ensure!(
        !chain.is_empty(),
        "tls.cert_file: {} holds no certificate",
        cert.display()
    );
    let private = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("tls.key_file: {} holds no PEM private key", key.display()))?;
    CertifiedKey::from_der(chain, private, &ring::default_provider())
        .context("tls: the key does not belong to the certificate, or is of an unsupported kind")
}
