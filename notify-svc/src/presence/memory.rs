//! In-process presence for the embedded default.

use std::{collections::HashMap, time::Duration};

use async_trait::async_trait;
use imesh_kit::error::StoreError;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::{DeviceRoute, Presence};

/// A user's devices: device id → (route, expiry).
type Devices = HashMap<String, (DeviceRoute, Instant)>;

#[derive(Default)]
pub struct MemoryPresence {
    users: Mutex<HashMap<i64, Devices>>,
}

#[async_trait]
impl Presence for MemoryPresence {
    async fn online(&self, route: &DeviceRoute, ttl: Duration) -> Result<(), StoreError> {
        let expires = Instant::now() + ttl;
        self.users
            .lock()
            .entry(route.user_id)
            .or_default()
            .insert(route.device_id.clone(), (route.clone(), expires));
        Ok(())
    }

    async fn offline(&self, user_id: i64, device_id: &str, conn_id: u64) -> Result<(), StoreError> {
        let mut users = self.users.lock();
        if let Some(devices) = users.get_mut(&user_id) {
            if devices
                .get(device_id)
                .is_some_and(|(r, _)| r.conn_id == conn_id)
            {
                devices.remove(device_id);
            }
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
            .flat_map(|devices| devices.values())
            .filter(|(_, expires)| *expires > now)
            .map(|(route, _)| route.clone())
            .collect())
    }
}
