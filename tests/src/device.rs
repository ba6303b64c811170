//! A device: a real WebSocket or TCP client speaking protobuf frames. The TCP framing is
//! written here by hand from the documented header, not with the gateway's codec.

use std::{collections::VecDeque, net::SocketAddr};

use futures::{SinkExt, StreamExt};
use imesh_protos::{
    gateway::{
        Ack, Auth, AuthOk, ClientFrame, Error, Ping, ServerFrame, client_frame, server_frame::Body,
    },
    message::{
        Content, HistoryRequest, HistoryResponse, RecallRequest, SendRequest, Text, content,
        send_request,
    },
    sync::{InboxEntry, PullRequest, PullResponse, sync_event},
};
use prost::Message as _;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream, tungstenite::Message};

use crate::PATIENCE;

enum Wire {
    Ws(Box<WebSocketStream<MaybeTlsStream<TcpStream>>>),
    Tcp(TcpStream),
}

/// Bytes of the TCP frame header: length, version, flags, command, request seq.
pub const TCP_HEADER: usize = 12;

/// The TCP header of a frame of `len` bytes (version 1, command left 0).
pub fn tcp_header(len: usize, version: u16) -> Vec<u8> {
    let mut header = (len as u32).to_be_bytes().to_vec();
    header.extend(version.to_be_bytes());
    header.extend([0; 6]);
    header
}

pub struct Device {
    wire: Wire,
    next_request: u64,
    /// Frames read while waiting for something else.
    pushes: VecDeque<InboxEntry>,
    unsolicited: VecDeque<ServerFrame>,
}

impl Device {
    pub async fn connect(gateway: SocketAddr) -> Self {
        let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{gateway}/ws"))
            .await
            .expect("websocket connects");
        Self::over(Wire::Ws(Box::new(ws)))
    }

    /// A WebSocket device whose socket takes at most about `bytes` before the kernel stops
    /// the gateway's writes: with nobody reading it, a slow consumer.
    pub async fn connect_with_receive_buffer(gateway: SocketAddr, bytes: u32) -> Self {
        let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
        socket.set_recv_buffer_size(bytes).expect("receive buffer");
        let stream = socket.connect(gateway).await.expect("tcp connects");
        let (ws, _) = tokio_tungstenite::client_async(
            format!("ws://{gateway}/ws"),
            MaybeTlsStream::Plain(stream),
        )
        .await
        .expect("websocket connects");
        Self::over(Wire::Ws(Box::new(ws)))
    }

    /// A device on the gateway's TCP port.
    pub async fn connect_tcp(gateway_tcp: SocketAddr) -> Self {
        let stream = TcpStream::connect(gateway_tcp).await.expect("tcp connects");
        stream.set_nodelay(true).expect("nodelay");
        Self::over(Wire::Tcp(stream))
    }

    fn over(wire: Wire) -> Self {
        Self {
            wire,
            next_request: 0,
            pushes: VecDeque::new(),
            unsolicited: VecDeque::new(),
        }
    }

    /// Sends `bytes` as one frame: a binary message, or a header and the bytes over TCP.
    pub async fn send_raw(&mut self, bytes: Vec<u8>) {
        match &mut self.wire {
            Wire::Ws(ws) => ws
                .send(Message::Binary(bytes.into()))
                .await
                .expect("websocket write"),
            Wire::Tcp(_) => {
                let mut framed = tcp_header(bytes.len(), 1);
                framed.extend(bytes);
                self.write_tcp(&framed).await;
            }
        }
    }

    /// Writes bytes as they are to a TCP connection (split, coalesced or broken frames).
    pub async fn write_tcp(&mut self, bytes: &[u8]) {
        let Wire::Tcp(stream) = &mut self.wire else {
            panic!("not a TCP device");
        };
        stream.write_all(bytes).await.expect("tcp write");
        stream.flush().await.expect("tcp flush");
    }

    pub async fn send_frame(&mut self, body: client_frame::Body) -> u64 {
        self.next_request += 1;
        let frame = ClientFrame {
            request_id: self.next_request,
            body: Some(body),
        };
        self.send_raw(frame.encode_to_vec()).await;
        self.next_request
    }

    /// The next frame from the server; None once the connection is closed.
    pub async fn read(&mut self) -> Option<ServerFrame> {
        let ws = match &mut self.wire {
            Wire::Ws(ws) => ws,
            Wire::Tcp(stream) => {
                return tokio::time::timeout(PATIENCE, read_tcp_frame(stream))
                    .await
                    .expect("a frame in time");
            }
        };
        loop {
            let message = tokio::time::timeout(PATIENCE, ws.next())
                .await
                .expect("a frame in time");
            match message {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return None,
                Some(Ok(Message::Binary(bytes))) => {
                    return Some(ServerFrame::decode(bytes).expect("a ServerFrame"));
                }
                Some(Ok(_)) => continue,
            }
        }
    }

    /// Reads until the reply to `request_id`, keeping pushes and other frames aside; a
    /// fatal error (the connection closing) answers in its place.
    pub async fn reply(&mut self, request_id: u64) -> Body {
        loop {
            let frame = self
                .read()
                .await
                .expect("connection open while waiting for a reply");
            match frame.body {
                Some(body) if frame.request_id == request_id => return body,
                // The connection ends with it: no reply will come.
                Some(Body::Error(e)) if e.fatal => return Body::Error(e),
                Some(Body::Push(push)) => self.pushes.extend(push.entries),
                _ => self.unsolicited.push_back(frame),
            }
        }
    }

    /// Reads until the replies to every one of `request_ids` came (in any order); returns
    /// them in the order asked, keeping pushes and other frames aside.
    pub async fn replies(&mut self, request_ids: &[u64]) -> Vec<Body> {
        let mut got = std::collections::HashMap::new();
        while got.len() < request_ids.len() {
            let frame = self
                .read()
                .await
                .expect("connection open while waiting for replies");
            match frame.body {
                Some(body) if request_ids.contains(&frame.request_id) => {
                    got.insert(frame.request_id, body);
                }
                Some(Body::Push(push)) => self.pushes.extend(push.entries),
                _ => self.unsolicited.push_back(frame),
            }
        }
        request_ids
            .iter()
            .map(|id| got.remove(id).expect("each reply"))
            .collect()
    }

    /// Sends every request keeping `window` of them in flight (each new one as soon as a
    /// reply frees a place); returns the replies in the order of `sends`.
    pub async fn pipeline(&mut self, sends: Vec<SendRequest>, window: usize) -> Vec<Body> {
        let mut ids = Vec::with_capacity(sends.len());
        let mut got = std::collections::HashMap::new();
        let mut waiting = sends.into_iter();
        let mut open = 0;
        loop {
            while open < window {
                let Some(send) = waiting.next() else { break };
                ids.push(self.send_frame(client_frame::Body::Send(send)).await);
                open += 1;
            }
            if open == 0 {
                break;
            }
            let frame = self
                .read()
                .await
                .expect("connection open while waiting for replies");
            match frame.body {
                Some(body) if ids.contains(&frame.request_id) => {
                    assert!(
                        got.insert(frame.request_id, body).is_none(),
                        "two replies to request {}",
                        frame.request_id
                    );
                    open -= 1;
                }
                Some(Body::Push(push)) => self.pushes.extend(push.entries),
                _ => self.unsolicited.push_back(frame),
            }
        }
        ids.iter()
            .map(|id| got.remove(id).expect("each reply"))
            .collect()
    }

    /// Authenticates as `device_id`, on a platform of its own (so one user's devices never
    /// replace each other under the one-per-platform policy).
    pub async fn auth(&mut self, token: &str, device_id: &str) -> Result<AuthOk, Error> {
        self.auth_on(token, device_id, &format!("test-{device_id}"))
            .await
    }

    pub async fn auth_on(
        &mut self,
        token: &str,
        device_id: &str,
        platform: &str,
    ) -> Result<AuthOk, Error> {
        let auth = Auth {
            token: token.into(),
            device_id: device_id.into(),
            platform: platform.into(),
        };
        let id = self.send_frame(client_frame::Body::Auth(auth)).await;
        match self.reply(id).await {
            Body::AuthOk(ok) => Ok(ok),
            Body::Error(e) => Err(e),
            other => panic!("unexpected reply to auth: {other:?}"),
        }
    }

    /// Sends a text message; the reply is a `SendAck` or an `Error`.
    pub async fn send_text(&mut self, to: i64, client_msg_id: &str, text: &str) -> Body {
        self.send_text_to(send_request::To::UserId(to), client_msg_id, text)
            .await
    }

    /// Sends a text message to a group; the reply is a `SendAck` or an `Error`.
    pub async fn send_group_text(&mut self, group: i64, client_msg_id: &str, text: &str) -> Body {
        self.send_text_to(send_request::To::GroupId(group), client_msg_id, text)
            .await
    }

    async fn send_text_to(
        &mut self,
        to: send_request::To,
        client_msg_id: &str,
        text: &str,
    ) -> Body {
        self.send(SendRequest {
            client_msg_id: client_msg_id.into(),
            to: Some(to),
            content: Some(Content {
                kind: Some(content::Kind::Text(Text { text: text.into() })),
            }),
            ..SendRequest::default()
        })
        .await
    }

    /// Sends any message; the reply is a `SendAck` or an `Error`.
    pub async fn send(&mut self, request: SendRequest) -> Body {
        let id = self.send_frame(client_frame::Body::Send(request)).await;
        self.reply(id).await
    }

    pub async fn pull(&mut self, after_sync_seq: i64) -> PullResponse {
        let id = self
            .send_frame(client_frame::Body::Pull(PullRequest {
                after_sync_seq,
                limit: 0,
            }))
            .await;
        match self.reply(id).await {
            Body::Pull(response) => response,
            other => panic!("unexpected reply to pull: {other:?}"),
        }
    }

    /// A page of a conversation's history before `before_seq` (0: the latest).
    pub async fn history(&mut self, conversation_id: &str, before_seq: i64) -> HistoryResponse {
        self.history_page(HistoryRequest {
            conversation_id: conversation_id.into(),
            before_seq,
            ..HistoryRequest::default()
        })
        .await
    }

    /// Any page of a conversation's history (e.g. catching up with `after_seq`).
    pub async fn history_page(&mut self, request: HistoryRequest) -> HistoryResponse {
        let id = self.send_frame(client_frame::Body::History(request)).await;
        match self.reply(id).await {
            Body::History(response) => response,
            other => panic!("unexpected reply to history: {other:?}"),
        }
    }

    /// Waits until the conversation shows the timeline notice `code` (group changes leave
    /// one through the outbox relay, after the change's ack); returns the notice's seq.
    pub async fn notice_seq(&mut self, conversation_id: &str, code: &str) -> i64 {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let page = self.history(conversation_id, 0).await;
            let found = page.messages.iter().find(|m| {
                matches!(m.content.as_ref().and_then(|c| c.kind.as_ref()),
                    Some(content::Kind::Notice(n)) if n.code == code)
            });
            if let Some(notice) = found {
                return notice.seq;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no {code} notice in {conversation_id}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// Recalls message `seq` of a conversation; the reply is a `Recall` or an `Error`.
    pub async fn recall(&mut self, conversation_id: &str, seq: i64) -> Body {
        let request = RecallRequest {
            conversation_id: conversation_id.into(),
            seq,
        };
        let id = self.send_frame(client_frame::Body::Recall(request)).await;
        self.reply(id).await
    }

    /// Pulls after `after_sync_seq` until at least `count` entries are there (inbox appends
    /// trail the send ack: the outbox relay hands them over), failing after the patience.
    pub async fn pull_at_least(&mut self, after_sync_seq: i64, count: usize) -> PullResponse {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let page = self.pull(after_sync_seq).await;
            if page.entries.len() >= count {
                return page;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{count} entries after {after_sync_seq} never arrived: {page:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    pub async fn ack(&mut self, sync_seq: i64) {
        self.send_frame(client_frame::Body::Ack(Ack { sync_seq }))
            .await;
    }

    pub async fn ping(&mut self) -> Body {
        let id = self.send_frame(client_frame::Body::Ping(Ping {})).await;
        self.reply(id).await
    }

    /// The next pushed inbox entry.
    pub async fn next_push(&mut self) -> InboxEntry {
        loop {
            if let Some(entry) = self.pushes.pop_front() {
                return entry;
            }
            let frame = self
                .read()
                .await
                .expect("connection open while waiting for a push");
            match frame.body {
                Some(Body::Push(push)) => self.pushes.extend(push.entries),
                _ => self.unsolicited.push_back(frame),
            }
        }
    }

    /// The next pushed event `pick` chooses, skipping the others.
    pub async fn pushed<T>(&mut self, pick: impl Fn(sync_event::Kind) -> Option<T>) -> T {
        loop {
            if let Some(found) = self
                .next_push()
                .await
                .event
                .and_then(|e| e.kind)
                .and_then(&pick)
            {
                return found;
            }
        }
    }

    /// The next pushed inbox entry if one comes within `wait` (WebSocket devices: a TCP
    /// read cut short would lose its partial frame).
    pub async fn push_within(&mut self, wait: std::time::Duration) -> Option<InboxEntry> {
        assert!(
            matches!(self.wire, Wire::Ws(_)),
            "push_within is for WebSocket devices"
        );
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(entry) = self.pushes.pop_front() {
                return Some(entry);
            }
            let frame = tokio::time::timeout_at(deadline, self.read()).await.ok()?;
            match frame.expect("connection open while waiting for a push") {
                ServerFrame {
                    body: Some(Body::Push(push)),
                    ..
                } => self.pushes.extend(push.entries),
                other => self.unsolicited.push_back(other),
            }
        }
    }

    /// Pushed entries read so far but not taken by [`Device::next_push`].
    pub fn take_pushes(&mut self) -> Vec<InboxEntry> {
        self.pushes.drain(..).collect()
    }

    /// Frames other than replies and pushes seen so far (e.g. unsolicited errors).
    pub fn take_unsolicited(&mut self) -> Vec<ServerFrame> {
        self.unsolicited.drain(..).collect()
    }

    /// The fatal error frame that ends the connection (after any pushes still in flight),
    /// checking that the connection closes after it.
    pub async fn closing_error(&mut self) -> Error {
        loop {
            let frame = self.read().await.expect("an error frame before the close");
            match frame.body {
                Some(Body::Error(e)) => {
                    assert!(e.fatal, "{e:?}");
                    assert!(self.read().await.is_none(), "closed after {e:?}");
                    return e;
                }
                Some(Body::Push(_)) => continue,
                other => panic!("unexpected frame: {other:?}"),
            }
        }
    }

    pub async fn close(mut self) {
        match &mut self.wire {
            Wire::Ws(ws) => {
                let _ = ws.as_mut().close(None).await;
            }
            Wire::Tcp(stream) => {
                let _ = stream.shutdown().await;
            }
        }
    }
}

/// One frame off a TCP stream, checking its header; None at EOF.
async fn read_tcp_frame(stream: &mut TcpStream) -> Option<ServerFrame> {
    let mut header = [0u8; TCP_HEADER];
    stream.read_exact(&mut header).await.ok()?;
    let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
    assert_eq!(
        u16::from_be_bytes([header[4], header[5]]),
        1,
        "header version"
    );
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).await.ok()?;
    let frame = ServerFrame::decode(body.as_slice()).expect("a ServerFrame");
    let command = u16::from_be_bytes([header[8], header[9]]);
    let expected = match &frame.body {
        Some(body) => body_field(body),
        None => 0,
    };
    assert_eq!(command, expected, "the header's command names the body");
    assert_eq!(
        u16::from_be_bytes([header[10], header[11]]),
        frame.request_id as u16,
        "the header's request seq"
    );
    Some(frame)
}

/// The field number of a server frame's body.
fn body_field(body: &Body) -> u16 {
    match body {
        Body::AuthOk(_) => 2,
        Body::SendAck(_) => 3,
        Body::Pull(_) => 4,
        Body::Push(_) => 5,
        Body::Error(_) => 6,
        Body::Pong(_) => 7,
        Body::History(_) => 8,
        Body::Recall(_) => 9,
        Body::MarkRead(_) => 10,
        Body::Conversations(_) => 11,
        Body::ConversationSettings(_) => 12,
        Body::ReceiptCounts(_) => 13,
        Body::ReceiptReaders(_) => 14,
        Body::Presence(_) => 15,
        Body::PushSettings(_) => 16,
        Body::Typing(_) => 17,
        Body::Relation(_) => 18,
        Body::Group(_) => 19,
        Body::Edit(_) => 20,
        Body::Pins(_) => 21,
        Body::Hidden(_) => 22,
        Body::Reactions(_) => 23,
        Body::Reactors(_) => 24,
        Body::Removed(_) => 25,
        Body::Search(_) => 26,
        Body::Upload(_) => 27,
        Body::Download(_) => 28,
    }
}
