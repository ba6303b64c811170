//! The connections this gateway holds, and the internal `Push` that writes to them.
//!
//! Each connection has a bounded queue of encoded frames. A push that finds the queue full
//! closes the connection (a slow consumer resyncs from its cursor) instead of waiting, so
//! one slow device never delays the others.

use std::{
    collections::HashMap,
    sync::atomic::{AtomicU64, Ordering},
};

use bytes::Bytes;
use imesh_kit::identity;
use imesh_protos::gateway::{self as pb, gateway_service_server::GatewayService};
use parking_lot::RwLock;
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::frames;

/// What the rest of the gateway holds of one connection.
#[derive(Clone)]
pub struct Handle {
    pub frames: mpsc::Sender<Bytes>,
    /// Cancelled to close the connection.
    pub close: CancellationToken,
}

#[derive(Default)]
pub struct Connections {
    next_id: AtomicU64,
    open: RwLock<HashMap<u64, Handle>>,
}

impl Connections {
    /// Registers a connection; returns its id (unique within this gateway process).
    pub fn insert(&self, handle: Handle) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        self.open.write().insert(id, handle);
        id
    }

    pub fn remove(&self, id: u64) {
        self.open.write().remove(&id);
    }

    pub fn len(&self) -> usize {
        self.open.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Closes every connection (shutdown drain).
    pub fn close_all(&self) {
        for handle in self.open.read().values() {
            handle.close.cancel();
        }
    }

    /// Queues `frame` on connection `id`; false when the connection is gone or too slow
    /// (then it is closed).
    pub fn offer(&self, id: u64, frame: Bytes) -> bool {
        let Some(handle) = self.open.read().get(&id).cloned() else {
            return false;
        };
        match handle.frames.try_send(frame) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                tracing::info!(conn_id = id, "send queue full: closing slow connection");
                handle.close.cancel();
                false
            }
            Err(TrySendError::Closed(_)) => false,
        }
    }
}

/// The internal `Push` over a shared registry.
pub struct PushApi(pub std::sync::Arc<Connections>);

#[tonic::async_trait]
impl GatewayService for PushApi {
    async fn push(
        &self,
        request: Request<pb::PushRequest>,
    ) -> Result<Response<pb::PushResponse>, Status> {
        identity::actor(&request)?.require_system()?;
        let mut gone_conn_ids = Vec::new();
        for push in request.into_inner().pushes {
            if !self.0.offer(push.conn_id, frames::push(push.entries)) {
                gone_conn_ids.push(push.conn_id);
            }
        }
        Ok(Response::new(pb::PushResponse { gone_conn_ids }))
    }
}
