//! One client connection's life, whatever carries it: the auth frame in time, presence,
//! the super groups it follows, sends queued in order on [`crate::peers::sends`], other requests
//! handled concurrently up to [`IN_FLIGHT`], pushes and replies through a bounded queue to
//! its [`crate::transport::writer`], and the idle timeout and drain.
//! [`crate::transport::ws`] and [`crate::transport::tcp`] adapt their framing to [`Inbound`] and a frame sink.

use std::sync::Arc;

use bytes::Bytes;
use futures::{Sink, Stream, StreamExt};
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
    connections::Handle,
    session::{self, Session},
    transport::frames,
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
pub async fn serve<R, W>(
    mut reader: R,
    writer: W,
    gateway: Arc<Gateway>,
    unauthenticated: Unauthenticated,
) where
    R: Stream<Item = Inbound> + Unpin,
    W: Sink<Bytes> + Unpin + Send + 'static,
{
    let (tx, rx) = flume::bounded(gateway.config.send_queue);
    let close = CancellationToken::new();
    let window = Window::new(gateway.config.unacked_window, gateway.config.ack_timeout());
    // The writer shares the connection's task: a second task per connection would cost
    // its header and allocation for every idle client.
    let writing = crate::transport::writer::write_frames(writer, rx, window, close.clone());
    let reading = async {
        let authenticated = authenticated(&mut reader, &gateway, &tx).await;
        drop(unauthenticated);
        if let Some((request_id, user, auth)) = authenticated {
            // The token is not needed past the check: the connection keeps only the device.
            let pb::Auth {
                token,
                device_id,
                platform,
            } = auth;
            drop(token);
            let device = (device_id, platform);
            run(reader, &gateway, &tx, &close, request_id, user, device).await;
        }
        close.cancel();
    };
    futures::future::join(writing, reading).await;
}

/// The auth frame, verified; `None` after telling the client why not.
async fn authenticated<R>(
    reader: &mut R,
    gateway: &Gateway,
    tx: &flume::Sender<Out>,
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
            let _ = tx.send_async(Out::Frame(frame)).await;
            None
        }
    }
}

async fn run<R>(
    mut reader: R,
    gateway: &Gateway,
    tx: &flume::Sender<Out>,
    close: &CancellationToken,
    request_id: u64,
    user: i64,
    (device_id, platform): (String, String),
) where
    R: Stream<Item = Inbound> + Unpin,
{
    let regroup = Arc::new(tokio::sync::Notify::new());
    let Some(conn_id) = admit(gateway, tx, close, (request_id, user), &regroup) else {
        return;
    };
    let device = Device {
        user_id: user,
        device_id,
        platform,
        gateway_addr: gateway.advertise.clone(),
        conn_id,
    };
    // The one-off calls are boxed: inline, their futures would size every idle
    // connection's task for the largest of them.
    let super_groups: Arc<[i64]> = match Box::pin(gateway.backends.super_groups(user)).await {
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
        .send_async(Out::Frame(frames::encode(request_id, auth_ok)))
        .await;
    match Box::pin(
        gateway
            .backends
            .online(session.device.clone(), super_groups.to_vec(), true),
    )
    .await
    {
        Ok(()) => read_frames(&mut reader, &session, tx, close, gateway, &regroup).await,
        Err(status) => {
            tracing::warn!(error = %status, "registering presence failed");
            say(
                tx,
                frames::error(
                    0,
                    Code::Unavailable,
                    "presence unavailable; reconnect later",
                    true,
                ),
            );
        }
    }
    gateway.connections.remove(conn_id);
    if let Err(status) = Box::pin(gateway.backends.offline(session.device.clone())).await {
        tracing::warn!(error = %status, "clearing presence failed; it expires with its TTL");
    }
}

async fn read_frames<R>(
    reader: &mut R,
    session: &Session,
    tx: &flume::Sender<Out>,
    close: &CancellationToken,
    gateway: &Gateway,
    regroup: &tokio::sync::Notify,
) where
    R: Stream<Item = Inbound> + Unpin,
{
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT));
    let limit = FrameLimit::new(gateway.config.frames_per_sec);
    let idle = gateway.config.idle_timeout();
    let refresh_every = gateway.config.presence_refresh();
    let mut refreshed = Instant::now();
    loop {
        let inbound = tokio::select! {
            () = close.cancelled() => return,
            () = regroup.notified() => {
                tokio::spawn(refollow(session.clone(), gateway.connections.clone()));
                continue;
            }
            () = gateway.draining.cancelled() => {
                say(tx, frames::error(0, Code::Unavailable, "gateway shutting down; reconnect", true));
                return;
            }
            inbound = tokio::time::timeout(idle, reader.next()) => inbound,
        };
        let frame = match inbound {
            Err(_) => {
                say(
                    tx,
                    frames::error(
                        0,
                        Code::DeadlineExceeded,
                        format!("idle: no frame for {idle:?}"),
                        true,
                    ),
                );
                return;
            }
            Ok(None) => return,
            Ok(Some(Inbound::Alive)) => continue,
            Ok(Some(Inbound::Refused(why))) => {
                say(tx, frames::error(0, Code::InvalidArgument, why, false));
                continue;
            }
            Ok(Some(Inbound::Broken(why))) => {
                say(tx, frames::error(0, Code::InvalidArgument, why, true));
                return;
            }
            Ok(Some(Inbound::Frame(frame))) => frame,
        };
        let frame = match pb::ClientFrame::decode(frame) {
            Ok(frame) => frame,
            Err(e) => {
                say(
                    tx,
                    frames::error(
                        0,
                        Code::InvalidArgument,
                        format!("frame: not a ClientFrame ({e})"),
                        false,
                    ),
                );
                continue;
            }
        };
        if let Err(wait) = limit.check() {
            if let Some(pb::client_frame::Body::Send(request)) = &frame.body {
                session.send_throttled(request, wait);
            }
            say(tx, frames::throttled(frame.request_id, limit.per_sec, wait));
            continue;
        }
        if refreshed.elapsed() >= refresh_every {
            refreshed = Instant::now();
            let (backends, device) = (session.backends.clone(), session.device.clone());
            let groups = session.super_groups().to_vec();
            tokio::spawn(async move { backends.online(device, groups, false).await });
        }
        let span = crate::session::request_span(&frame, session.user());
        // Sends are queued here, in the order read, never on a task of their own: that is
        // what keeps a device's messages in order however many are in flight. Acks take
        // no task either: the push window and the coalesced cursor take them at once.
        let frame = match frame {
            pb::ClientFrame {
                request_id,
                body: Some(pb::client_frame::Body::Send(request)),
            } => {
                if let Some(refusal) = session.send(request_id, request, span) {
                    say(tx, refusal);
                }
                continue;
            }
            pb::ClientFrame {
                request_id,
                body: Some(pb::client_frame::Body::Ack(ack)),
            } => {
                let _ = tx.try_send(Out::Acked(ack.sync_seq));
                if let Some(refusal) = session.ack(request_id, ack) {
                    say(tx, refusal);
                }
                continue;
            }
            frame => frame,
        };
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        let (session, tx) = (session.clone(), tx.clone());
        tokio::spawn(
            async move {
                if let Some(reply) = session.handle(frame).await {
                    let _ = tx.send_async(Out::Frame(reply)).await;
                }
                drop(permit);
            }
            .instrument(span),
        );
    }
}

/// Registers the authenticated connection within the gateway's and the user's caps,
/// closing the user's oldest session if that is the policy; `None` after telling the
/// client why not.
fn admit(
    gateway: &Gateway,
    tx: &flume::Sender<Out>,
    close: &CancellationToken,
    (request_id, user): (u64, i64),
    regroup: &Arc<tokio::sync::Notify>,
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
        regroup: regroup.clone(),
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
fn say(tx: &flume::Sender<Out>, frame: Bytes) {
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
