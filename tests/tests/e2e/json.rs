//! The gateway's JSON subprotocol with a plain WebSocket client: `imesh.json` frames in the
//! proto3 JSON mapping authenticate, send, and receive pushes with their events decoded;
//! a frame that is not JSON, or binary on a JSON connection, gets an error frame and the
//! connection keeps serving.

use futures::{SinkExt, StreamExt};
use imesh_tests::{PATIENCE, Stores, TestCluster};
use serde_json::{Value, json};
use tokio_tungstenite::{
    MaybeTlsStream, WebSocketStream,
    tungstenite::{Message, client::IntoClientRequest},
};

type Socket = WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>;

async fn json_socket(env: &TestCluster) -> Socket {
    let mut request = format!("ws://{}/ws", env.cluster.addrs.gateway)
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("sec-websocket-protocol", "imesh.json".parse().unwrap());
    let (ws, response) = tokio_tungstenite::connect_async(request).await.unwrap();
    assert_eq!(response.headers()["sec-websocket-protocol"], "imesh.json");
    ws
}

async fn say(ws: &mut Socket, frame: Value) {
    ws.send(Message::Text(frame.to_string().into()))
        .await
        .unwrap();
}

/// The next frame, which must be a JSON text message.
/// The next error frame; the push of the device's own send may come before it.
async fn heard_error(ws: &mut Socket) -> Value {
    loop {
        let frame = heard(ws).await;
        if frame.get("error").is_some() {
            return frame;
        }
        assert!(
            frame.get("push").is_some(),
            "neither error nor push: {frame}"
        );
    }
}

async fn heard(ws: &mut Socket) -> Value {
    loop {
        let message = tokio::time::timeout(PATIENCE, ws.next())
            .await
            .expect("a frame in time")
            .expect("open")
            .unwrap();
        match message {
            Message::Text(text) => return serde_json::from_str(&text).expect("JSON"),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("not a JSON frame: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_plain_websocket_client_speaks_json_frames() {
    let env = TestCluster::start(Stores::Embedded).await;
    let (ann, ann_token) = env.user("ann").await;
    let (ben, _) = env.user("ben").await;
    let mut ws = json_socket(&env).await;

    say(
        &mut ws,
        json!({"requestId": "1", "auth": {"token": ann_token, "deviceId": "web-1", "platform": "web"}}),
    )
    .await;
    let ok = heard(&mut ws).await;
    assert_eq!(ok["requestId"], "1");
    assert_eq!(ok["authOk"]["userId"], ann.to_string(), "{ok}");

    let sent = env.send_text(ben, ann, "b1", "hello json").await;
    let push = heard(&mut ws).await;
    let entry = &push["push"]["entries"][0];
    assert_eq!(
        entry["event"]["message"]["content"]["text"]["text"], "hello json",
        "{push}"
    );
    assert_eq!(entry["event"]["message"]["seq"], sent.seq.to_string());
    assert!(entry["syncSeq"].as_str().is_some(), "{push}");

    say(
        &mut ws,
        json!({"requestId": "2", "send": {"clientMsgId": "a1", "userId": ben.to_string(),
               "content": {"text": {"text": "hi back"}}}}),
    )
    .await;
    let ack = loop {
        let frame = heard(&mut ws).await;
        if frame["requestId"] == "2" {
            break frame;
        }
    };
    assert_eq!(ack["sendAck"]["seq"], "2", "{ack}");

    say(&mut ws, json!("not a frame")).await;
    let e = heard_error(&mut ws).await;
    assert_eq!(
        (e["error"]["code"].as_u64(), e["error"]["field"].as_str()),
        (Some(3), Some("frame"))
    );
    ws.send(Message::Binary(vec![8, 1].into())).await.unwrap();
    let e = heard_error(&mut ws).await;
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("imesh.json"),
        "{e}"
    );

    say(&mut ws, json!({"requestId": "3", "ping": {}})).await;
    let pong = loop {
        let frame = heard(&mut ws).await;
        if frame["requestId"] == "3" {
            break frame;
        }
    };
    assert!(pong.get("pong").is_some(), "{pong}");
}
