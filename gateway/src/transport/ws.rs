//! The WebSocket transport: one protobuf `ClientFrame` / `ServerFrame` per binary message,
//! or, for a client that asks for the `imesh.json` subprotocol (debugging with a plain
//! WebSocket client, the browser demo), one frame per text message in the proto3 JSON
//! mapping. JSON frames are converted at this edge: the rest of the gateway speaks protobuf.

use std::{net::IpAddr, sync::Arc};

use axum::{
    Router,
    extract::{
        ConnectInfo, State,
        ws::{Message, Utf8Bytes, WebSocket, WebSocketUpgrade},
    },
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use bytes::Bytes;
use futures::{SinkExt, StreamExt, future};
use imesh_protos::gateway::{ClientFrame, ServerFrame};
use prost::Message as _;

use crate::{
    Gateway,
    admission::{Refused, Unauthenticated},
    transport::link::{self, Inbound},
    transport::listen::Client,
};

/// The subprotocol of JSON frames.
pub const JSON_PROTOCOL: &str = "imesh.json";

pub fn router(gateway: Arc<Gateway>) -> Router {
    Router::new()
        .route("/ws", get(upgrade))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(gateway)
}

/// The initial write buffer per connection. Client frames are small, so idle connections
/// stay small; a bigger frame grows the buffer as it goes out. (tungstenite's 128 KiB
/// default made every idle connection cost 130 KB.) There is no read buffer: the socket is
/// read through [`crate::transport::spare`], which keeps nothing while a connection idles.
const WRITE_BUFFER: usize = 512;

/// Upgrades a client admission let in (at accept, [`crate::transport::listen`]); a client behind a
/// trusted proxy, or a connection that lost its place (a second upgrade on it), asks
/// admission here, refused with 429 and a `Retry-After`.
async fn upgrade(
    ws: WebSocketUpgrade,
    ConnectInfo(client): ConnectInfo<Client>,
    headers: HeaderMap,
    State(gateway): State<Arc<Gateway>>,
) -> Response {
    let place = match client.take_place() {
        Some(place) => place,
        None => match gateway
            .admission
            .arrive(source(&gateway, &client, &headers))
        {
            Ok(place) => place,
            Err(refused) => return refusal(&refused),
        },
    };
    ws.max_message_size(gateway.config.max_frame_bytes)
        .read_buffer_size(0)
        .write_buffer_size(WRITE_BUFFER)
        .protocols([JSON_PROTOCOL])
        .on_upgrade(move |socket| {
            // A task of its own, sized for the connection: axum's upgrade task would hold
            // the upgrade's states beside it for the connection's life.
            tokio::spawn(serve_socket(socket, gateway, place));
            std::future::ready(())
        })
}

/// The client's address: the first `X-Forwarded-For` address when its peer is a trusted
/// proxy (and the header names one), else the peer's.
fn source(gateway: &Gateway, client: &Client, headers: &HeaderMap) -> IpAddr {
    let peer = client.peer.ip();
    if !gateway.admission.trusts(peer) {
        return peer;
    }
    headers
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').next())
        .and_then(|first| first.trim().parse().ok())
        .unwrap_or(peer)
}

fn refusal(refused: &Refused) -> Response {
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(header::RETRY_AFTER, refused.retry_after_secs().to_string())],
        refused.message.clone(),
    )
        .into_response()
}

/// The connection over an upgraded socket, set up before the future it returns: that
/// holds the connection and nothing else (see [`link::serve`]).
fn serve_socket(
    socket: WebSocket,
    gateway: Arc<Gateway>,
    unauthenticated: Unauthenticated,
) -> impl Future<Output = ()> {
    let json = socket
        .protocol()
        .is_some_and(|p| p.as_bytes() == JSON_PROTOCOL.as_bytes());
    let (sink, stream) = socket.split();
    let writer = sink.with(move |frame: Bytes| {
        future::ready(Ok::<_, axum::Error>(if json {
            Message::Text(server_frame_json(&frame))
        } else {
            Message::Binary(frame)
        }))
    });
    // A read error or a close ends the stream, and with it the connection.
    let reader = stream
        .take_while(|message| {
            future::ready(matches!(message, Ok(m) if !matches!(m, Message::Close(_))))
        })
        .filter_map(move |message| {
            future::ready(match message {
                Ok(Message::Binary(frame)) if !json => Some(Inbound::Frame(frame)),
                Ok(Message::Text(text)) if json => Some(client_frame_from_json(&text)),
                Ok(Message::Binary(_)) => Some(Inbound::Refused(format!(
                    "frame: this connection speaks {JSON_PROTOCOL}; send text frames"
                ))),
                Ok(Message::Text(_)) => Some(Inbound::Refused(
                    "frame: send binary protobuf ClientFrames (or connect with the imesh.json subprotocol)"
                        .into(),
                )),
                Ok(Message::Ping(_) | Message::Pong(_)) => Some(Inbound::Alive),
                Ok(Message::Close(_)) | Err(_) => None,
            })
        });
    link::serve(Box::pin(reader), Box::pin(writer), gateway, unauthenticated)
}

/// A JSON `ClientFrame`, re-encoded as protobuf for the rest of the gateway.
fn client_frame_from_json(text: &str) -> Inbound {
    match serde_json::from_str::<ClientFrame>(text) {
        Ok(frame) => Inbound::Frame(frame.encode_to_vec().into()),
        Err(e) => Inbound::Refused(format!("frame: not a JSON ClientFrame ({e})")),
    }
}

/// An encoded `ServerFrame` (pushes included: their raw events decode as events) in JSON.
fn server_frame_json(frame: &[u8]) -> Utf8Bytes {
    let json = ServerFrame::decode(frame)
        .map_err(anyhow::Error::from)
        .and_then(|frame| Ok(serde_json::to_string(&frame)?));
    match json {
        Ok(json) => json.into(),
        Err(e) => {
            tracing::error!(error = %e, "a server frame could not be written as JSON");
            Utf8Bytes::from_static("{}")
        }
    }
}
