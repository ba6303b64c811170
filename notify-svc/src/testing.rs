//! What the unit tests share: a gateway fleet that records what it is pushed, and a router
//! over in-process presence with devices online.

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::{
    domain::{
        DevicePolicy, Router,
        ports::{ConnectionPush, DeviceRoute, Gateways},
    },
    store::MemoryPresence,
};

/// Records every pushed entry as `(conn_id, sync_seq, event)`, sorted.
#[derive(Default)]
pub(crate) struct Recorder(pub(crate) Mutex<Vec<(u64, i64, Bytes)>>);

impl Recorder {
    pub(crate) fn take(&self) -> Vec<(u64, i64, Bytes)> {
        self.0.lock().drain(..).collect()
    }
}

#[async_trait::async_trait]
impl Gateways for Recorder {
    async fn push(&self, _: &str, pushes: Vec<ConnectionPush>) -> anyhow::Result<Vec<u64>> {
        let mut got = self.0.lock();
        for p in pushes {
            got.extend(
                p.entries
                    .into_iter()
                    .map(|e| (p.conn_id, e.sync_seq, e.event)),
            );
        }
        got.sort();
        Ok(vec![])
    }

    async fn push_groups(&self, _: &str, _: Vec<(i64, Bytes)>) -> anyhow::Result<()> {
        Ok(())
    }

    async fn kick(&self, _: &str, _: Vec<u64>, _: String) -> anyhow::Result<()> {
        Ok(())
    }
}

/// The route of `user`'s device on `platform`: connection `user * 10 + platform length`.
pub(crate) fn route(user: i64, platform: &str) -> DeviceRoute {
    DeviceRoute {
        user_id: user,
        device_id: format!("{platform}-{user}"),
        platform: platform.into(),
        gateway_addr: "gw".into(),
        conn_id: user as u64 * 10 + platform.len() as u64,
    }
}

/// A router over in-process presence pushing to `recorder`, with `online` connected.
pub(crate) async fn router(recorder: Arc<Recorder>, online: &[DeviceRoute]) -> Arc<Router> {
    let router = Router::new(
        Arc::new(MemoryPresence::default()),
        recorder,
        Duration::from_secs(60),
        DevicePolicy::Unlimited,
    );
    for r in online {
        router.online(r.clone(), &[], false).await.unwrap();
    }
    Arc::new(router)
}
