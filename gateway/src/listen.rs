//! The client listeners' accept loop: admission at accept (connections per address and in
//! total, the connect rate; [`crate::admission`]), then the TLS handshake when configured,
//! each on a task of its own so a slow handshake holds up nobody. A refused plaintext
//! client is told why ([`Refusal`]); a refused TLS client is closed before any handshake
//! work is spent on it.

use std::{net::SocketAddr, sync::Arc};

use axum::{extract::connect_info::Connected, serve::IncomingStream};
use parking_lot::Mutex;
use tokio::{
    io::AsyncWriteExt,
    net::{TcpListener, TcpStream},
    sync::mpsc,
};
use tokio_rustls::server::TlsStream;
use tokio_util::{either::Either, sync::CancellationToken};

use crate::{
    admission::{Admission, Refused, Unauthenticated},
    tls::Tls,
};

/// A client's byte stream, plain or TLS.
pub type ClientStream = Either<TcpStream, TlsStream<TcpStream>>;

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
    /// A fatal error frame of the TCP framing.
    Frame(fn(&Refused, usize) -> bytes::Bytes),
    /// An HTTP 429 with `Retry-After`, before any WebSocket upgrade.
    Http,
}

/// Where accepted clients go: each to a task of its own (`spawn`), or to an axum listener.
pub struct Accepting {
    pub admission: Arc<Admission>,
    pub tls: Option<Arc<Tls>>,
    pub refusal: Refusal,
    pub max_frame_bytes: usize,
    pub stop: CancellationToken,
}

/// Accepts clients until `stop`, passing each admitted one, after its handshake, to
/// `admitted`.
pub async fn accept<F>(listener: TcpListener, how: Accepting, admitted: F)
where
    F: Fn(ClientStream, Client) + Clone + Send + 'static,
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
        let place = match how.admission.arrive(peer.ip()) {
            Ok(place) => place,
            Err(refused) => {
                if how.tls.is_none() {
                    tokio::spawn(refuse(socket, refused, how.clone()));
                }
                continue;
            }
        };
        let client = Client {
            peer,
            place: Arc::new(Mutex::new(Some(place))),
        };
        let (how, admitted) = (how.clone(), admitted.clone());
        tokio::spawn(async move {
            let stream = match &how.tls {
                None => Either::Left(socket),
                Some(tls) => match tls.accept(socket).await {
                    Ok(stream) => Either::Right(stream),
                    Err(e) => {
                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        return;
                    }
                },
            };
            admitted(stream, client);
        });
    }
}

/// Tells a refused plaintext client why (for at most a second), then closes.
async fn refuse(mut socket: TcpStream, refused: Refused, how: Arc<Accepting>) {
    let bytes = match how.refusal {
        Refusal::Frame(frame) => frame(&refused, how.max_frame_bytes),
        Refusal::Http => {
            let wait_secs = refused.retry_after.as_secs_f64().ceil().max(1.0);
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
            tokio::spawn(async move {
                let _ = tx.send((stream, client)).await;
            });
        }));
        Ok(Self { incoming, local })
    }
}

impl axum::serve::Listener for Clients {
    type Io = ClientStream;
    type Addr = Client;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.incoming.recv().await {
            Some(accepted) => accepted,
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
