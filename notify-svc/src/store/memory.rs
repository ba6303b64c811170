//! In-process presence for the embedded default.

use std::{collections::HashMap, time::Duration};

use async_trait::async_trait;
use imesh_kit::error::StoreError;
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::domain::ports::{DeviceRoute, Presence};

/// A user's devices with their expiry, one entry per device id. A list, not a map: users
/// have a device or two, and an idle connection should cost as little as it can.
type Devices = Vec<(DeviceRoute, Instant)>;

#[derive(Default)]
pub struct MemoryPresence {
    users: Mutex<HashMap<i64, Devices>>,
    /// group → gateway address → expiry.
    groups: Mutex<HashMap<i64, HashMap<String, Instant>>>,
}

#[async_trait]
impl Presence for MemoryPresence {
    async fn online(&self, route: &DeviceRoute, ttl: Duration) -> Result<(), StoreError> {
        let expires = Instant::now() + ttl;
        let mut users = self.users.lock();
        let devices = users
            .entry(route.user_id)
            .or_insert_with(|| Vec::with_capacity(1));
        match devices
            .iter_mut()
            .find(|(r, _)| r.device_id == route.device_id)
        {
            Some(entry) => *entry = (route.clone(), expires),
            None => devices.push((route.clone(), expires)),
        }
        Ok(())
    }

    async fn offline(&self, user_id: i64, device_id: &str, conn_id: u64) -> Result<(), StoreError> {
        let mut users = self.users.lock();
        if let Some(devices) = users.get_mut(&user_id) {
            devices.retain(|(r, _)| r.device_id != device_id || r.conn_id != conn_id);
            if devices.is_empty() {
                users.remove(&user_id);
            }
        }
        Ok(())
    }

    async fn lookup(&self, users: &[i64]) -> Result<Vec<DeviceRoute>, StoreError> {
        let now = Instant::now();
        let map = self.users.lock();
        Ok(users
            .iter()
            .filter_map(|u| map.get(u))
            .flatten()
            .filter(|(_, expires)| *expires > now)
            .map(|(route, _)| route.clone())
            .collect())
    }

    async fn subscribe(
        &self,
        gateway_addr: &str,
        groups: &[i64],
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let expires = Instant::now() + ttl;
        let mut map = self.groups.lock();
        for group in groups {
            let gateways = map.entry(*group).or_default();
            gateways.retain(|_, until| *until > Instant::now());
            gateways.insert(gateway_addr.to_owned(), expires);
        }
        Ok(())
    }

    async fn gateways_of(&self, group: i64) -> Result<Vec<String>, StoreError> {
        let now = Instant::now();
        let map = self.groups.lock();
        let mut gateways: Vec<String> = map
            .get(&group)
            .into_iter()
            .flatten()
            .filter(|(_, until)| **until > now)
            .map(|(addr, _)| addr.clone())
            .collect();
        gateways.sort();
        Ok(gateways)
    }
}
