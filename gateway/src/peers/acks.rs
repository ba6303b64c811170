//! Device acks, coalesced on their way to sync-svc.
//!
//! A client acks cumulatively and often (every push, or once a second). The gateway's own
//! unacked-push window takes each ack at once; recording the device's cursor in sync-svc
//! only needs the highest seq per device, so acks are kept per device and written every
//! [`FLUSH_EVERY`] (or when [`FLUSH_AT`] devices wait) in one `AckBatch` call, instead of one
//! call and one SQL write per ack frame.

use std::{collections::HashMap, sync::Arc, time::Duration};

use imesh_kit::grpc::Channel;
use imesh_kit::identity::{Actor, Caller};
use imesh_protos::sync::{AckBatchRequest, DeviceAck, sync_service_client::SyncServiceClient};
use parking_lot::Mutex;
use tokio::sync::Notify;

/// How often waiting acks are written.
const FLUSH_EVERY: Duration = Duration::from_millis(250);
/// Devices waiting that make a write start at once (sync-svc takes 1,000 a call).
const FLUSH_AT: usize = 1000;

#[derive(Default)]
struct Waiting {
    cursors: Mutex<HashMap<(i64, String), i64>>,
    full: Notify,
}

pub struct Acks {
    waiting: Arc<Waiting>,
}

impl Acks {
    /// Starts the writer on the current runtime; it stops within [`FLUSH_EVERY`] of `self`
    /// being dropped (acks still waiting then are left for the devices' next acks).
    pub fn spawn(client: SyncServiceClient<Channel>, caller: Caller) -> Self {
        let waiting = Arc::new(Waiting::default());
        tokio::spawn(write_acks(Arc::downgrade(&waiting), client, caller));
        Self { waiting }
    }

    /// Records that `device` of `user` has every entry up to `sync_seq`.
    pub fn ack(&self, user: i64, device: &str, sync_seq: i64) {
        let mut cursors = self.waiting.cursors.lock();
        let cursor = cursors.entry((user, device.to_owned())).or_default();
        *cursor = (*cursor).max(sync_seq);
        if cursors.len() >= FLUSH_AT {
            self.waiting.full.notify_one();
        }
    }
}

async fn write_acks(
    waiting: std::sync::Weak<Waiting>,
    mut client: SyncServiceClient<Channel>,
    caller: Caller,
) {
    loop {
        let Some(live) = waiting.upgrade() else {
            return;
        };
        tokio::select! {
            () = live.full.notified() => {}
            () = tokio::time::sleep(FLUSH_EVERY) => {}
        }
        let taken = std::mem::take(&mut *live.cursors.lock());
        drop(live);
        let acks: Vec<DeviceAck> = taken
            .into_iter()
            .map(|((user_id, device), sync_seq)| DeviceAck {
                user_id,
                device_id: device,
                sync_seq,
            })
            .collect();
        for chunk in acks.chunks(FLUSH_AT) {
            let request = caller.request(
                Actor::System,
                AckBatchRequest {
                    acks: chunk.to_vec(),
                },
            );
            // Best effort: a cursor not written now is written with the device's next ack,
            // and the gateway's push window never waits on it.
            if let Err(status) = client.ack_batch(request).await {
                tracing::warn!(error = %status, acks = chunk.len(), "recording device acks failed");
            }
        }
    }
}
