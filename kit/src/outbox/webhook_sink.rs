//! [`WebhookSink`]: the app server's after-event webhooks, fed from an outbox.

use async_trait::async_trait;

use super::{OutboxRow, Sink};
use crate::hooks::Hook;

/// The largest body one POST carries: nginx's default `client_max_body_size`. A batch past
/// it goes as several POSTs.
const MAX_BODY_BYTES: usize = 1 << 20;

/// An outbox sink POSTing each batch of events to a webhook as `{"events":[…]}` (each row's
/// payload is one event's JSON object), in bodies of at most [`MAX_BODY_BYTES`] sent one
/// after another. A batch the app server does not take with a 2xx is retried with backoff
/// by the relay, from its first event, so receivers see each event at least once and should
/// dedup on its `event_id`.
pub struct WebhookSink(pub Hook);

/// What `{"events":[` and `]}` add to a body.
const ENVELOPE_BYTES: usize = 13;

#[async_trait]
impl Sink for WebhookSink {
    async fn deliver(&self, rows: &[OutboxRow]) -> anyhow::Result<()> {
        // A comma before every event but the first: counted for each, within the slack.
        let max = MAX_BODY_BYTES - ENVELOPE_BYTES;
        for run in crate::runs::within(rows.iter().collect(), max, |r| r.payload.len() + 1) {
            self.0.post(body(&run)).await?;
        }
        Ok(())
    }
}

fn body(rows: &[&OutboxRow]) -> Vec<u8> {
    let mut body = Vec::with_capacity(
        rows.iter().map(|r| r.payload.len() + 1).sum::<usize>() + ENVELOPE_BYTES,
    );
    body.extend_from_slice(b"{\"events\":[");
    for (i, row) in rows.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(&row.payload);
    }
    body.extend_from_slice(b"]}");
    body
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use axum::{Router, body::Bytes, extract::DefaultBodyLimit, http::StatusCode, routing::post};

    use super::*;
    use crate::{
        config::{HookConfig, Secret},
        hooks::Signing,
    };

    /// An app server behind nginx's default body limit, keeping the event ids it took.
    async fn app_server(taken: Arc<Mutex<Vec<String>>>) -> String {
        let handler = move |body: Bytes| async move {
            if body.len() > MAX_BODY_BYTES {
                return StatusCode::PAYLOAD_TOO_LARGE;
            }
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let ids = body["events"].as_array().unwrap().iter();
            let mut taken = taken.lock().unwrap();
            taken.extend(ids.map(|e| e["event_id"].as_str().unwrap().to_owned()));
            StatusCode::OK
        };
        let app = Router::new()
            .route("/events", post(handler))
            .layer(DefaultBodyLimit::disable());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}/events")
    }

    #[tokio::test]
    async fn a_batch_past_the_body_limit_reaches_the_app_server_in_order_in_several_posts() {
        let taken = Arc::new(Mutex::new(Vec::new()));
        let config = HookConfig {
            url: app_server(taken.clone()).await,
            secret: Secret::new("a secret of sixteen or more"),
            ..HookConfig::default()
        };
        let hook = Hook::new("hooks.events", &config, Signing::Required)
            .unwrap()
            .unwrap();
        // 40 events of 60 KB: 2.4 MB in all, more than twice what one body may carry.
        let rows: Vec<OutboxRow> = (0..40)
            .map(|id| OutboxRow {
                id,
                payload: serde_json::to_vec(&serde_json::json!({
                    "event_id": format!("e{id}"),
                    "text": "x".repeat(60_000),
                }))
                .unwrap(),
            })
            .collect();

        WebhookSink(hook).deliver(&rows).await.unwrap();

        let expected: Vec<String> = (0..40).map(|id| format!("e{id}")).collect();
        assert_eq!(*taken.lock().unwrap(), expected);
    }
}
