//! Routing over in-process presence and a recording gateway fleet.

use parking_lot::Mutex;

use super::*;
use crate::store::MemoryPresence;

#[derive(Default)]
struct Fleet {
    pushes: Mutex<Vec<(String, u64, Vec<i64>)>>,
    gone: Vec<u64>,
    group_pushes: Mutex<Vec<(String, Vec<i64>)>>,
    kicks: Mutex<Vec<(String, Vec<u64>, String)>>,
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

    async fn push_groups(&self, addr: &str, events: Vec<(i64, Bytes)>) -> anyhow::Result<()> {
        let mut got = self.group_pushes.lock();
        got.push((addr.to_owned(), events.iter().map(|(g, _)| *g).collect()));
        got.sort();
        Ok(())
    }

    async fn kick(&self, addr: &str, conn_ids: Vec<u64>, reason: String) -> anyhow::Result<()> {
        let mut got = self.kicks.lock();
        got.push((addr.to_owned(), conn_ids, reason));
        got.sort();
        Ok(())
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
        DevicePolicy::OnePerPlatform,
    );
    router
        .online(route(1, "phone", "gw-a", 10), &[], false)
        .await
        .unwrap();
    router
        .online(route(1, "laptop", "gw-b", 11), &[], false)
        .await
        .unwrap();
    router
        .online(route(2, "phone", "gw-a", 12), &[], false)
        .await
        .unwrap();
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
    let router = Router::new(
        presence.clone(),
        fleet,
        Duration::from_secs(60),
        DevicePolicy::OnePerPlatform,
    );
    router
        .online(route(1, "phone", "gw-a", 10), &[], false)
        .await
        .unwrap();
    router.deliver(vec![(1, entries(&[1]))]).await.unwrap();
    assert!(presence.lookup(&[1]).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_route_without_device_or_gateway_is_refused() {
    let router = Router::new(
        Arc::new(MemoryPresence::default()),
        Arc::new(Fleet::default()),
        Duration::from_secs(60),
        DevicePolicy::OnePerPlatform,
    );
    assert!(matches!(
        router.online(route(1, "", "gw", 1), &[], false).await,
        Err(Error::Invalid {
            field: "device",
            ..
        })
    ));
    assert!(matches!(
        router.online(route(0, "p", "gw", 1), &[], false).await,
        Err(Error::Invalid {
            field: "device.user_id",
            ..
        })
    ));
}

#[tokio::test]
async fn group_events_reach_each_subscribed_gateway_once_and_no_other() {
    let fleet = Arc::new(Fleet::default());
    let router = Router::new(
        Arc::new(MemoryPresence::default()),
        fleet.clone(),
        Duration::from_secs(60),
        DevicePolicy::OnePerPlatform,
    );
    router
        .online(route(1, "phone", "gw-a", 10), &[70, 71], false)
        .await
        .unwrap();
    router
        .online(route(2, "phone", "gw-a", 11), &[70], false)
        .await
        .unwrap();
    router
        .online(route(3, "phone", "gw-b", 12), &[71], false)
        .await
        .unwrap();
    router
        .online(route(4, "phone", "gw-c", 13), &[], false)
        .await
        .unwrap();
    let event = || Bytes::from_static(b"advanced");
    let reached = router
        .deliver_to_groups(vec![(70, event()), (71, event()), (72, event())])
        .await
        .unwrap();
    assert_eq!(reached, 2);
    assert_eq!(
        *fleet.group_pushes.lock(),
        vec![("gw-a".into(), vec![70, 71]), ("gw-b".into(), vec![71])],
        "one call per gateway, gw-c holds no member"
    );
    let refused = router.deliver_to_groups(vec![(0, event())]).await;
    assert!(matches!(
        refused,
        Err(Error::Invalid {
            field: "events.group_id",
            ..
        })
    ));
    let bad = router
        .online(route(5, "phone", "gw-a", 14), &[0], false)
        .await;
    assert!(matches!(
        bad,
        Err(Error::Invalid {
            field: "super_group_ids",
            ..
        })
    ));
}

#[tokio::test]
async fn presence_lists_each_user_once_in_order_with_their_platforms() {
    let router = Router::new(
        Arc::new(MemoryPresence::default()),
        Arc::new(Fleet::default()),
        Duration::from_secs(60),
        DevicePolicy::OnePerPlatform,
    );
    let ios = DeviceRoute {
        platform: "ios".into(),
        ..route(1, "phone", "gw-a", 10)
    };
    for device in [
        ios,
        route(1, "laptop", "gw-b", 11),
        route(1, "tab", "gw-b", 12),
    ] {
        router.online(device, &[], false).await.unwrap();
    }
    router
        .online(route(2, "phone", "gw-a", 13), &[], false)
        .await
        .unwrap();
    router.offline(2, "phone", 13).await.unwrap();
    let got = router.presence(&[3, 1, 2, 1]).await.unwrap();
    assert_eq!(
        got,
        vec![
            (3, vec![]),
            (1, vec!["ios".to_owned(), "web".to_owned()]),
            (2, vec![]),
        ]
    );
    for bad in [vec![], vec![0], vec![1; MAX_PRESENCE_USERS + 1]] {
        let err = router.presence(&bad).await.unwrap_err();
        assert!(
            matches!(
                err,
                Error::Invalid {
                    field: "user_ids",
                    ..
                }
            ),
            "{err:?}"
        );
    }
}

#[tokio::test]
async fn a_fresh_session_closes_the_ones_it_replaces_under_the_policy() {
    let on = |platform: &str, route: DeviceRoute| DeviceRoute {
        platform: platform.into(),
        ..route
    };
    for (policy, expected) in [
        (
            DevicePolicy::OnePerPlatform,
            vec![
                (
                    "gw-a".to_owned(),
                    vec![10],
                    "session: this device connected again".to_owned(),
                ),
                (
                    "gw-b".to_owned(),
                    vec![11],
                    "session: signed in on another ios device".to_owned(),
                ),
            ],
        ),
        (
            DevicePolicy::Unlimited,
            vec![(
                "gw-a".to_owned(),
                vec![10],
                "session: this device connected again".to_owned(),
            )],
        ),
    ] {
        let fleet = Arc::new(Fleet::default());
        let presence = Arc::new(MemoryPresence::default());
        let router = Router::new(
            presence.clone(),
            fleet.clone(),
            Duration::from_secs(60),
            policy,
        );
        for device in [
            on("ios", route(1, "phone", "gw-a", 10)),
            on("ios", route(1, "old-phone", "gw-b", 11)),
            on("macos", route(1, "laptop", "gw-b", 12)),
            on("ios", route(2, "phone", "gw-a", 13)),
        ] {
            router.online(device, &[], false).await.unwrap();
        }
        // The phone reconnects through gw-c; a refresh of the new connection kicks nobody.
        let again = on("ios", route(1, "phone", "gw-c", 20));
        router.online(again.clone(), &[], true).await.unwrap();
        router.online(again, &[], false).await.unwrap();
        assert_eq!(*fleet.kicks.lock(), expected, "{policy:?}");
        let mut left: Vec<u64> = presence
            .lookup(&[1, 2])
            .await
            .unwrap()
            .iter()
            .map(|r| r.conn_id)
            .collect();
        left.sort();
        let kept = if policy == DevicePolicy::Unlimited {
            vec![11, 12, 13, 20]
        } else {
            vec![12, 13, 20]
        };
        assert_eq!(left, kept, "{policy:?}: replaced routes are gone");
    }
}

#[tokio::test]
async fn disconnecting_users_closes_all_their_sessions_on_every_gateway() {
    let fleet = Arc::new(Fleet::default());
    let presence = Arc::new(MemoryPresence::default());
    let router = Router::new(
        presence.clone(),
        fleet.clone(),
        Duration::from_secs(60),
        DevicePolicy::Unlimited,
    );
    for device in [
        route(1, "phone", "gw-a", 10),
        route(1, "laptop", "gw-b", 11),
        route(2, "phone", "gw-a", 12),
    ] {
        router.online(device, &[], false).await.unwrap();
    }
    assert_eq!(router.disconnect(&[1], "session: gone").await.unwrap(), 2);
    assert_eq!(
        *fleet.kicks.lock(),
        vec![
            ("gw-a".to_owned(), vec![10], "session: gone".to_owned()),
            ("gw-b".to_owned(), vec![11], "session: gone".to_owned()),
        ]
    );
    let left = presence.lookup(&[1, 2]).await.unwrap();
    assert_eq!(left.iter().map(|r| r.conn_id).collect::<Vec<_>>(), vec![12]);
    assert!(matches!(
        router.disconnect(&[], "x").await,
        Err(Error::Invalid {
            field: "user_ids",
            ..
        })
    ));
}

#[tokio::test]
async fn sessions_replaced_for_different_reasons_on_one_gateway_hear_each_their_own() {
    let fleet = Arc::new(Fleet::default());
    let router = Router::new(
        Arc::new(MemoryPresence::default()),
        fleet.clone(),
        Duration::from_secs(60),
        DevicePolicy::OnePerPlatform,
    );
    for device in [
        route(1, "phone", "gw-a", 10),
        route(1, "old-phone", "gw-a", 11),
    ] {
        router.online(device, &[], false).await.unwrap();
    }
    router
        .online(route(1, "phone", "gw-b", 20), &[], true)
        .await
        .unwrap();
    assert_eq!(
        *fleet.kicks.lock(),
        vec![
            (
                "gw-a".to_owned(),
                vec![10],
                "session: this device connected again".to_owned()
            ),
            (
                "gw-a".to_owned(),
                vec![11],
                "session: signed in on another web device".to_owned()
            ),
        ]
    );
}
