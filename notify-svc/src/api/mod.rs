//! gRPC handlers of notify-svc: wire types stop here. Every call is internal except
//! QueryPresence and Typing, which users make through the gateway.

use std::sync::Arc;

use imesh_kit::{error, identity};
use imesh_protos::notify::{self as pb, notify_service_server::NotifyService};
use tonic::{Request, Response, Status};

use self::convert::{route_from_proto, status};
use crate::domain::{
    Router,
    ports::Entry,
    typing::{Outcome, Typing},
    watch::Watch,
};

pub mod convert;

pub struct NotifyApi {
    router: Arc<Router>,
    typing: Typing,
    watch: Watch,
}

impl NotifyApi {
    pub fn new(router: Arc<Router>, typing: Typing, watch: Watch) -> Self {
        Self {
            router,
            typing,
            watch,
        }
    }
}

#[tonic::async_trait]
impl NotifyService for NotifyApi {
    async fn online(
        &self,
        request: Request<pb::OnlineRequest>,
    ) -> Result<Response<pb::OnlineResponse>, Status> {
        identity::actor(&request)?.require_system()?;
        let pb::OnlineRequest {
            device,
            super_group_ids,
            fresh,
        } = request.into_inner();
        let device = device.ok_or_else(|| error::invalid("device", "must be set"))?;
        let user = device.user_id;
        self.router
            .online(route_from_proto(device), &super_group_ids, fresh)
            .await
            .map_err(status)?;
        if fresh {
            self.watch.changed(user);
        }
        Ok(Response::new(pb::OnlineResponse {}))
    }

    async fn offline(
        &self,
        request: Request<pb::OfflineRequest>,
    ) -> Result<Response<pb::OfflineResponse>, Status> {
        identity::actor(&request)?.require_system()?;
        let device = request
            .into_inner()
            .device
            .ok_or_else(|| error::invalid("device", "must be set"))?;
        self.router
            .offline(device.user_id, &device.device_id, device.conn_id)
            .await
            .map_err(status)?;
        self.watch.changed(device.user_id);
        Ok(Response::new(pb::OfflineResponse {}))
    }

    async fn deliver(
        &self,
        request: Request<pb::DeliverRequest>,
    ) -> Result<Response<pb::DeliverResponse>, Status> {
        identity::actor(&request)?.require_system()?;
        let deliveries = request
            .into_inner()
            .deliveries
            .into_iter()
            .map(|d| {
                (
                    d.user_id,
                    d.entries
                        .into_iter()
                        .map(|e| Entry {
                            sync_seq: e.sync_seq,
                            event: e.event,
                        })
                        .collect(),
                )
            })
            .collect();
        let devices = self.router.deliver(deliveries).await.map_err(status)?;
        Ok(Response::new(pb::DeliverResponse { devices }))
    }

    async fn deliver_to_groups(
        &self,
        request: Request<pb::DeliverToGroupsRequest>,
    ) -> Result<Response<pb::DeliverResponse>, Status> {
        identity::actor(&request)?.require_system()?;
        let events = request
            .into_inner()
            .events
            .into_iter()
            .map(|e| (e.group_id, e.event))
            .collect();
        let gateways = self
            .router
            .deliver_to_groups(events)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::DeliverResponse { devices: gateways }))
    }

    async fn typing(
        &self,
        request: Request<pb::TypingRequest>,
    ) -> Result<Response<pb::TypingResponse>, Status> {
        let user = identity::actor(&request)?.user()?;
        let pb::TypingRequest { conversation_id } = request.into_inner();
        let outcome = self
            .typing
            .typing(user, &conversation_id)
            .await
            .map_err(status)?;
        Ok(Response::new(match outcome {
            Outcome::Sent(devices) => pb::TypingResponse {
                devices,
                throttled: false,
            },
            Outcome::Throttled => pb::TypingResponse {
                devices: 0,
                throttled: true,
            },
        }))
    }

    async fn disconnect(
        &self,
        request: Request<pb::DisconnectRequest>,
    ) -> Result<Response<pb::DisconnectResponse>, Status> {
        identity::actor(&request)?.require_system()?;
        let pb::DisconnectRequest { user_ids, reason } = request.into_inner();
        let sessions = self
            .router
            .disconnect(&user_ids, &reason)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::DisconnectResponse { sessions }))
    }

    async fn query_presence(
        &self,
        request: Request<pb::QueryPresenceRequest>,
    ) -> Result<Response<pb::QueryPresenceResponse>, Status> {
        // Users ask through the gateway; internal callers directly.
        identity::actor(&request)?;
        let pb::QueryPresenceRequest { user_ids } = request.into_inner();
        let users = self
            .router
            .presence(&user_ids)
            .await
            .map_err(status)?
            .into_iter()
            .map(|(user_id, platforms)| pb::UserPresence {
                user_id,
                online: !platforms.is_empty(),
                platforms,
            })
            .collect();
        Ok(Response::new(pb::QueryPresenceResponse { users }))
    }
}
