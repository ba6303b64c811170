//! The client listeners' accept loop: admission at accept (connections per address and in
//! total, the connect rate; [`crate::admission`]) by the client's address — the peer's, or
//! the one a trusted proxy names in a PROXY protocol v2 header — then the TLS handshake
//! when configured, each on a task of its own so a slow client holds up nobody. A refused
//! plaintext client is told why ([`Refusal`]); a refused TLS client is closed before any
//! handshake work is spent on it.

use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
};

use axum::{extract::connect_info::Connected, serve::IncomingStream};
use parking_lot::Mutex;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::mpsc,
};
use tokio_rustls::server::TlsStream;
use tokio_util::{either::Either, sync::CancellationToken};

use imesh_kit::tls::Tls;

use super::spare::SpareReader;
use crate::admission::{Admission, Refused, Unauthenticated};

/// A client's byte stream, plain or TLS. The TLS state is boxed: inline, its size (about
/// 1 KB of rustls connection) would be paid by every plain connection too.
pub type ClientStream = Either<TcpStream, Box<TlsStream<TcpStream>>>;

/// An admitted connection: its peer, and its place among the unauthenticated connections
/// of its address, held until its session takes it (and drops it once authenticated) or
/// the connection ends.
#[derive(Clone)]
pub struct Client {
    pub peer: SocketAddr,
    place: Arc<Mutex<Option<Unauthenticated>>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Client({})", self.peer)
    }
}

impl Client {
    /// The connection's place, for the session that authenticates on it.
    pub fn take_place(&self) -> Option<Unauthenticated> {
        self.place.lock().take()
    }
}

/// How a listener tells a refused plaintext client why.
pub enum Refusal {
    /// A fatal error frame of the TCP framing ([`crate::transport::tcp::refusal_frame`]).
    Frame,
    /// An HTTP 429 with `Retry-After`, before any WebSocket upgrade.
    Http,
}

/// How one listener admits its clients.
pub struct Accepting {
    pub admission: Arc<Admission>,
    pub tls: Option<Arc<Tls>>,
    pub refusal: Refusal,
    /// Whether a trusted proxy opens each connection with a PROXY protocol v2 header (the
    /// TCP port); else it forwards the client's address per request (WebSocket).
    pub proxy_protocol: bool,
    pub stop: CancellationToken,
}

/// Accepts clients until `stop`, passing each admitted one, after its handshake, to
/// `admitted` (on the client's own task).
pub async fn accept<F, Fut>(listener: TcpListener, how: Accepting, admitted: F)
where
    F: Fn(ClientStream, Client) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let how = Arc::new(how);
    loop {
        let accepted = tokio::select! {
            () = how.stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (socket, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors or similar: give the system a moment to free some.
                tracing::warn!(error = %e, "accepting a client failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        if let Err(e) = socket.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY not set on a client connection");
        }
        tokio::spawn(admit(socket, peer, how.clone(), admitted.clone()));
    }
}

/// Admits one client: by its own address, or by the one a trusted proxy names for it;
/// then its TLS handshake.
async fn admit<F, Fut>(mut socket: TcpStream, peer: SocketAddr, how: Arc<Accepting>, admitted: F)
where
    F: Fn(ClientStream, Client) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let proxied = how.admission.trusts(peer.ip());
    let source = match (proxied, how.proxy_protocol) {
        (true, true) => {
            let header = tokio::time::timeout(PROXY_HEADER_TIMEOUT, proxy_header(&mut socket));
            match header.await {
                Ok(Ok(source)) => source.unwrap_or(peer.ip()),
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "a trusted proxy sent no PROXY v2 header");
                    return;
                }
                Err(_) => return,
            }
        }
        _ => peer.ip(),
    };
    // A WebSocket client behind a trusted proxy is admitted at its upgrade, by the address
    // the proxy forwards.
    let place = if proxied && !how.proxy_protocol {
        None
    } else {
        match how.admission.arrive(source) {
            Ok(place) => Some(place),
            Err(refused) => {
                if how.tls.is_none() {
                    refuse(socket, refused, &how).await;
                }
                return;
            }
        }
    };
    let client = Client {
        peer: SocketAddr::new(source, peer.port()),
        place: Arc::new(Mutex::new(place)),
    };
    let stream = match &how.tls {
        None => Either::Left(socket),
        // Boxed: the handshake's state (about 1.2 KB) would size every connection's task.
        Some(tls) => match Box::pin(tls.accept(socket)).await {
            Ok(stream) => Either::Right(Box::new(stream)),
            Err(e) => {
                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                return;
            }
        },
    };
    // A task of its own, sized for the connection alone: this one's state (the PROXY header,
    // the refusal) ends here.
    tokio::spawn(admitted(stream, client));
}

/// How long a trusted proxy has to send its PROXY header.
const PROXY_HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// The longest PROXY v2 header taken (addresses and TLVs).
const MAX_PROXY_HEADER: usize = 4096;

/// The client address of a PROXY protocol v2 header (`None` for a LOCAL connection, e.g.
/// the proxy's own health check).
async fn proxy_header(socket: &mut TcpStream) -> std::io::Result<Option<IpAddr>> {
    use ppp::v2::{Addresses, Command, Header, PROTOCOL_PREFIX};
    let invalid = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidData, why);
    let mut header = vec![0u8; 16];
    socket.read_exact(&mut header).await?;
    if !header.starts_with(PROTOCOL_PREFIX) {
        return Err(invalid("no PROXY v2 signature".into()));
    }
    let len = usize::from(u16::from_be_bytes([header[14], header[15]]));
    if len > MAX_PROXY_HEADER {
        return Err(invalid(format!("a PROXY header of {len} bytes")));
    }
    header.resize(16 + len, 0);
    socket.read_exact(&mut header[16..]).await?;
    let parsed = Header::try_from(header.as_slice()).map_err(|e| invalid(e.to_string()))?;
    if parsed.command == Command::Local {
        return Ok(None);
    }
    Ok(match parsed.addresses {
        Addresses::IPv4(a) => Some(IpAddr::V4(a.source_address)),
        Addresses::IPv6(a) => Some(IpAddr::V6(a.source_address)),
        Addresses::Unspecified | Addresses::Unix(_) => None,
    })
}

/// Tells a refused plaintext client why (for at most a second), then closes.
async fn refuse(mut socket: TcpStream, refused: Refused, how: &Accepting) {
    let bytes = match how.refusal {
        Refusal::Frame => crate::transport::tcp::refusal_frame(&refused),
        Refusal::Http => {
            let wait_secs = refused.retry_after_secs();
            let body = &refused.message;
            format!(
                "HTTP/1.1 429 Too Many Requests\r\nRetry-After: {wait_secs}\r\n\
                 Content-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            )
            .into()
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), socket.write_all(&bytes)).await;
}

/// Admitted WebSocket clients, as axum takes them.
pub struct Clients {
    incoming: mpsc::Receiver<(ClientStream, Client)>,
    local: SocketAddr,
}

impl Clients {
    /// Accepts on `listener` (see [`accept`]) and hands the admitted clients to axum.
    pub fn serve(listener: TcpListener, how: Accepting) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let (tx, incoming) = mpsc::channel(1024);
        tokio::spawn(accept(listener, how, move |stream, client| {
            let tx = tx.clone();
            async move {
                let _ = tx.send((stream, client)).await;
            }
        }));
        Ok(Self { incoming, local })
    }
}

impl axum::serve::Listener for Clients {
    type Io = SpareReader<ClientStream>;
    type Addr = Client;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.incoming.recv().await {
            Some((stream, client)) => (SpareReader::new(stream), client),
            // The accept loop stopped (shutdown): wait for the server's own shutdown.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(Client {
            peer: self.local,
            place: Arc::default(),
        })
    }
}

impl Connected<IncomingStream<'_, Clients>> for Client {
    fn connect_info(stream: IncomingStream<'_, Clients>) -> Self {
        stream.remote_addr().clone()
    }
}
