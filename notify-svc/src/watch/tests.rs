//! Presence announcements over in-process presence and a recording gateway.

use std::time::Duration;

use parking_lot::Mutex;

use super::*;
use crate::{
    presence::{DeviceRoute, MemoryPresence},
    router::{ConnectionPush, DevicePolicy, Gateways},
};

/// Records `(conn_id, event)` of every pushed entry.
#[derive(Default)]
struct Recorder(Mutex<Vec<(u64, Bytes)>>);

#[async_trait::async_trait]
impl Gateways for Recorder {
    async fn push(&self, _: &str, pushes: Vec<ConnectionPush>) -> anyhow::Result<Vec<u64>> {
        let mut got = self.0.lock();
        for p in pushes {
            got.extend(p.entries.into_iter().map(|e| (p.conn_id, e.event)));
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

/// User 1's friends are 2 and 3; nobody else has any.
struct Fixed;

#[async_trait::async_trait]
impl Friends for Fixed {
    async fn friends(&self, user: i64, _: usize) -> anyhow::Result<Vec<i64>> {
        Ok(if user == 1 { vec![2, 3] } else { vec![] })
    }
}

fn encode(user: i64, platforms: &[String]) -> Bytes {
    Bytes::from(format!("{user}:{}", platforms.join(",")))
}

fn route(user: i64, platform: &str) -> DeviceRoute {
    DeviceRoute {
        user_id: user,
        device_id: format!("{platform}-{user}"),
        platform: platform.into(),
        gateway_addr: "gw".into(),
        conn_id: user as u64 * 10 + platform.len() as u64,
    }
}

#[tokio::test]
async fn online_friends_hear_the_platforms_still_online() {
    let recorder = Arc::new(Recorder::default());
    let router = Arc::new(Router::new(
        Arc::new(MemoryPresence::default()),
        recorder.clone(),
        Duration::from_secs(60),
        DevicePolicy::Unlimited,
    ));
    // Friend 2 and stranger 4 are online; friend 3 is not.
    for r in [
        route(2, "ios"),
        route(4, "ios"),
        route(1, "ios"),
        route(1, "web"),
    ] {
        router.online(r, &[], false).await.unwrap();
    }
    let watch = Watch::new(router.clone(), Arc::new(Fixed), encode);
    assert_eq!(watch.announce(1).await.unwrap(), 1);
    assert_eq!(
        recorder.0.lock().drain(..).collect::<Vec<_>>(),
        vec![(23, Bytes::from("1:ios,web"))]
    );

    for r in [route(1, "ios"), route(1, "web")] {
        router.offline(1, &r.device_id, r.conn_id).await.unwrap();
    }
    assert_eq!(watch.announce(1).await.unwrap(), 1);
    assert_eq!(
        recorder.0.lock().drain(..).collect::<Vec<_>>(),
        vec![(23, Bytes::from("1:"))]
    );

    assert_eq!(
        watch.announce(4).await.unwrap(),
        0,
        "no friends, nobody told"
    );
}
