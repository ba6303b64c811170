//! Read receipts: exact counts as members join, quit and are kicked; replayed and
//! out-of-order reads; who read; coalesced count events; bitmaps rebuilt after a loss.

use imesh_protos::sync as pb;
use prost::Message as _;

use super::*;
use imesh_kit::identity::Actor;

use crate::store::memory::MemoryBits;

struct Rig {
    /// A group conversation of its own, so rigs sharing a Redis never meet.
    conv: String,
    inboxes: Inboxes,
    members: Arc<Members>,
    db: sea_orm::DatabaseConnection,
}

/// Receipt bits in process, and in every test Redis.
async fn all_bits() -> Vec<Arc<dyn ReceiptBits>> {
    let mut out: Vec<Arc<dyn ReceiptBits>> = vec![Arc::new(MemoryBits::default())];
    for (_, pool) in testing::redis_pools().await {
        let ttl = std::time::Duration::from_secs(60);
        out.push(Arc::new(crate::store::redis::RedisBits::new(pool, ttl)));
    }
    out
}

async fn rig() -> Rig {
    rig_on(Arc::new(MemoryBits::default())).await
}

async fn rig_on(bits: Arc<dyn ReceiptBits>) -> Rig {
    let config = testing::fresh_sql(testing::Backend::Sqlite).await.unwrap();
    let db = imesh_kit::sql::connect_and_migrate::<Migrator>(&config)
        .await
        .unwrap();
    let members = Arc::new(Members::default());
    let (inboxes, _) = build(db.clone(), members.clone(), bits);
    Rig {
        conv: format!("g:{}", testing::random_id()),
        inboxes,
        members,
        db,
    }
}

impl Rig {
    /// Message `seq` of group 7 from `sender` to users 1–5, asking for receipts with `bound`
    /// (0: not asking).
    fn asking(&self, seq: i64, sender: i64, bound: u32) -> IncomingEvent {
        IncomingEvent {
            event_id: format!("m:{}:{seq}", self.conv),
            recipients: (1..=5).collect(),
            payload: Bytes::from(format!("{}#{seq}", self.conv)),
            read_fanout_group: None,
            mark: Some(Mark {
                conversation_id: self.conv.clone(),
                seq,
                change: Change::Message {
                    sender,
                    time_ms: seq,
                    mentioned: vec![],
                    mention_all: false,
                    receipt_bound: bound,
                },
            }),
        }
    }

    async fn read(&self, user: i64, seq: i64) {
        let marks = vec![ReadMark {
            conversation_id: self.conv.clone(),
            read_seq: seq,
        }];
        self.inboxes.mark_read(user, marks).await.unwrap();
    }

    async fn counts(&self, seqs: &[i64]) -> Vec<(i64, u32, u32)> {
        let counts = self
            .inboxes
            .receipt_counts(Actor::User(1), &self.conv, seqs)
            .await
            .unwrap();
        counts.iter().map(|c| (c.seq, c.read, c.total)).collect()
    }

    async fn readers(&self, asker: i64, seq: i64, unread: bool) -> Result<Vec<i64>, Error> {
        let page = self
            .inboxes
            .receipt_readers(Actor::User(asker), &self.conv, seq, unread, 0, 0);
        Ok(page.await?.0)
    }

    fn join(&self, user: i64, map_id: u32) {
        self.members.0.lock().push(MapMember {
            user,
            map_id,
            manages: false,
        });
    }

    fn leave(&self, user: i64) {
        self.members.0.lock().retain(|m| m.user != user);
    }

    /// The ReceiptCount events in `user`'s inbox as `(seq, read, total)`.
    async fn count_events(&self, user: i64) -> Vec<(i64, u32, u32)> {
        let (entries, _) = self.inboxes.pull(user, 0, 500).await.unwrap();
        entries
            .iter()
            .filter_map(
                |e| match pb::SyncEvent::decode(e.payload.clone()).ok()?.kind? {
                    pb::sync_event::Kind::Receipt(c) => Some((c.seq, c.read, c.total)),
                    _ => None,
                },
            )
            .collect()
    }
}

#[tokio::test]
async fn counts_are_exact_as_members_join_quit_and_are_kicked_around_the_message() {
    let rig = rig().await;
    rig.inboxes.append(vec![rig.asking(1, 1, 5)]).await.unwrap();
    assert_eq!(
        rig.counts(&[1]).await,
        vec![(1, 0, 4)],
        "the sender never counts"
    );
    rig.join(6, 5);
    rig.read(6, 1).await;
    rig.read(1, 1).await;
    assert_eq!(
        rig.counts(&[1]).await,
        vec![(1, 0, 4)],
        "a later joiner and the sender"
    );
    rig.read(3, 1).await;
    rig.read(4, 1).await;
    assert_eq!(rig.counts(&[1]).await, vec![(1, 2, 4)]);
    rig.leave(4);
    assert_eq!(rig.counts(&[1]).await, vec![(1, 1, 3)], "a reader who quit");
    rig.leave(5);
    assert_eq!(
        rig.counts(&[1]).await,
        vec![(1, 1, 2)],
        "a kicked member who never read"
    );
    // Back with a new map id: the message was sent before this membership.
    rig.join(4, 6);
    assert_eq!(rig.counts(&[1]).await, vec![(1, 1, 2)]);
    assert_eq!(rig.readers(1, 1, false).await.unwrap(), vec![3]);
    assert_eq!(rig.readers(1, 1, true).await.unwrap(), vec![2]);
}

#[tokio::test]
async fn a_watermark_marks_exactly_the_receipt_messages_it_passes_once_in_any_order() {
    let rig = rig().await;
    // Messages 1 and 3 ask for nothing (bound 0).
    let events = vec![
        rig.asking(1, 1, 0),
        rig.asking(2, 1, 5),
        rig.asking(3, 1, 0),
        rig.asking(4, 1, 5),
        rig.asking(5, 1, 5),
    ];
    rig.inboxes.append(events).await.unwrap();
    rig.read(3, 3).await;
    assert_eq!(
        rig.counts(&[1, 2, 3, 4, 5]).await,
        vec![(2, 1, 4), (4, 0, 4), (5, 0, 4)],
        "only receipt messages are counted, and only those at or below the watermark"
    );
    // Sending raises the sender's watermark: a reply reads what it follows.
    rig.inboxes.append(vec![rig.asking(6, 4, 0)]).await.unwrap();
    assert_eq!(
        rig.counts(&[2, 4, 5]).await,
        vec![(2, 2, 4), (4, 1, 4), (5, 1, 4)]
    );
    for seq in [5, 1, 5, 4] {
        rig.read(3, seq).await;
    }
    assert_eq!(
        rig.counts(&[2, 4, 5]).await,
        vec![(2, 2, 4), (4, 2, 4), (5, 2, 4)],
        "replays and older marks count nobody twice"
    );
}

#[tokio::test]
async fn senders_hear_one_coalesced_count_per_message_per_window() {
    let rig = rig().await;
    rig.inboxes
        .append(vec![rig.asking(1, 1, 5), rig.asking(2, 2, 5)])
        .await
        .unwrap();
    for user in [2, 3, 4] {
        rig.read(user, 2).await;
    }
    assert_eq!(rig.inboxes.flush_receipts().await.unwrap(), 2);
    assert_eq!(
        rig.count_events(1).await,
        vec![(1, 3, 4)],
        "three reads, one event"
    );
    assert_eq!(rig.count_events(2).await, vec![(2, 2, 4)]);
    assert_eq!(
        rig.inboxes.flush_receipts().await.unwrap(),
        0,
        "nothing moved"
    );
    rig.read(3, 2).await;
    assert_eq!(
        rig.inboxes.flush_receipts().await.unwrap(),
        0,
        "a replay moves nothing"
    );
    rig.read(5, 1).await;
    rig.inboxes.flush_receipts().await.unwrap();
    assert_eq!(rig.count_events(1).await, vec![(1, 3, 4), (1, 4, 4)]);
}

#[tokio::test]
async fn only_the_sender_and_admins_see_who_read_and_bad_asks_are_refused_by_field() {
    let rig = rig().await;
    rig.inboxes.append(vec![rig.asking(1, 2, 5)]).await.unwrap();
    rig.read(4, 1).await;
    assert_eq!(
        rig.readers(2, 1, false).await.unwrap(),
        vec![4],
        "the sender"
    );
    assert_eq!(
        rig.readers(1, 1, true).await.unwrap(),
        vec![1, 3, 5],
        "the owner"
    );
    assert!(matches!(
        rig.readers(3, 1, false).await,
        Err(Error::Forbidden(_))
    ));
    assert!(matches!(
        rig.readers(9, 1, false).await,
        Err(Error::NoConversation)
    ));
    assert!(matches!(
        rig.readers(2, 7, false).await,
        Err(Error::NoReceipt(7))
    ));
    let stranger = rig
        .inboxes
        .receipt_counts(Actor::User(9), &rig.conv, &[1])
        .await;
    assert!(matches!(stranger, Err(Error::NoConversation)));
    let direct = rig
        .inboxes
        .receipt_counts(Actor::User(1), "d:1:2", &[1])
        .await;
    assert!(matches!(
        direct,
        Err(Error::Invalid {
            field: "conversation_id",
            ..
        })
    ));
    let none = rig
        .inboxes
        .receipt_counts(Actor::User(1), &rig.conv, &[])
        .await;
    assert!(matches!(none, Err(Error::Invalid { field: "seqs", .. })));

    // Pages of one, by join order.
    let mut cursor = 0;
    let mut unread = Vec::new();
    loop {
        let (page, next) = rig
            .inboxes
            .receipt_readers(Actor::User(2), &rig.conv, 1, true, cursor, 1)
            .await
            .unwrap();
        unread.extend(page);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    assert_eq!(unread, vec![1, 3, 5]);
}

#[tokio::test]
async fn lost_bitmaps_are_rebuilt_from_the_watermarks() {
    let rig = rig().await;
    rig.inboxes
        .append(vec![
            rig.asking(1, 1, 5),
            rig.asking(2, 1, 5),
            rig.asking(3, 2, 5),
        ])
        .await
        .unwrap();
    rig.read(2, 2).await;
    rig.read(3, 3).await;
    rig.read(5, 1).await;
    let before = rig.counts(&[1, 2, 3]).await;
    assert_eq!(before, vec![(1, 3, 4), (2, 2, 4), (3, 1, 4)]);

    // The same store with every bitmap gone, as after a Redis flush.
    let (fresh, _) = build(
        rig.db.clone(),
        rig.members.clone(),
        Arc::new(MemoryBits::default()),
    );
    // A read lands on the empty arena before anyone counts.
    fresh
        .mark_read(
            4,
            vec![ReadMark {
                conversation_id: rig.conv.clone(),
                read_seq: 3,
            }],
        )
        .await
        .unwrap();
    let counts = fresh
        .receipt_counts(Actor::User(1), &rig.conv, &[1, 2, 3])
        .await
        .unwrap();
    let counts: Vec<_> = counts.iter().map(|c| (c.seq, c.read, c.total)).collect();
    assert_eq!(counts, vec![(1, 4, 4), (2, 3, 4), (3, 2, 4)]);
}

#[tokio::test]
async fn concurrent_readers_each_count_once_on_every_bits_adapter() {
    for bits in all_bits().await {
        let rig = rig_on(bits).await;
        rig.members.0.lock().extend((6..=40).map(|user| MapMember {
            user,
            map_id: user as u32 - 1,
            manages: false,
        }));
        rig.inboxes
            .append(vec![rig.asking(1, 1, 40)])
            .await
            .unwrap();
        let readers = (2..=40).map(|user| rig.read(user, 1));
        futures::future::join_all(readers).await;
        assert_eq!(rig.counts(&[1]).await, vec![(1, 39, 39)]);
        assert_eq!(rig.inboxes.flush_receipts().await.unwrap(), 1);
        assert_eq!(rig.count_events(1).await, vec![(1, 39, 39)]);
    }
}

#[tokio::test]
async fn a_flushed_redis_arena_is_rebuilt_from_the_watermarks() {
    for (_, pool) in testing::redis_pools().await {
        let ttl = std::time::Duration::from_secs(60);
        let rig = rig_on(Arc::new(crate::store::redis::RedisBits::new(
            pool.clone(),
            ttl,
        )))
        .await;
        rig.inboxes
            .append(vec![rig.asking(1, 1, 5), rig.asking(2, 2, 5)])
            .await
            .unwrap();
        for (user, seq) in [(3, 2), (4, 1), (5, 2)] {
            rig.read(user, seq).await;
        }
        let before = rig.counts(&[1, 2]).await;
        assert_eq!(
            before,
            vec![(1, 4, 4), (2, 2, 4)],
            "user 2 replied after message 1"
        );
        use fred::prelude::KeysInterface as _;
        let _: i64 = pool
            .del(crate::keys::receipt_bits(&rig.conv))
            .await
            .unwrap();
        // A read lands on the empty arena first; the rebuild keeps it and restores the rest.
        rig.read(4, 2).await;
        assert_eq!(rig.counts(&[1, 2]).await, vec![(1, 4, 4), (2, 3, 4)]);
    }
}

#[tokio::test]
async fn receipts_outside_write_fanout_groups_are_refused_by_field_and_store_nothing() {
    let rig = rig().await;
    let direct = IncomingEvent {
        mark: rig.asking(1, 1, 5).mark.map(|mark| Mark {
            conversation_id: "d:1:2".into(),
            ..mark
        }),
        ..rig.asking(1, 1, 5)
    };
    let read_fanout = IncomingEvent {
        recipients: vec![],
        read_fanout_group: Some(7),
        ..rig.asking(2, 1, 5)
    };
    for event in [direct, read_fanout] {
        let refused = rig.inboxes.append(vec![event]).await.unwrap_err();
        assert!(
            matches!(
                refused,
                Error::Invalid {
                    field: "events.receipt_map_bound",
                    ..
                }
            ),
            "{refused:?}"
        );
    }
    let stored = rig
        .inboxes
        .receipt_counts(Actor::User(1), &rig.conv, &[1, 2])
        .await;
    assert!(stored.unwrap().is_empty(), "nothing was appended");
}
