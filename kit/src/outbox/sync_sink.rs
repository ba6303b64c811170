//! The sink every service's outbox relays to: rows whose payloads are encoded
//! `imesh.sync.v1.Fanout`s, appended to their recipients' inboxes by sync-svc's `Append`
//! (idempotent per event id, as [`Sink`] requires).

use crate::grpc::{Channel, MAX_CALL_BYTES, runs_within};
use imesh_protos::sync::{AppendRequest, Fanout, sync_service_client::SyncServiceClient};
use prost::Message as _;

use super::{OutboxRow, Sink};
use crate::identity::{Actor, Caller};

pub struct SyncSink {
    client: SyncServiceClient<Channel>,
    caller: Caller,
}

impl SyncSink {
    pub fn new(channel: Channel, caller: Caller) -> Self {
        Self {
            client: SyncServiceClient::new(channel),
            caller,
        }
    }
}

#[async_trait::async_trait]
impl Sink for SyncSink {
    async fn deliver(&self, rows: &[OutboxRow]) -> anyhow::Result<()> {
        let mut events = Vec::with_capacity(rows.len());
        for row in rows {
            match Fanout::decode(row.payload.as_slice()) {
                Ok(event) => events.push(event),
                // Never happens for rows this version wrote; dropping beats blocking forever.
                Err(e) => {
                    tracing::error!(outbox_id = row.id, error = %e, "undecodable outbox row dropped")
                }
            }
        }
        // In calls of at most MAX_CALL_BYTES, one after another (order kept): a batch of
        // long messages to large groups would pass what sync-svc decodes, fail whole, and
        // be retried whole for ever. Append is idempotent, so a retry after a partial
        // failure is safe.
        for events in runs_within(events, MAX_CALL_BYTES) {
            let request = self.caller.request(Actor::System, AppendRequest { events });
            self.client.clone().append(request).await?;
        }
        Ok(())
    }
}
