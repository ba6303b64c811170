//! Routing over in-process presence and a recording gateway fleet.

use parking_lot::Mutex;

use super::*;
use crate::presence::MemoryPresence;

#[derive(Default)]
struct Fleet {
    pushes: Mutex<Vec<(String, u64, Vec<i64>)>>,
    gone: Vec<u64>,
}

#[async_trait::async_trait]
impl Gateways for Fleet {
    async fn push(&self, addr: &str, pushes: Vec<ConnectionPush>) -> anyhow::Result<Vec<u64>> {
        let mut got = self.pushes.lock();
        for p in pushes {
            got.push((
                addr.to_owned(),
                p.conn_id,
                p.entries.iter().map(|e| e.sync_seq).collect(),
            ));
        }
        got.sort();
        Ok(self.gone.clone())
    }
}

fn route(user_id: i64, device: &str, gateway: &str, conn_id: u64) -> DeviceRoute {
    DeviceRoute {
        user_id,
        device_id: device.into(),
        platform: "web".into(),
        gateway_addr: gateway.into(),
        conn_id,
    }
}

fn entries(seqs: &[i64]) -> Vec<Entry> {
    seqs.iter()
        .map(|s| Entry {
            sync_seq: *s,
            event: Bytes::from_static(b"e"),
        })
        .collect()
}

#[tokio::test]
async fn entries_reach_every_online_device_grouped_by_gateway() {
    let fleet = Arc::new(Fleet::default());
    let router = Router::new(
        Arc::new(MemoryPresence::default()),
        fleet.clone(),
        Duration::from_secs(60),
    );
    router.online(route(1, "phone", "gw-a", 10)).await.unwrap();
    router.online(route(1, "laptop", "gw-b", 11)).await.unwrap();
    router.online(route(2, "phone", "gw-a", 12)).await.unwrap();
    let reached = router
        .deliver(vec![
            (1, entries(&[5, 6])),
            (2, entries(&[9])),
            (3, entries(&[1])),
        ])
        .await
        .unwrap();
    assert_eq!(reached, 3, "user 3 is offline");
    assert_eq!(
        *fleet.pushes.lock(),
        vec![
            ("gw-a".into(), 10, vec![5, 6]),
            ("gw-a".into(), 12, vec![9]),
            ("gw-b".into(), 11, vec![5, 6])
        ]
    );
}

#[tokio::test]
async fn connections_a_gateway_no_longer_holds_leave_presence() {
    let presence = Arc::new(MemoryPresence::default());
    let fleet = Arc::new(Fleet {
        gone: vec![10],
        ..Fleet::default()
    });
    let router = Router::new(presence.clone(), fleet, Duration::from_secs(60));
    router.online(route(1, "phone", "gw-a", 10)).await.unwrap();
    router.deliver(vec![(1, entries(&[1]))]).await.unwrap();
    assert!(presence.lookup(&[1]).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_route_without_device_or_gateway_is_refused() {
    let router = Router::new(
        Arc::new(MemoryPresence::default()),
        Arc::new(Fleet::default()),
        Duration::from_secs(60),
    );
    assert!(matches!(
        router.online(route(1, "", "gw", 1)).await,
        Err(Error::Invalid {
            field: "device",
            ..
        })
    ));
    assert!(matches!(
        router.online(route(0, "p", "gw", 1)).await,
        Err(Error::Invalid {
            field: "device.user_id",
            ..
        })
    ));
}
