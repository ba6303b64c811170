//! [`WebhookSink`]: the app server's after-event webhooks, fed from an outbox.

use async_trait::async_trait;

use super::{OutboxRow, Sink};
use crate::hooks::Hook;

/// An outbox sink POSTing each batch of events to a webhook as `{"events":[…]}` (each row's
/// payload is one event's JSON object). A batch the app server does not take with a 2xx is
/// retried with backoff by the relay, so receivers see each event at least once and should
/// dedup on its `event_id`.
pub struct WebhookSink(pub Hook);

#[async_trait]
impl Sink for WebhookSink {
    async fn deliver(&self, rows: &[OutboxRow]) -> anyhow::Result<()> {
        let mut body =
            Vec::with_capacity(rows.iter().map(|r| r.payload.len() + 1).sum::<usize>() + 12);
        body.extend_from_slice(b"{\"events\":[");
        for (i, row) in rows.iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            body.extend_from_slice(&row.payload);
        }
        body.extend_from_slice(b"]}");
        self.0.post(body).await?;
        Ok(())
    }
}
