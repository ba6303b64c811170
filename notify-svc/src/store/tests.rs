//! The Presence contract, run against the in-process adapter and a real Redis.

use std::{sync::Arc, time::Duration};

use imesh_kit::testing;

use super::*;
use crate::domain::ports::{DeviceRoute, Presence};

async fn adapters() -> Vec<(&'static str, Arc<dyn Presence>)> {
    let mut out: Vec<(&'static str, Arc<dyn Presence>)> =
        vec![("memory", Arc::new(MemoryPresence::default()))];
    for (name, pool) in testing::redis_pools().await {
        out.push((name, Arc::new(RedisPresence::new(pool))));
    }
    out
}

fn route(user_id: i64, device: &str, conn_id: u64) -> DeviceRoute {
    DeviceRoute {
        user_id,
        device_id: device.into(),
        platform: "ios".into(),
        gateway_addr: "10.0.0.7:50056".into(),
        conn_id,
    }
}

fn sorted(mut routes: Vec<DeviceRoute>) -> Vec<DeviceRoute> {
    routes.sort_by(|a, b| (a.user_id, &a.device_id).cmp(&(b.user_id, &b.device_id)));
    routes
}

const TTL: Duration = Duration::from_secs(60);

#[tokio::test]
async fn online_devices_are_found_and_a_reconnect_replaces_the_old_route() {
    for (name, presence) in adapters().await {
        let (a, b) = (testing::random_id(), testing::random_id());
        presence.online(&route(a, "phone", 1), TTL).await.unwrap();
        presence.online(&route(a, "laptop", 2), TTL).await.unwrap();
        presence.online(&route(b, "phone", 3), TTL).await.unwrap();
        presence.online(&route(a, "phone", 4), TTL).await.unwrap();
        let mut want = vec![
            route(a, "laptop", 2),
            route(a, "phone", 4),
            route(b, "phone", 3),
        ];
        want = sorted(want);
        assert_eq!(
            sorted(
                presence
                    .lookup(&[a, b, testing::random_id()])
                    .await
                    .unwrap()
            ),
            want,
            "{name}"
        );
    }
}

#[tokio::test]
async fn a_late_offline_of_an_old_connection_keeps_the_new_one() {
    for (name, presence) in adapters().await {
        let a = testing::random_id();
        presence.online(&route(a, "phone", 1), TTL).await.unwrap();
        presence.online(&route(a, "phone", 2), TTL).await.unwrap();
        presence.offline(a, "phone", 1).await.unwrap();
        assert_eq!(
            presence.lookup(&[a]).await.unwrap(),
            vec![route(a, "phone", 2)],
            "{name}"
        );
        presence.offline(a, "phone", 2).await.unwrap();
        assert!(presence.lookup(&[a]).await.unwrap().is_empty(), "{name}");
    }
}

#[tokio::test]
async fn routes_expire_after_their_ttl() {
    for (name, presence) in adapters().await {
        let a = testing::random_id();
        presence
            .online(&route(a, "phone", 1), Duration::from_millis(50))
            .await
            .unwrap();
        presence.online(&route(a, "laptop", 2), TTL).await.unwrap();
        testing::until_async(&format!("{name}: the phone's route expires"), || async {
            presence.lookup(&[a]).await.unwrap() == vec![route(a, "laptop", 2)]
        })
        .await;
    }
}

#[tokio::test]
async fn group_subscriptions_name_each_gateway_once_until_they_expire() {
    for (name, presence) in adapters().await {
        let group = testing::random_id();
        presence
            .subscribe("10.0.0.7:50056", &[group], TTL)
            .await
            .unwrap();
        presence
            .subscribe("10.0.0.7:50056", &[group], TTL)
            .await
            .unwrap();
        presence
            .subscribe("10.0.0.8:50056", &[group], Duration::from_millis(1))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(
            presence.gateways_of(group).await.unwrap(),
            vec!["10.0.0.7:50056".to_owned()],
            "{name}: a refresh is one entry; an expired one is gone"
        );
        assert!(
            presence.gateways_of(group + 1).await.unwrap().is_empty(),
            "{name}"
        );
    }
}
