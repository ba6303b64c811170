//! Presence announcements over in-process presence and a recording gateway.

use bytes::Bytes;

use super::*;
use crate::testing::{Recorder, route, router};

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

#[tokio::test]
async fn online_friends_hear_the_platforms_still_online() {
    let recorder = Arc::new(Recorder::default());
    // Friend 2 and stranger 4 are online; friend 3 is not.
    let online = [
        route(2, "ios"),
        route(4, "ios"),
        route(1, "ios"),
        route(1, "web"),
    ];
    let router = router(recorder.clone(), &online).await;
    let watch = Watch::new(router.clone(), Arc::new(Fixed), encode);
    assert_eq!(watch.announce(1).await.unwrap(), 1);
    assert_eq!(recorder.take(), vec![(23, 0, Bytes::from("1:ios,web"))]);

    for r in &online[2..] {
        router.offline(1, &r.device_id, r.conn_id).await.unwrap();
    }
    assert_eq!(watch.announce(1).await.unwrap(), 1);
    assert_eq!(recorder.take(), vec![(23, 0, Bytes::from("1:"))]);

    assert_eq!(
        watch.announce(4).await.unwrap(),
        0,
        "no friends, nobody told"
    );
}
