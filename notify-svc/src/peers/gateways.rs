//! [`Gateways`] over gRPC: one lazily connected channel per gateway address.

use std::collections::HashMap;

use bytes::Bytes;
use imesh_kit::grpc::{Channel, MAX_CALL_BYTES, Peers, runs_within};
use imesh_kit::identity::{Actor, Caller};
use imesh_protos::{
    gateway::{self as pb, gateway_service_client::GatewayServiceClient},
    notify::GroupEvent,
    sync::RawEntry,
};
use parking_lot::Mutex;

use crate::domain::ports::{ConnectionPush, Gateways};

pub struct GrpcGateways {
    caller: Caller,
    peers: Peers,
    clients: Mutex<HashMap<String, GatewayServiceClient<Channel>>>,
}

impl GrpcGateways {
    pub fn new(caller: Caller, peers: Peers) -> Self {
        Self {
            caller,
            peers,
            clients: Mutex::new(HashMap::new()),
        }
    }

    fn client(&self, addr: &str) -> anyhow::Result<GatewayServiceClient<Channel>> {
        let mut clients = self.clients.lock();
        if let Some(client) = clients.get(addr) {
            return Ok(client.clone());
        }
        let client = GatewayServiceClient::new(self.peers.channel(addr)?);
        clients.insert(addr.to_owned(), client.clone());
        Ok(client)
    }
}

#[async_trait::async_trait]
impl Gateways for GrpcGateways {
    /// One call per [`MAX_CALL_BYTES`], one after another: a big group's batch would
    /// pass the limit the gateway decodes, and a connection's entries split across calls
    /// keep their order.
    async fn push(&self, addr: &str, pushes: Vec<ConnectionPush>) -> anyhow::Result<Vec<u64>> {
        let pushes: Vec<pb::ConnectionPush> = pushes
            .into_iter()
            .flat_map(|p| {
                let conn_id = p.conn_id;
                let entries = p.entries.into_iter().map(|e| RawEntry {
                    sync_seq: e.sync_seq,
                    event: e.event,
                });
                runs_within(entries.collect(), MAX_CALL_BYTES)
                    .into_iter()
                    .map(move |entries| pb::ConnectionPush { conn_id, entries })
            })
            .collect();
        let mut gone = Vec::new();
        for pushes in runs_within(pushes, MAX_CALL_BYTES) {
            let request = self.caller.request(
                Actor::System,
                pb::PushRequest {
                    pushes,
                    group_events: vec![],
                },
            );
            let response = self.client(addr)?.push(request).await?;
            gone.extend(response.into_inner().gone_conn_ids);
        }
        Ok(gone)
    }

    async fn push_groups(&self, addr: &str, events: Vec<(i64, Bytes)>) -> anyhow::Result<()> {
        let group_events = events
            .into_iter()
            .map(|(group_id, event)| GroupEvent { group_id, event })
            .collect();
        let request = self.caller.request(
            Actor::System,
            pb::PushRequest {
                pushes: vec![],
                group_events,
            },
        );
        self.client(addr)?.push(request).await?;
        Ok(())
    }

    async fn kick(&self, addr: &str, conn_ids: Vec<u64>, reason: String) -> anyhow::Result<()> {
        let request = self
            .caller
            .request(Actor::System, pb::KickRequest { conn_ids, reason });
        self.client(addr)?.kick(request).await?;
        Ok(())
    }
}
