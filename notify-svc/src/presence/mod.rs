//! Presence: which devices of a user are connected, and through which gateway, and which
//! gateways hold members of each read-fanout group. Adapters:
//! [`MemoryPresence`] (the embedded default) and [`RedisPresence`]; one contract suite runs
//! against both.

use std::time::Duration;

use async_trait::async_trait;
use imesh_kit::error::StoreError;

mod memory;
mod redis;

pub use self::{memory::MemoryPresence, redis::RedisPresence};

/// Where one connected device can be reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceRoute {
    pub user_id: i64,
    pub device_id: String,
    pub platform: String,
    /// The gateway's internal gRPC address.
    pub gateway_addr: String,
    pub conn_id: u64,
}

#[async_trait]
pub trait Presence: Send + Sync + 'static {
    /// Records (or refreshes) a device's route for `ttl`, replacing an older connection of
    /// the same device.
    async fn online(&self, route: &DeviceRoute, ttl: Duration) -> Result<(), StoreError>;
    /// Forgets the device's route, but only while it still names `conn_id`: a late offline
    /// of an old connection MUST NOT remove the device's newer one.
    async fn offline(&self, user_id: i64, device_id: &str, conn_id: u64) -> Result<(), StoreError>;
    /// Every unexpired route of the given users.
    async fn lookup(&self, users: &[i64]) -> Result<Vec<DeviceRoute>, StoreError>;
    /// Records (or refreshes) for `ttl` that `gateway_addr` holds members of `groups`.
    async fn subscribe(
        &self,
        gateway_addr: &str,
        groups: &[i64],
        ttl: Duration,
    ) -> Result<(), StoreError>;
    /// The gateways with an unexpired subscription to `group`.
    async fn gateways_of(&self, group: i64) -> Result<Vec<String>, StoreError>;
}

#[cfg(test)]
mod tests;
