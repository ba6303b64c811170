//! The WebSocket transport: one protobuf `ClientFrame` / `ServerFrame` per binary message.

use std::{sync::Arc, time::Duration};

use axum::{
    Router,
    extract::{
        State,
        ws::{Message, WebSocket, WebSocketUpgrade},
    },
    response::Response,
    routing::get,
};
use bytes::Bytes;
use futures::{SinkExt, StreamExt, stream::SplitSink};
use imesh_protos::{
    gateway::{self as pb, server_frame::Body},
    notify::Device,
};
use prost::Message as _;
use tokio::{
    sync::{Semaphore, mpsc},
    time::Instant,
};
use tokio_util::sync::CancellationToken;
use tonic::Code;

use crate::{
    Gateway,
    connections::Handle,
    frames,
    session::{self, Session},
};

/// Most frames written in one flush when a burst is queued.
const WRITE_BATCH: usize = 64;
/// Requests of one connection in flight at once; more wait (backpressure on the reader).
const IN_FLIGHT: usize = 32;

pub fn router(gateway: Arc<Gateway>) -> Router {
    Router::new()
        .route("/ws", get(upgrade))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(gateway)
}

async fn upgrade(ws: WebSocketUpgrade, State(gateway): State<Arc<Gateway>>) -> Response {
    ws.max_message_size(gateway.config.max_frame_bytes)
        .on_upgrade(move |socket| serve_socket(socket, gateway))
}

async fn serve_socket(socket: WebSocket, gateway: Arc<Gateway>) {
    let (mut sink, mut stream) = socket.split();
    let first = tokio::time::timeout(gateway.config.auth_timeout(), next_binary(&mut stream)).await;
    let authenticated = match first {
        Ok(Some(frame)) => session::authenticate(&gateway.tokens, &frame),
        Ok(None) => return,
        Err(_) => Err(frames::error(
            0,
            Code::Unauthenticated,
            "auth: no auth frame in time",
            true,
        )),
    };
    let authenticated = match authenticated {
        Ok((request_id, verified, auth)) => gateway
            .backends
            .token_current(verified)
            .await
            .map(|()| (request_id, verified.user_id, auth))
            .map_err(|status| frames::error(request_id, status.code(), status.message(), true)),
        Err(frame) => Err(frame),
    };
    let (request_id, user, auth) = match authenticated {
        Ok(ok) => ok,
        Err(frame) => {
            let _ = sink.send(Message::Binary(frame)).await;
            let _ = sink.close().await;
            return;
        }
    };
    let (tx, rx) = mpsc::channel(gateway.config.send_queue);
    let close = CancellationToken::new();
    let conn_id = gateway.connections.insert(Handle {
        frames: tx.clone(),
        close: close.clone(),
    });
    let device = Device {
        user_id: user,
        device_id: auth.device_id,
        platform: auth.platform,
        gateway_addr: gateway.advertise.clone(),
        conn_id,
    };
    let writer = tokio::spawn(write_frames(sink, rx, close.clone()));
    let super_groups: std::sync::Arc<[i64]> = match gateway.backends.super_groups(user).await {
        Ok(groups) => groups.into(),
        Err(status) => {
            tracing::warn!(error = %status, "listing super groups failed; no live hints for them");
            std::sync::Arc::from([])
        }
    };
    gateway.connections.follow(conn_id, &super_groups);
    let session = Session {
        device: device.clone(),
        super_groups: super_groups.clone(),
        backends: gateway.backends.clone(),
    };
    let auth_ok = Body::AuthOk(pb::AuthOk {
        user_id: user,
        connection_id: conn_id,
    });
    let _ = tx.send(frames::encode(request_id, auth_ok)).await;
    match gateway
        .backends
        .online(device.clone(), super_groups.to_vec())
        .await
    {
        Ok(()) => read_frames(&mut stream, &session, &tx, &close, &gateway).await,
        Err(status) => {
            tracing::warn!(error = %status, "registering presence failed");
            let _ = tx.try_send(frames::error(
                0,
                Code::Unavailable,
                "presence unavailable; reconnect later",
                true,
            ));
        }
    }
    close.cancel();
    gateway.connections.remove(conn_id);
    if let Err(status) = gateway.backends.offline(device).await {
        tracing::warn!(error = %status, "clearing presence failed; it expires with its TTL");
    }
    let _ = writer.await;
}

async fn next_binary(stream: &mut futures::stream::SplitStream<WebSocket>) -> Option<Bytes> {
    loop {
        match stream.next().await? {
            Ok(Message::Binary(frame)) => return Some(frame),
            Ok(Message::Text(_)) => return Some(Bytes::new()),
            Ok(Message::Ping(_) | Message::Pong(_)) => continue,
            Ok(Message::Close(_)) | Err(_) => return None,
        }
    }
}

async fn read_frames(
    stream: &mut futures::stream::SplitStream<WebSocket>,
    session: &Session,
    tx: &mpsc::Sender<Bytes>,
    close: &CancellationToken,
    gateway: &Gateway,
) {
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT));
    let idle = gateway.config.idle_timeout();
    let refresh_every = gateway.config.presence_refresh();
    let mut refreshed = Instant::now();
    loop {
        let message = tokio::select! {
            () = close.cancelled() => return,
            () = gateway.draining.cancelled() => {
                let _ = tx.try_send(frames::error(0, Code::Unavailable, "gateway shutting down; reconnect", true));
                return;
            }
            message = tokio::time::timeout(idle, stream.next()) => message,
        };
        let frame = match message {
            Err(_) => {
                let _ = tx.try_send(frames::error(
                    0,
                    Code::DeadlineExceeded,
                    format!("idle: no frame for {idle:?}"),
                    true,
                ));
                return;
            }
            Ok(None | Some(Err(_)) | Some(Ok(Message::Close(_)))) => return,
            Ok(Some(Ok(Message::Ping(_) | Message::Pong(_)))) => continue,
            Ok(Some(Ok(Message::Text(_)))) => {
                let _ = tx.try_send(frames::error(
                    0,
                    Code::InvalidArgument,
                    "frame: send binary protobuf ClientFrames",
                    false,
                ));
                continue;
            }
            Ok(Some(Ok(Message::Binary(frame)))) => frame,
        };
        let frame = match pb::ClientFrame::decode(frame) {
            Ok(frame) => frame,
            Err(e) => {
                let _ = tx.try_send(frames::error(
                    0,
                    Code::InvalidArgument,
                    format!("frame: not a ClientFrame ({e})"),
                    false,
                ));
                continue;
            }
        };
        if refreshed.elapsed() >= refresh_every {
            refreshed = Instant::now();
            let (backends, device) = (session.backends.clone(), session.device.clone());
            let groups = session.super_groups.to_vec();
            tokio::spawn(async move { backends.online(device, groups).await });
        }
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        let (session, tx) = (session.clone(), tx.clone());
        tokio::spawn(async move {
            if let Some(reply) = session.handle(frame).await {
                let _ = tx.send(reply).await;
            }
            drop(permit);
        });
    }
}

/// Writes queued frames, several per flush when a burst is waiting; after `close`, writes
/// what is still queued (e.g. a final error frame) and closes the socket.
async fn write_frames(
    mut sink: SplitSink<WebSocket, Message>,
    mut rx: mpsc::Receiver<Bytes>,
    close: CancellationToken,
) {
    let closing = loop {
        let frame = tokio::select! {
            frame = rx.recv() => frame,
            () = close.cancelled() => break true,
        };
        let Some(frame) = frame else { break false };
        if sink.feed(Message::Binary(frame)).await.is_err() {
            return;
        }
        for _ in 1..WRITE_BATCH {
            let Ok(frame) = rx.try_recv() else { break };
            if sink.feed(Message::Binary(frame)).await.is_err() {
                return;
            }
        }
        if sink.flush().await.is_err() {
            return;
        }
    };
    if closing {
        while let Ok(frame) = rx.try_recv() {
            if sink.feed(Message::Binary(frame)).await.is_err() {
                return;
            }
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), sink.close()).await;
}
