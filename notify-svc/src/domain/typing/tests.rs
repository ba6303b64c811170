//! Typing over in-process presence, a recording gateway and fixed group members.

use bytes::Bytes;

use super::*;
use crate::testing::{Recorder, route, router};

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
    let online = [route(1, "ios"), route(2, "ios"), route(3, "ios")];
    let router = router(recorder.clone(), &online).await;
    let typing = Typing::new(router, Arc::new(Groups), encode, 50, interval);
    (typing, recorder)
}

#[tokio::test]
async fn the_peer_or_the_other_members_get_a_live_event() {
    let (typing, recorder) = typing(Duration::from_secs(2)).await;
    assert_eq!(typing.typing(1, "d:1:2").await.unwrap(), Outcome::Sent(1));
    assert_eq!(recorder.take(), vec![(23, 0, Bytes::from("d:1:2/1"))]);
    assert_eq!(typing.typing(3, "g:7").await.unwrap(), Outcome::Sent(2));
    let got: Vec<(u64, i64)> = recorder
        .take()
        .into_iter()
        .map(|(c, s, _)| (c, s))
        .collect();
    assert_eq!(got, vec![(13, 0), (23, 0)]);
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
