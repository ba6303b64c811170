//! notify-svc's wire mapping: device routes from their protos, and errors to statuses.

use imesh_kit::error;
use imesh_protos::notify as pb;
use tonic::Status;

use crate::domain::{Error, ports::DeviceRoute};

pub(crate) fn route_from_proto(device: pb::Device) -> DeviceRoute {
    let pb::Device {
        user_id,
        device_id,
        platform,
        gateway_addr,
        conn_id,
    } = device;
    DeviceRoute {
        user_id,
        device_id,
        platform,
        gateway_addr,
        conn_id,
    }
}

/// The one place notify-svc errors become gRPC statuses.
pub(crate) fn status(err: Error) -> Status {
    match err {
        Error::Invalid { field, reason } => error::invalid(field, reason),
        Error::Store(imesh_kit::error::StoreError::Unavailable(ref e)) => {
            error::unavailable(e.as_ref())
        }
        Error::Store(ref e) => error::internal(e),
        Error::NotFound(message) => Status::not_found(message),
        Error::Precondition(message) => Status::failed_precondition(message),
        Error::Peer(ref e) => {
            tracing::error!(error = %format!("{e:#}"), "a peer service call failed");
            Status::unavailable("a service notify-svc depends on is unavailable; retry later")
        }
    }
}
