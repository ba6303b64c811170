//! The WebSocket transport: one protobuf `ClientFrame` / `ServerFrame` per binary message.

use std::sync::Arc;

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
use futures::{SinkExt, StreamExt, future};

use crate::{
    Gateway,
    link::{self, Inbound},
};

pub fn router(gateway: Arc<Gateway>) -> Router {
    Router::new()
        .route("/ws", get(upgrade))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(gateway)
}

/// Initial read and write buffers per connection. Client frames are small, so idle
/// connections stay small; a bigger frame grows the buffer as it arrives. (tungstenite's
/// 128 KiB default made every idle connection cost 130 KB.)
const SOCKET_BUFFER: usize = 2048;

async fn upgrade(ws: WebSocketUpgrade, State(gateway): State<Arc<Gateway>>) -> Response {
    ws.max_message_size(gateway.config.max_frame_bytes)
        .read_buffer_size(SOCKET_BUFFER)
        .write_buffer_size(SOCKET_BUFFER)
        .on_upgrade(move |socket| serve_socket(socket, gateway))
}

async fn serve_socket(socket: WebSocket, gateway: Arc<Gateway>) {
    let (sink, stream) = socket.split();
    let writer =
        sink.with(|frame: Bytes| future::ready(Ok::<_, axum::Error>(Message::Binary(frame))));
    // A read error or a close ends the stream, and with it the connection.
    let reader = stream
        .take_while(|message| {
            future::ready(matches!(message, Ok(m) if !matches!(m, Message::Close(_))))
        })
        .filter_map(|message| {
            future::ready(match message {
                Ok(Message::Binary(frame)) => Some(Inbound::Frame(frame)),
                Ok(Message::Text(_)) => {
                    Some(Inbound::Refused("frame: send binary protobuf ClientFrames"))
                }
                Ok(Message::Ping(_) | Message::Pong(_)) => Some(Inbound::Alive),
                Ok(Message::Close(_)) | Err(_) => None,
            })
        });
    link::serve(Box::pin(reader), Box::pin(writer), gateway).await;
}
