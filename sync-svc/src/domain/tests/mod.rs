//! Fanout, replay and pull over a real SQLite store.

mod reads;
mod receipts;

use parking_lot::Mutex;

use imesh_kit::testing;

use super::*;
use crate::store::sql::{Migrator, SqlInboxStore};

/// Live deliveries as (user, sync_seqs), group hints as (group, event bytes), and how many
/// delivery calls asked to wait for their push.
#[derive(Default)]
struct Recorder(
    Mutex<Vec<(i64, Vec<i64>)>>,
    Mutex<Vec<(i64, Bytes)>>,
    std::sync::atomic::AtomicUsize,
);

#[async_trait::async_trait]
impl Notifier for Recorder {
    async fn deliver(&self, deliveries: Vec<(i64, Vec<Entry>)>) -> anyhow::Result<()> {
        let mut got = self.0.lock();
        for (user, entries) in deliveries {
            got.push((user, entries.iter().map(|e| e.sync_seq).collect()));
        }
        got.sort();
        Ok(())
    }

    async fn deliver_and_wait(&self, deliveries: Vec<(i64, Vec<Entry>)>) -> anyhow::Result<()> {
        self.2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.deliver(deliveries).await
    }

    async fn deliver_to_groups(&self, events: Vec<(i64, Bytes)>) -> anyhow::Result<()> {
        self.1.lock().extend(events);
        Ok(())
    }
}

/// Every group's current members: users 1 to 5 with map ids 0 to 4 and user 1 the owner,
/// unless a test changes them.
struct Members(Mutex<Vec<MapMember>>);

impl Default for Members {
    fn default() -> Self {
        let members = (1..=5)
            .map(|user| MapMember {
                user,
                map_id: user as u32 - 1,
                manages: user == 1,
            })
            .collect();
        Self(Mutex::new(members))
    }
}

#[async_trait::async_trait]
impl Memberships for Members {
    async fn is_member(&self, _: i64, user: i64) -> anyhow::Result<bool> {
        Ok(self.0.lock().iter().any(|m| m.user == user))
    }

    async fn member_map(&self, _: i64, _: bool) -> anyhow::Result<Arc<MemberMap>> {
        Ok(Arc::new(MemberMap::new(self.0.lock().clone())))
    }
}

async fn inboxes() -> (Inboxes, Arc<Recorder>) {
    let config = testing::fresh_sql(testing::Backend::Sqlite).await.unwrap();
    let db = imesh_kit::sql::connect_and_migrate::<Migrator>(&config)
        .await
        .unwrap();
    let bits = Arc::new(crate::store::memory::MemoryBits::default());
    build(db, Arc::default(), bits)
}

/// Inboxes over `db` with these members and receipt bits, and their notifier.
fn build(
    db: sea_orm::DatabaseConnection,
    members: Arc<Members>,
    bits: Arc<dyn ReceiptBits>,
) -> (Inboxes, Arc<Recorder>) {
    let recorder = Arc::new(Recorder::default());
    let inboxes = Inboxes::new(
        Arc::new(SqlInboxStore::new(db)),
        Parts {
            ids: Arc::new(Snowflake::new(0)),
            notifier: recorder.clone(),
            members,
            bits,
            encode: crate::events::ENCODERS,
            webhooks: None,
        },
    );
    (inboxes, recorder)
}

fn event(id: &str, recipients: &[i64]) -> IncomingEvent {
    IncomingEvent {
        event_id: id.into(),
        recipients: recipients.to_vec(),
        payload: Bytes::from(id.to_owned()),
        read_fanout_group: None,
        mark: None,
    }
}

#[tokio::test]
async fn each_recipient_gets_its_own_dense_sync_seq_and_a_live_delivery() {
    let (inboxes, recorder) = inboxes().await;
    let outcome = inboxes
        .append(vec![event("a", &[1, 2]), event("b", &[2, 3, 3])])
        .await
        .unwrap();
    assert_eq!(
        outcome,
        Appended {
            appended: 2,
            duplicates: 0
        }
    );
    assert_eq!(
        *recorder.0.lock(),
        vec![(1, vec![1]), (2, vec![1, 2]), (3, vec![1])]
    );
    let (entries, has_more) = inboxes.pull(2, 0, 0).await.unwrap();
    assert_eq!(
        entries
            .iter()
            .map(|e| e.payload.as_ref())
            .collect::<Vec<_>>(),
        vec![b"a".as_ref(), b"b".as_ref()]
    );
    assert!(!has_more);
}

#[tokio::test]
async fn an_append_waits_for_the_push_of_a_groups_fanout_not_of_a_direct_message() {
    let (inboxes, recorder) = inboxes().await;
    let waited = || recorder.2.load(std::sync::atomic::Ordering::Relaxed);
    inboxes
        .append(vec![event("direct", &[1, 2])])
        .await
        .unwrap();
    let below: Vec<i64> = (1..WAITED_FANOUT as i64).collect();
    inboxes
        .append(vec![event("small group", &below)])
        .await
        .unwrap();
    assert_eq!(waited(), 0, "neither waits for its push");
    let group: Vec<i64> = (1..=WAITED_FANOUT as i64).collect();
    (inboxes.append(vec![event("direct 2", &[1, 2]), event("group", &group)]))
        .await
        .unwrap();
    assert_eq!(waited(), 1, "an append with a group's fanout waits");
}

#[tokio::test]
async fn replayed_events_are_counted_as_duplicates_and_append_nothing() {
    let (inboxes, recorder) = inboxes().await;
    inboxes.append(vec![event("a", &[1])]).await.unwrap();
    let again = inboxes
        .append(vec![event("a", &[1]), event("a", &[1]), event("b", &[1])])
        .await
        .unwrap();
    assert_eq!(
        again,
        Appended {
            appended: 1,
            duplicates: 2
        }
    );
    let (entries, _) = inboxes.pull(1, 0, 10).await.unwrap();
    assert_eq!(
        entries.iter().map(|e| e.sync_seq).collect::<Vec<_>>(),
        vec![1, 2]
    );
    assert_eq!(
        recorder.0.lock().len(),
        2,
        "a duplicate is not pushed again"
    );
}

#[tokio::test]
async fn pulls_page_after_the_cursor() {
    let (inboxes, _) = inboxes().await;
    let events: Vec<_> = (0..5).map(|i| event(&format!("e{i}"), &[9])).collect();
    inboxes.append(events).await.unwrap();
    let (page, has_more) = inboxes.pull(9, 1, 2).await.unwrap();
    assert_eq!(
        page.iter().map(|e| e.sync_seq).collect::<Vec<_>>(),
        vec![2, 3]
    );
    assert!(has_more);
    let (rest, has_more) = inboxes.pull(9, 3, 10).await.unwrap();
    assert_eq!(
        rest.iter().map(|e| e.sync_seq).collect::<Vec<_>>(),
        vec![4, 5]
    );
    assert!(!has_more);
}

#[tokio::test]
async fn bad_input_names_the_field() {
    let (inboxes, _) = inboxes().await;
    fn field<T: std::fmt::Debug>(r: Result<T, Error>) -> &'static str {
        match r {
            Err(Error::Invalid { field, .. }) => field,
            other => panic!("expected invalid, got {other:?}"),
        }
    }
    assert_eq!(
        field(inboxes.append(vec![event("", &[1])]).await),
        "events.event_id"
    );
    assert_eq!(
        field(inboxes.append(vec![event("x", &[])]).await),
        "events.recipient_ids"
    );
    assert_eq!(
        field(inboxes.append(vec![event("x", &[0])]).await),
        "events.recipient_ids"
    );
    assert_eq!(field(inboxes.pull(1, -1, 0).await), "after_sync_seq");
    assert_eq!(field(inboxes.pull(1, 0, 501).await), "limit");
    assert_eq!(field(inboxes.ack(1, "", 1).await), "device_id");
    let ack = |user, device: &str, seq| vec![(user, device.to_owned(), seq)];
    assert_eq!(field(inboxes.ack_many(Vec::new()).await), "acks");
    assert_eq!(
        field(inboxes.ack_many(ack(0, "d", 1)).await),
        "acks.user_id"
    );
    assert_eq!(
        field(inboxes.ack_many(ack(1, "", 1)).await),
        "acks.device_id"
    );
    assert_eq!(
        field(inboxes.ack_many(ack(1, "d", -1)).await),
        "acks.sync_seq"
    );
    let many: Vec<_> = (1..=1001).map(|u| (u, "d".to_owned(), 1)).collect();
    assert_eq!(field(inboxes.ack_many(many).await), "acks");
}
