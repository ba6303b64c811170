//! One client connection's life, whatever carries it: the auth frame in time, presence,
//! the super groups it follows, sends queued in order on [`crate::peers::sends`], other requests
//! handled concurrently up to [`IN_FLIGHT`], pushes and replies through a bounded queue to
//! its [`crate::transport::writer`]. The registry closes idle connections and drains them
//! ([`crate::connections`]).
//! [`crate::transport::ws`] and [`crate::transport::tcp`] adapt their framing to [`Inbound`] and a frame sink.

use std::sync::Arc;

use bytes::Bytes;
use futures::{FutureExt, Sink, Stream, StreamExt};
use imesh_protos::{
    gateway::{self as pb, server_frame::Body},
    notify::Device,
};
use prost::Message as _;
use tokio::{sync::Semaphore, time::Instant};
use tokio_util::sync::CancellationToken;
use tonic::Code;
use tracing::Instrument as _;

use crate::{
    Gateway,
    admission::Unauthenticated,
    connections::{Handle, Signals},
    session::{self, Session},
    transport::frames,
    transport::queue,
    transport::window::{Out, Window},
};

/// Requests of one connection in flight at once; more wait (backpressure on the reader).
const IN_FLIGHT: usize = 32;

/// What a transport read from its client.
pub enum Inbound {
    /// One encoded `ClientFrame`.
    Frame(Bytes),
    /// Something the transport read but cannot take as a frame; the connection goes on.
    Refused(String),
    /// The byte stream cannot be followed any more (a bad or oversized header): the client
    /// is told why and the connection closes.
    Broken(String),
    /// Transport-level liveness (WebSocket pings): activity, nothing to handle.
    Alive,
}

/// Serves one connection until the client leaves, idles out, breaks the framing or the
/// gateway drains.
///
/// Every idle client's task is sized for the largest state of this future, so it is
/// written to stay small: blocks instead of `async fn`s where arguments would be stored
/// twice, and the rare or short-lived states (auth, session setup and teardown) boxed.
pub fn serve<R, W>(
    reader: R,
    writer: W,
    gateway: Arc<Gateway>,
    unauthenticated: Unauthenticated,
) -> impl Future<Output = ()>
where
    R: Stream<Item = Inbound> + Unpin,
    W: Sink<Bytes> + Unpin,
{
    let (tx, rx) = queue::bounded(gateway.config.send_queue);
    let close = CancellationToken::new();
    let window = Window::new(gateway.config.unacked_window, gateway.config.ack_timeout());
    // The writer shares the connection's task (a task of its own would cost its header and
    // allocation for every idle client); each half is allocated once, at its own size,
    // never moved into a larger state.
    let writing = Box::pin(crate::transport::writer::write_frames(
        writer,
        rx,
        window,
        close.clone(),
    ));
    let reading = Box::pin(read(reader, gateway, tx, close, unauthenticated));
    futures::future::join(writing, reading).map(|((), ())| ())
}

/// The reading half of a connection: the auth frame, then the session's requests.
fn read<R>(
    reader: R,
    gateway: Arc<Gateway>,
    tx: queue::Sender,
    close: CancellationToken,
    unauthenticated: Unauthenticated,
) -> impl Future<Output = ()>
where
    R: Stream<Item = Inbound> + Unpin,
{
    // The start is boxed and over once the session is open: what stays is [`Reading`].
    let starting = Box::pin(start(reader, gateway, tx, close.clone(), unauthenticated));
    async move {
        if let Some(mut reading) = starting.await {
            reading.read_frames().await;
            Box::pin(reading.finish()).await;
        }
        close.cancel();
    }
}

/// The auth frame, verified; `None` after telling the client why not.
async fn authenticated<R>(
    reader: &mut R,
    gateway: &Gateway,
    tx: &queue::Sender,
) -> Option<(u64, i64, pb::Auth)>
where
    R: Stream<Item = Inbound> + Unpin,
{
    let first = async {
        loop {
            match reader.next().await? {
                Inbound::Alive => continue,
                Inbound::Frame(frame) => return Some(frame),
                Inbound::Refused(_) | Inbound::Broken(_) => return Some(Bytes::new()),
            }
        }
    };
    let verified = match tokio::time::timeout(gateway.config.auth_timeout(), first).await {
        Ok(None) => return None,
        Ok(Some(frame)) => session::authenticate(&gateway.tokens, &frame),
        Err(_) => Err(frames::error(
            0,
            Code::Unauthenticated,
            "auth: no auth frame in time",
            true,
        )),
    };
    let verified = verified.and_then(|(request_id, verified, auth)| {
        match gateway.admission.check_platform(&auth.platform) {
            Ok(()) => Ok((request_id, verified, auth)),
            Err(refused) => Err(frames::refused(request_id, &refused)),
        }
    });
    let checked = match verified {
        Ok((request_id, verified, auth)) => Box::pin(gateway.backends.token_current(verified))
            .await
            .map(|()| (request_id, verified.user_id, auth))
            .map_err(|status| frames::error(request_id, status.code(), status.message(), true)),
        Err(frame) => Err(frame),
    };
    match checked {
        Ok(ok) => Some(ok),
        Err(frame) => {
            let _ = tx.send(Out::Frame(frame)).await;
            None
        }
    }
}

/// Authenticates, admits and opens the session; `None` after telling the client why not.
async fn start<R>(
    mut reader: R,
    gateway: Arc<Gateway>,
    tx: queue::Sender,
    close: CancellationToken,
    unauthenticated: Unauthenticated,
) -> Option<Box<Reading<R>>>
where
    R: Stream<Item = Inbound> + Unpin,
{
    let authenticated = authenticated(&mut reader, &gateway, &tx).await;
    drop(unauthenticated);
    let (request_id, user, auth) = authenticated?;
    // The token is not needed past the check: the connection keeps only the device.
    let pb::Auth {
        token,
        device_id,
        platform,
    } = auth;
    drop(token);
    let signals = Arc::<Signals>::default();
    let conn_id = admit(&gateway, &tx, &close, (request_id, user), &signals)?;
    let device = Device {
        user_id: user,
        device_id,
        platform,
        gateway_addr: gateway.advertise.clone(),
        conn_id,
    };
    let session = open(&gateway, &tx, &close, request_id, device).await?;
    // Boxed: returned as a value, it would be laid out twice in the caller's state.
    Some(Box::new(Reading {
        limit: FrameLimit::new(gateway.config.frames_per_sec),
        reader,
        gateway,
        tx,
        close,
        session,
        signals,
        in_flight: Arc::new(Semaphore::new(IN_FLIGHT)),
        refreshed: Instant::now(),
    }))
}

/// What an open session's reader holds between frames: all an idle connection's reading
/// half is.
struct Reading<R> {
    reader: R,
    gateway: Arc<Gateway>,
    tx: queue::Sender,
    close: CancellationToken,
    session: Session,
    signals: Arc<Signals>,
    /// Requests other than sends and acks, handled beside the reader.
    in_flight: Arc<Semaphore>,
    limit: FrameLimit,
    /// When presence was last refreshed.
    refreshed: Instant,
}

/// The session of an admitted device: the super groups it follows, its `auth_ok`, its
/// presence. `None` (the connection unregistered, the client told why) when presence
/// cannot take it.
async fn open(
    gateway: &Gateway,
    tx: &queue::Sender,
    close: &CancellationToken,
    request_id: u64,
    device: Device,
) -> Option<Session> {
    let (user, conn_id) = (device.user_id, device.conn_id);
    let super_groups: Arc<[i64]> = match gateway.backends.super_groups(user).await {
        Ok(groups) => groups.into(),
        Err(status) => {
            tracing::warn!(error = %status, "listing super groups failed; no live hints for them");
            Arc::from([])
        }
    };
    gateway.connections.follow(conn_id, &super_groups);
    let session = Session {
        device,
        super_groups: Arc::new(parking_lot::Mutex::new(super_groups.clone())),
        backends: gateway.backends.clone(),
        outlet: crate::peers::sends::Outlet::new(tx.clone(), close.clone()),
    };
    let auth_ok = Body::AuthOk(pb::AuthOk {
        user_id: user,
        connection_id: conn_id,
    });
    let _ = tx
        .send(Out::Frame(frames::encode(request_id, auth_ok)))
        .await;
    let online = gateway
        .backends
        .online(session.device.clone(), super_groups.to_vec(), true);
    match online.await {
        Ok(()) => Some(session),
        Err(status) => {
            tracing::warn!(error = %status, "registering presence failed");
            let why = "presence unavailable; reconnect later";
            say(tx, frames::error(0, Code::Unavailable, why, true));
            unregister(gateway, session.device).await;
            None
        }
    }
}

/// What woke an idle connection's reader.
enum Woke {
    Inbound(Option<Inbound>),
    Closed,
    Regroup,
}

async fn wait<R>(reader: &mut R, close: &CancellationToken, regroup: &tokio::sync::Notify) -> Woke
where
    R: Stream<Item = Inbound> + Unpin,
{
    tokio::select! {
        () = close.cancelled() => Woke::Closed,
        () = regroup.notified() => Woke::Regroup,
        inbound = reader.next() => Woke::Inbound(inbound),
    }
}

/// What became of one inbound frame.
enum Taken {
    /// Answered, queued (sends) or refused: read on.
    Done,
    /// The connection ends.
    End,
    /// A request to handle on a task of its own, with its span.
    Request(Box<(pb::ClientFrame, tracing::Span)>),
}

impl<R: Stream<Item = Inbound> + Unpin> Reading<R> {
    async fn read_frames(&mut self) {
        loop {
            let woke = wait(&mut self.reader, &self.close, &self.signals.regroup).await;
            let frame = match woke {
                Woke::Closed | Woke::Inbound(None) => return,
                Woke::Regroup => {
                    let connections = self.gateway.connections.clone();
                    tokio::spawn(refollow(self.session.clone(), connections));
                    continue;
                }
                Woke::Inbound(Some(inbound)) => {
                    self.signals.read();
                    inbound
                }
            };
            let request = match self.take(frame) {
                Taken::Done => continue,
                Taken::End => return,
                Taken::Request(request) => request,
            };
            // Boxed, and only when the connection is at its limit: the wait would
            // otherwise hold a decoded frame in every idle connection's task.
            let permit = match self.in_flight.clone().try_acquire_owned() {
                Ok(permit) => Ok(permit),
                Err(_) => Box::pin(self.in_flight.clone().acquire_owned()).await,
            };
            let Ok(permit) = permit else {
                return;
            };
            let (session, tx) = (self.session.clone(), self.tx.clone());
            let (frame, span) = *request;
            tokio::spawn(
                async move {
                    if let Some(reply) = session.handle(frame).await {
                        let _ = tx.send(Out::Frame(reply)).await;
                    }
                    drop(permit);
                }
                .instrument(span),
            );
        }
    }

    /// Unregisters the connection and its presence.
    async fn finish(self) {
        unregister(&self.gateway, self.session.device).await;
    }

    /// Takes one inbound frame: refusals, the frame limit, the presence refresh, sends and
    /// acks at once; anything else is returned to be handled beside the reader.
    fn take(&mut self, inbound: Inbound) -> Taken {
        let (session, tx, limit) = (&self.session, &self.tx, &self.limit);
        let frame = match inbound {
            Inbound::Alive => return Taken::Done,
            Inbound::Refused(why) => {
                say(tx, frames::error(0, Code::InvalidArgument, why, false));
                return Taken::Done;
            }
            Inbound::Broken(why) => {
                say(tx, frames::error(0, Code::InvalidArgument, why, true));
                return Taken::End;
            }
            Inbound::Frame(frame) => frame,
        };
        let frame = match pb::ClientFrame::decode(frame) {
            Ok(frame) => frame,
            Err(e) => {
                let why = format!("frame: not a ClientFrame ({e})");
                say(tx, frames::error(0, Code::InvalidArgument, why, false));
                return Taken::Done;
            }
        };
        if let Err(wait) = limit.check() {
            if let Some(pb::client_frame::Body::Send(request)) = &frame.body {
                session.send_throttled(request, wait);
            }
            say(tx, frames::throttled(frame.request_id, limit.per_sec, wait));
            return Taken::Done;
        }
        if self.refreshed.elapsed() >= self.gateway.config.presence_refresh() {
            self.refreshed = Instant::now();
            let (backends, device) = (session.backends.clone(), session.device.clone());
            let groups = session.super_groups().to_vec();
            tokio::spawn(async move { backends.online(device, groups, false).await });
        }
        let span = crate::session::request_span(&frame, session.user());
        // Sends are queued here, in the order read, never on a task of their own: that is
        // what keeps a device's messages in order however many are in flight. Acks take no
        // task either: the push window and the coalesced cursor take them at once.
        match frame {
            pb::ClientFrame {
                request_id,
                body: Some(pb::client_frame::Body::Send(request)),
            } => {
                if let Some(refusal) = session.send(request_id, request, span) {
                    say(tx, refusal);
                }
                Taken::Done
            }
            pb::ClientFrame {
                request_id,
                body: Some(pb::client_frame::Body::Ack(ack)),
            } => {
                tx.ack(ack.sync_seq);
                if let Some(refusal) = session.ack(request_id, ack) {
                    say(tx, refusal);
                }
                Taken::Done
            }
            frame => Taken::Request(Box::new((frame, span))),
        }
    }
}

/// Takes a connection out of the registry and its device out of presence.
async fn unregister(gateway: &Gateway, device: Device) {
    gateway.connections.remove(device.conn_id);
    if let Err(status) = gateway.backends.offline(device).await {
        tracing::warn!(error = %status, "clearing presence failed; it expires with its TTL");
    }
}

/// Registers the authenticated connection within the gateway's and the user's caps,
/// closing the user's oldest session if that is the policy; `None` after telling the
/// client why not.
fn admit(
    gateway: &Gateway,
    tx: &queue::Sender,
    close: &CancellationToken,
    (request_id, user): (u64, i64),
    signals: &Arc<Signals>,
) -> Option<u64> {
    let admission = &gateway.admission;
    if let Err(refused) = admission.check_capacity(gateway.connections.len()) {
        say(tx, frames::refused(request_id, &refused));
        return None;
    }
    let handle = Handle {
        user,
        frames: tx.clone(),
        close: close.clone(),
        signals: signals.clone(),
    };
    let limits = admission.limits();
    let Some(inserted) =
        gateway
            .connections
            .insert(handle, limits.sessions_per_user, limits.session_overflow)
    else {
        say(
            tx,
            frames::refused(request_id, &admission.too_many_sessions()),
        );
        return None;
    };
    if gateway.draining.is_cancelled() {
        // The drain's farewell went out before this connection was registered.
        gateway
            .connections
            .kick(inserted.id, frames::shutting_down());
    }
    if let Some(oldest) = inserted.replaced {
        let reason = admission.replaced();
        let frame = frames::error(0, Code::Aborted, reason, true);
        gateway.connections.kick(oldest, frame);
    }
    Some(inserted.id)
}

/// Re-lists the super groups the user belongs to (they joined or left one) and follows
/// those live, here and in presence.
async fn refollow(session: Session, connections: Arc<crate::connections::Connections>) {
    let groups = match session.backends.super_groups(session.user()).await {
        Ok(groups) => groups,
        Err(status) => {
            tracing::warn!(error = %status, "re-listing super groups failed; the old follows stay");
            return;
        }
    };
    connections.refollow(session.device.conn_id, &groups);
    *session.super_groups.lock() = groups.clone().into();
    if let Err(status) = session
        .backends
        .online(session.device.clone(), groups, false)
        .await
    {
        tracing::warn!(error = %status, "registering new super groups failed; the next refresh retries");
    }
}

/// Queues a frame for the client unless the queue is full (a connection that far behind
/// is closing anyway).
fn say(tx: &queue::Sender, frame: Bytes) {
    let _ = tx.try_send(Out::Frame(frame));
}

/// A connection's token bucket for the frames it sends (`frames_per_sec`, bursts of twice
/// that).
struct FrameLimit {
    per_sec: u32,
    bucket: Option<governor::DefaultDirectRateLimiter>,
}

impl FrameLimit {
    fn new(per_sec: u32) -> Self {
        let bucket = std::num::NonZeroU32::new(per_sec).map(|rate| {
            let burst = rate.saturating_add(per_sec);
            governor::RateLimiter::direct(governor::Quota::per_second(rate).allow_burst(burst))
        });
        Self { per_sec, bucket }
    }

    /// Takes one frame's token, or says how long to wait for one.
    fn check(&self) -> Result<(), std::time::Duration> {
        use governor::clock::{Clock, DefaultClock};
        let Some(bucket) = &self.bucket else {
            return Ok(());
        };
        bucket
            .check()
            .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
    }
}
