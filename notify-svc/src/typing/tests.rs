//! Typing over in-process presence, a recording gateway and fixed group members.

use parking_lot::Mutex;

use super::*;
use crate::{
    presence::{DeviceRoute, MemoryPresence},
    router::{ConnectionPush, DevicePolicy, Gateways},
};

/// What one connection was pushed: `(conn_id, sync_seqs, events)`.
type Pushed = (u64, Vec<i64>, Vec<Bytes>);

/// Records every push.
#[derive(Default)]
struct Recorder(Mutex<Vec<Pushed>>);

#[async_trait::async_trait]
impl Gateways for Recorder {
    async fn push(&self, _: &str, pushes: Vec<ConnectionPush>) -> anyhow::Result<Vec<u64>> {
        let mut got = self.0.lock();
        for p in pushes {
            let seqs = p.entries.iter().map(|e| e.sync_seq).collect();
            got.push((
                p.conn_id,
                seqs,
                p.entries.into_iter().map(|e| e.event).collect(),
            ));
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

/// Group 7 has members 1, 2 and 3; group 8 has 1 and 50 others; group 9 is a super group.
struct Groups;

#[async_trait::async_trait]
impl GroupMembers for Groups {
    async fn members(&self, group: i64) -> anyhow::Result<Members> {
        Ok(match group {
            7 => Members::List(vec![1, 2, 3]),
            8 => Members::List((1..=51).collect()),
            9 => Members::Unlisted,
            _ => Members::Unknown,
        })
    }
}

fn encode(conversation_id: &str, user: i64) -> Bytes {
    Bytes::from(format!("{conversation_id}/{user}"))
}

async fn typing(interval: Duration) -> (Typing, Arc<Recorder>) {
    let recorder = Arc::new(Recorder::default());
    let router = Arc::new(Router::new(
        Arc::new(MemoryPresence::default()),
        recorder.clone(),
        Duration::from_secs(60),
        DevicePolicy::Unlimited,
    ));
    for user in [1, 2, 3] {
        let route = DeviceRoute {
            user_id: user,
            device_id: "phone".into(),
            platform: "ios".into(),
            gateway_addr: "gw".into(),
            conn_id: user as u64 * 10,
        };
        router.online(route, &[], false).await.unwrap();
    }
    let typing = Typing::new(router, Arc::new(Groups), encode, 50, interval);
    (typing, recorder)
}

#[tokio::test]
async fn the_peer_or_the_other_members_get_a_live_event() {
    let (typing, recorder) = typing(Duration::from_secs(2)).await;
    assert_eq!(typing.typing(1, "d:1:2").await.unwrap(), Outcome::Sent(1));
    assert_eq!(
        recorder.0.lock().drain(..).collect::<Vec<_>>(),
        vec![(20, vec![0], vec![Bytes::from("d:1:2/1")])]
    );
    assert_eq!(typing.typing(3, "g:7").await.unwrap(), Outcome::Sent(2));
    let got: Vec<(u64, Vec<i64>)> = recorder
        .0
        .lock()
        .iter()
        .map(|(c, s, _)| (*c, s.clone()))
        .collect();
    assert_eq!(got, vec![(10, vec![0]), (20, vec![0])]);
}

#[tokio::test]
async fn a_second_notice_within_the_interval_is_throttled_per_conversation() {
    let (typing, _) = typing(Duration::from_secs(60)).await;
    assert_eq!(typing.typing(1, "d:1:2").await.unwrap(), Outcome::Sent(1));
    assert_eq!(typing.typing(1, "d:1:2").await.unwrap(), Outcome::Throttled);
    assert_eq!(typing.typing(2, "d:1:2").await.unwrap(), Outcome::Sent(1));
    assert_eq!(typing.typing(1, "g:7").await.unwrap(), Outcome::Sent(2));
}

#[tokio::test]
async fn outsiders_big_groups_and_bad_ids_are_refused_precisely() {
    let (typing, recorder) = typing(Duration::from_secs(2)).await;
    let refused = |r: Result<Outcome, Error>| match r {
        Err(Error::NotFound(m)) => format!("not found: {m}"),
        Err(Error::Precondition(m)) => format!("precondition: {m}"),
        Err(Error::Invalid { field, .. }) => format!("invalid: {field}"),
        other => panic!("{other:?}"),
    };
    let not_yours = "not found: conversation_id: not one of your conversations";
    assert_eq!(refused(typing.typing(3, "d:1:2").await), not_yours);
    assert_eq!(refused(typing.typing(1, "d:1:1").await), not_yours);
    assert_eq!(refused(typing.typing(4, "g:7").await), not_yours);
    assert_eq!(refused(typing.typing(1, "g:10").await), not_yours);
    let too_large =
        "precondition: typing: only in direct conversations and groups of up to 50 members";
    assert_eq!(refused(typing.typing(1, "g:8").await), too_large);
    assert_eq!(refused(typing.typing(1, "g:9").await), too_large);
    for bad in ["", "x:1", "d:1", "d:a:b", "g:", "g:-1"] {
        assert_eq!(
            refused(typing.typing(1, bad).await),
            "invalid: conversation_id",
            "{bad}"
        );
    }
    assert!(recorder.0.lock().is_empty(), "nothing was pushed");
}
