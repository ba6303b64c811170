//! One load-tool device: a real WebSocket or TCP connection to a gateway speaking the
//! client protocol. Requests await their reply by request id; pushes go to the device's
//! [`Tally`] as they arrive, on the connection's reader task.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use anyhow::{Context, bail};
use bytes::{Buf, BufMut, BytesMut};
use futures::{SinkExt, StreamExt};
use imesh_protos::gateway::{
    Ack, Auth, ClientFrame, ServerFrame, client_frame::Body as Out, server_frame::Body as In,
};
use parking_lot::Mutex;
use prost::Message as _;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    sync::{mpsc, oneshot},
};
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_util::sync::CancellationToken;

use super::tally::Tally;

/// How long a request waits for its reply.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// Frames queued for writing per device.
const WRITE_QUEUE: usize = 64;
/// Entries a device lets wait for its ack before it acks at once, beside the scenario's
/// periodic acks: well inside the gateway's window (256 pushes by default), which closes
/// a connection that leaves more unacknowledged.
const ACK_AFTER: i64 = 64;

/// Where devices connect: a WebSocket URL or a TCP address of the gateway, the latter
/// over TLS trusting a given certificate.
#[derive(Clone)]
pub enum Target {
    Ws(String),
    Tcp(String),
    Tls(String, tokio_rustls::TlsConnector),
}

impl Target {
    /// `ws://host:port/ws`, `tcp://host:port` or `tls://host:port`; a TLS target trusts
    /// the certificate (PEM) at `ca`.
    pub fn parse(gateway: &str, ca: Option<&std::path::Path>) -> anyhow::Result<Self> {
        if gateway.starts_with("ws://") {
            Ok(Self::Ws(gateway.to_owned()))
        } else if let Some(addr) = gateway.strip_prefix("tcp://") {
            Ok(Self::Tcp(addr.to_owned()))
        } else if let Some(addr) = gateway.strip_prefix("tls://") {
            let ca = ca.context("--gateway tls://…: --ca names the certificate to trust")?;
            Ok(Self::Tls(addr.to_owned(), connector(ca)?))
        } else {
            bail!(
                "--gateway {gateway:?}: expected ws://host:port/ws, tcp://host:port or tls://host:port"
            )
        }
    }
}

/// A TLS client trusting the certificates in the PEM file `ca`.
fn connector(ca: &std::path::Path) -> anyhow::Result<tokio_rustls::TlsConnector> {
    let roots = imesh_kit::tls::roots(ca).context("--ca")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<In>>>>;

/// A connected, authenticated device.
pub struct Client {
    writes: mpsc::Sender<Vec<u8>>,
    pending: Pending,
    next_request: AtomicU64,
    /// Cancelled when the connection ends, from either side.
    pub closed: CancellationToken,
    pub tally: Arc<Tally>,
}

impl Client {
    /// Connects, authenticates as `token` from `device_id`, and starts reading.
    pub async fn connect(
        target: &Target,
        token: &str,
        device_id: &str,
        tally: Arc<Tally>,
    ) -> anyhow::Result<Self> {
        let (writes, queued) = mpsc::channel(WRITE_QUEUE);
        let (frames_tx, frames_rx) = mpsc::channel::<ServerFrame>(WRITE_QUEUE);
        let closed = CancellationToken::new();
        match target {
            Target::Ws(url) => {
                let (ws, _) = tokio_tungstenite::connect_async(url.as_str())
                    .await
                    .with_context(|| format!("connecting to {url}"))?;
                let (sink, stream) = ws.split();
                tokio::spawn(write_ws(sink, queued, closed.clone()));
                tokio::spawn(read_ws(stream, frames_tx, closed.clone()));
            }
            Target::Tcp(addr) => {
                let stream = tcp(addr).await?;
                let (read, write) = stream.into_split();
                tokio::spawn(write_tcp(write, queued, closed.clone()));
                tokio::spawn(read_tcp(read, frames_tx, closed.clone()));
            }
            Target::Tls(addr, connector) => {
                let host = addr
                    .rsplit_once(':')
                    .map_or(addr.as_str(), |(host, _)| host);
                let name = rustls::pki_types::ServerName::try_from(host.to_owned())?;
                let stream = connector
                    .connect(name, tcp(addr).await?)
                    .await
                    .with_context(|| format!("TLS with {addr}"))?;
                let (read, write) = tokio::io::split(stream);
                tokio::spawn(write_tcp(write, queued, closed.clone()));
                tokio::spawn(read_tcp(read, frames_tx, closed.clone()));
            }
        }
        let client = Self {
            writes,
            pending: Pending::default(),
            next_request: AtomicU64::new(0),
            closed,
            tally,
        };
        tokio::spawn(dispatch(
            frames_rx,
            client.pending.clone(),
            client.tally.clone(),
            client.writes.clone(),
            client.closed.clone(),
        ));
        let auth = Out::Auth(Auth {
            token: token.to_owned(),
            device_id: device_id.to_owned(),
            platform: "desktop".into(),
        });
        match client.request(auth).await? {
            In::AuthOk(_) => Ok(client),
            other => bail!("auth refused: {other:?}"),
        }
    }

    /// Sends `body` and waits for its reply (an error frame is a reply too).
    pub async fn request(&self, body: Out) -> anyhow::Result<In> {
        self.start(body).await?.await
    }

    /// Writes a request and returns the wait for its reply: requests started one after
    /// another are written in that order, however their replies are awaited.
    pub async fn start(
        &self,
        body: Out,
    ) -> anyhow::Result<impl Future<Output = anyhow::Result<In>> + use<>> {
        let id = self.next_request.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = oneshot::channel();
        self.pending.lock().insert(id, tx);
        // A connection ends by being marked closed, then forgetting its waiters: a waiter
        // put in after that would wait for nothing.
        if self.closed.is_cancelled() {
            self.pending.lock().remove(&id);
            bail!("the connection is closed");
        }
        self.write(id, body).await?;
        let pending = self.pending.clone();
        Ok(async move {
            match tokio::time::timeout(REPLY_TIMEOUT, rx).await {
                Ok(Ok(reply)) => Ok(reply),
                Ok(Err(_)) => bail!("the connection closed before the reply"),
                Err(_) => {
                    pending.lock().remove(&id);
                    bail!("no reply within {REPLY_TIMEOUT:?}")
                }
            }
        })
    }

    /// Sends `body` without waiting for anything (acks, pings).
    pub async fn tell(&self, body: Out) -> anyhow::Result<()> {
        self.write(0, body).await
    }

    async fn write(&self, request_id: u64, body: Out) -> anyhow::Result<()> {
        self.writes
            .send(encoded(request_id, body))
            .await
            .map_err(|_| anyhow::anyhow!("the connection is closed"))
    }

    /// Closes the connection from this side.
    pub fn close(&self) {
        self.closed.cancel();
    }
}

/// A client frame as the bytes written.
fn encoded(request_id: u64, body: Out) -> Vec<u8> {
    ClientFrame {
        request_id,
        body: Some(body),
    }
    .encode_to_vec()
}

/// Routes replies to their waiting requests and pushes to the tally; acks once
/// [`ACK_AFTER`] entries wait.
async fn dispatch(
    mut frames: mpsc::Receiver<ServerFrame>,
    pending: Pending,
    tally: Arc<Tally>,
    writes: mpsc::Sender<Vec<u8>>,
    closed: CancellationToken,
) {
    let mut acked = 0;
    while let Some(frame) = frames.recv().await {
        let Some(body) = frame.body else { continue };
        if frame.request_id != 0
            && let Some(waiter) = pending.lock().remove(&frame.request_id)
        {
            let _ = waiter.send(body);
            continue;
        }
        match body {
            In::Push(push) => {
                tally.pushed(push.entries);
                let cursor = tally.cursor();
                let ack = || encoded(0, Out::Ack(Ack { sync_seq: cursor }));
                // A full write queue acks with the next push instead.
                if cursor - acked >= ACK_AFTER && writes.try_send(ack()).is_ok() {
                    acked = cursor;
                }
            }
            In::Error(e) if e.fatal => {
                tally.closed_by_server(&e.message);
                closed.cancel();
            }
            _ => {}
        }
    }
    closed.cancel();
    pending.lock().clear();
}

type WsStream =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn write_ws(
    mut sink: futures::stream::SplitSink<WsStream, WsMessage>,
    mut queued: mpsc::Receiver<Vec<u8>>,
    closed: CancellationToken,
) {
    loop {
        let frame = tokio::select! {
            () = closed.cancelled() => break,
            frame = queued.recv() => frame,
        };
        let Some(frame) = frame else { break };
        if sink.send(WsMessage::Binary(frame.into())).await.is_err() {
            break;
        }
    }
    let _ = sink.close().await;
    closed.cancel();
}

async fn read_ws(
    mut stream: futures::stream::SplitStream<WsStream>,
    frames: mpsc::Sender<ServerFrame>,
    closed: CancellationToken,
) {
    loop {
        let message = tokio::select! {
            () = closed.cancelled() => break,
            message = stream.next() => message,
        };
        match message {
            Some(Ok(WsMessage::Binary(bytes))) => {
                let Ok(frame) = ServerFrame::decode(bytes) else {
                    break;
                };
                if frames.send(frame).await.is_err() {
                    break;
                }
            }
            Some(Ok(WsMessage::Close(_))) | Some(Err(_)) | None => break,
            Some(Ok(_)) => {}
        }
    }
    closed.cancel();
}

/// Bytes of the TCP frame header: length u32, version u16, flags u16, command u16, seq u16.
const TCP_HEADER: usize = 12;

async fn tcp(addr: &str) -> anyhow::Result<TcpStream> {
    let stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

async fn write_tcp(
    mut write: impl tokio::io::AsyncWrite + Unpin,
    mut queued: mpsc::Receiver<Vec<u8>>,
    closed: CancellationToken,
) {
    let mut buf = BytesMut::new();
    loop {
        let frame = tokio::select! {
            () = closed.cancelled() => break,
            frame = queued.recv() => frame,
        };
        let Some(frame) = frame else { break };
        buf.clear();
        buf.put_u32(frame.len() as u32);
        buf.put_u16(1);
        buf.put_u16(0);
        // Command and request seq are informational on the way in: the gateway decodes
        // both from the frame itself.
        buf.put_u16(0);
        buf.put_u16(0);
        buf.extend_from_slice(&frame);
        if write.write_all(&buf).await.is_err() {
            break;
        }
    }
    let _ = write.shutdown().await;
    closed.cancel();
}

async fn read_tcp(
    mut read: impl tokio::io::AsyncRead + Unpin,
    frames: mpsc::Sender<ServerFrame>,
    closed: CancellationToken,
) {
    let mut buf = BytesMut::with_capacity(16 * 1024);
    'read: loop {
        let n = tokio::select! {
            () = closed.cancelled() => break,
            n = read.read_buf(&mut buf) => n,
        };
        if !matches!(n, Ok(n) if n > 0) {
            break;
        }
        while buf.len() >= TCP_HEADER {
            let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            if buf.len() < TCP_HEADER + len {
                break;
            }
            buf.advance(TCP_HEADER);
            let body = buf.split_to(len);
            let Ok(frame) = ServerFrame::decode(body) else {
                break 'read;
            };
            if frames.send(frame).await.is_err() {
                break 'read;
            }
        }
    }
    closed.cancel();
}
