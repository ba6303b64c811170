//! TLS on the client listeners (rustls, ring): WebSocket clients get `wss://` and the framed
//! TCP port speaks TLS when a certificate and key are configured. The PEM files are read
//! again when they change (a cert-manager renewal needs no restart): new handshakes get the
//! new pair, open connections keep theirs. A pair that does not load is logged and the
//! last good one stays.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, SystemTime},
};

use anyhow::Context as _;
use parking_lot::{Mutex, RwLock};
use rustls::{
    ServerConfig,
    crypto::ring,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    server::{ClientHello, ResolvesServerCert},
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

/// The server side of TLS for both client listeners.
pub struct Tls {
    acceptor: TlsAcceptor,
    pair: Arc<Pair>,
    handshake_timeout: Duration,
    reload: Duration,
}

impl Tls {
    /// The listeners' TLS, or `None` for plaintext; fails on files that do not load.
    pub fn load(config: &TlsConfig) -> anyhow::Result<Option<Arc<Self>>> {
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
        let server = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(pair.clone());
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
