//! gRPC handlers of sync-svc: wire types stop here.

use std::sync::Arc;

use imesh_kit::{error, identity};
use imesh_protos::sync::{self as pb, sync_service_server::SyncService};
use prost::Message as _;
use tonic::{Request, Response, Status};

use crate::domain::{Entry, Error, Inboxes, IncomingEvent};

pub struct SyncApi {
    inboxes: Arc<Inboxes>,
}

impl SyncApi {
    pub fn new(inboxes: Arc<Inboxes>) -> Self {
        Self { inboxes }
    }
}

#[tonic::async_trait]
impl SyncService for SyncApi {
    async fn append(
        &self,
        request: Request<pb::AppendRequest>,
    ) -> Result<Response<pb::AppendResponse>, Status> {
        identity::actor(&request)?.require_system()?;
        let events = request
            .into_inner()
            .events
            .into_iter()
            .map(event_from_proto)
            .collect::<Result<_, _>>()?;
        let outcome = self.inboxes.append(events).await.map_err(status)?;
        Ok(Response::new(pb::AppendResponse {
            appended: outcome.appended,
            duplicates: outcome.duplicates,
        }))
    }

    async fn pull(
        &self,
        request: Request<pb::PullRequest>,
    ) -> Result<Response<pb::PullResponse>, Status> {
        let user = identity::actor(&request)?.user()?;
        let pb::PullRequest {
            after_sync_seq,
            limit,
        } = request.into_inner();
        let (entries, has_more) = self
            .inboxes
            .pull(user, after_sync_seq, limit)
            .await
            .map_err(status)?;
        let entries = entries
            .into_iter()
            .map(entry_to_proto)
            .collect::<Result<_, _>>()?;
        Ok(Response::new(pb::PullResponse { entries, has_more }))
    }

    async fn ack(
        &self,
        request: Request<pb::AckRequest>,
    ) -> Result<Response<pb::AckResponse>, Status> {
        let user = identity::actor(&request)?.user()?;
        let pb::AckRequest {
            device_id,
            sync_seq,
        } = request.into_inner();
        let acked = self
            .inboxes
            .ack(user, &device_id, sync_seq)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::AckResponse {
            acked_sync_seq: acked,
        }))
    }
}

fn event_from_proto(fanout: pb::Fanout) -> Result<IncomingEvent, Status> {
    let pb::Fanout {
        event_id,
        recipient_ids,
        event,
    } = fanout;
    let event = event
        .filter(|e| e.kind.is_some())
        .ok_or_else(|| error::invalid("events.event", "must be set"))?;
    Ok(IncomingEvent {
        event_id,
        recipients: recipient_ids,
        payload: event.encode_to_vec().into(),
    })
}

fn entry_to_proto(entry: Entry) -> Result<pb::InboxEntry, Status> {
    let event = pb::SyncEvent::decode(entry.payload).map_err(|e| error::internal(&e))?;
    Ok(pb::InboxEntry {
        sync_seq: entry.sync_seq,
        event: Some(event),
    })
}

/// The one place sync-svc errors become gRPC statuses.
fn status(err: Error) -> Status {
    match err {
        Error::Invalid { field, reason } => error::invalid(field, reason),
        Error::Store(imesh_kit::error::StoreError::Conflict(_)) => {
            Status::aborted("a concurrent append of the same event won; retry")
        }
        Error::Store(imesh_kit::error::StoreError::Unavailable(ref e)) => {
            error::unavailable(e.as_ref())
        }
        Error::Store(ref e) => error::internal(e),
    }
}
