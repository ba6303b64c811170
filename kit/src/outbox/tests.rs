use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use sea_orm::TransactionTrait;

use super::*;
use crate::testing::{self, until};
use imesh_protos::sync as pb;

const TABLE: &str = "test_outbox";

async fn outbox(backend: testing::Backend) -> SqlOutbox {
    let db = crate::sql::connect(&testing::fresh_sql(backend).await.unwrap())
        .await
        .unwrap();
    let m = Migration {
        table: TABLE,
        name: "m_test_outbox",
    };
    m.up(&SchemaManager::new(&db)).await.unwrap();
    SqlOutbox::new(db, TABLE)
}

/// Fails the first `fail_first` deliveries, then records what it was given.
struct FlakySink {
    fail_first: AtomicUsize,
    got: Mutex<Vec<i64>>,
}

#[async_trait]
impl Sink for FlakySink {
    async fn deliver(&self, rows: &[OutboxRow]) -> anyhow::Result<()> {
        if self.fail_first.load(Ordering::SeqCst) > 0 {
            self.fail_first.fetch_sub(1, Ordering::SeqCst);
            anyhow::bail!("sink down");
        }
        self.got.lock().extend(rows.iter().map(|r| r.id));
        Ok(())
    }
}

#[tokio::test]
async fn rows_committed_with_a_transaction_are_relayed_in_order_despite_failures() {
    for backend in testing::sql_backends() {
        let outbox = outbox(backend).await;
        let txn = outbox.db.begin().await.unwrap();
        let rows: Vec<OutboxRow> = (1..=7)
            .map(|id| OutboxRow {
                id,
                payload: vec![id as u8; 3],
            })
            .collect();
        insert(&txn, TABLE, &rows).await.unwrap();
        txn.commit().await.unwrap();
        // A rolled-back transaction leaves nothing to relay.
        let txn = outbox.db.begin().await.unwrap();
        insert(
            &txn,
            TABLE,
            &[OutboxRow {
                id: 99,
                payload: vec![],
            }],
        )
        .await
        .unwrap();
        txn.rollback().await.unwrap();
        assert_eq!(outbox.pending(100).await.unwrap(), rows);

        let sink = Arc::new(FlakySink {
            fail_first: AtomicUsize::new(2),
            got: Mutex::new(Vec::new()),
        });
        let relay = Relay::new(outbox.clone(), sink.clone(), 3);
        let backlog = relay.backlog();
        assert_eq!(backlog.behind(), Duration::ZERO);
        relay.waker().notify_one();
        let stop = Arc::new(Notify::new());
        let stopper = stop.clone();
        let task = tokio::spawn(relay.run(async move { stopper.notified().await }));
        // A failing sink marks the relay behind (until it drains).
        testing::until(&format!("behind on {backend:?}"), || {
            backlog.oldest_ms.load(Ordering::Relaxed) != 0
        })
        .await;
        testing::until_async(&format!("the relay drains on {backend:?}"), || async {
            outbox.pending(1).await.unwrap().is_empty()
        })
        .await;
        stop.notify_one();
        task.await.unwrap();
        assert_eq!(backlog.behind(), Duration::ZERO, "caught up on {backend:?}");
        assert_eq!(
            *sink.got.lock(),
            (1..=7).collect::<Vec<_>>(),
            "on {backend:?}"
        );
    }
}

/// Records what it was given (ids and payloads); holds each delivery while `gate` is shut.
#[derive(Default)]
struct GatedSink {
    gate: tokio::sync::RwLock<()>,
    got: Mutex<Vec<(i64, Vec<u8>)>>,
}

#[async_trait]
impl Sink for GatedSink {
    async fn deliver(&self, rows: &[OutboxRow]) -> anyhow::Result<()> {
        let _open = self.gate.read().await;
        self.got
            .lock()
            .extend(rows.iter().map(|r| (r.id, r.payload.clone())));
        Ok(())
    }
}

fn rows(ids: std::ops::RangeInclusive<i64>, payload: &[u8]) -> Vec<OutboxRow> {
    ids.map(|id| OutboxRow {
        id,
        payload: payload.to_vec(),
    })
    .collect()
}

async fn commit(outbox: &SqlOutbox, rows: &[OutboxRow]) {
    let txn = outbox.db.begin().await.unwrap();
    insert(&txn, TABLE, rows).await.unwrap();
    txn.commit().await.unwrap();
}

async fn wait_for(sink: &GatedSink, count: usize, what: &str) {
    until(what, || sink.got.lock().len() >= count).await;
}

/// A relay of `batch` rows running on `backend`, past row 1 (left in the table before it
/// started, so it relayed it from there).
struct Running {
    outbox: SqlOutbox,
    sink: Arc<GatedSink>,
    handoff: Handoff,
    backlog: Backlog,
    stop: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

async fn running(backend: testing::Backend, batch: u64) -> Running {
    let outbox = outbox(backend).await;
    let sink = Arc::new(GatedSink::default());
    let relay = Relay::new(outbox.clone(), sink.clone(), batch);
    let handoff = relay.handoff();
    let backlog = relay.backlog();
    commit(&outbox, &rows(1..=1, b"table")).await;
    let stop = Arc::new(Notify::new());
    let stopper = stop.clone();
    let task = tokio::spawn(relay.run(async move { stopper.notified().await }));
    wait_for(&sink, 1, "row 1 from the table").await;
    Running {
        outbox,
        sink,
        handoff,
        backlog,
        stop,
        task,
    }
}

impl Running {
    async fn stop(self) {
        self.stop.notify_one();
        self.task.await.unwrap();
    }
}

#[tokio::test]
async fn rows_handed_over_are_relayed_from_memory_in_order_then_deleted() {
    for backend in testing::sql_backends() {
        let relay = running(backend, 3).await;
        let (outbox, sink) = (&relay.outbox, &relay.sink);
        // Rows 2..=8 are handed over with a payload the table does not have: what the sink
        // gets shows they were not read back.
        commit(outbox, &rows(2..=8, b"table")).await;
        relay.handoff.committed(rows(2..=8, b"memory"));
        wait_for(sink, 8, "handed rows relayed").await;
        testing::until_async("relayed rows are deleted", || async {
            outbox.pending(1).await.unwrap().is_empty()
        })
        .await;
        let got = sink.got.lock().clone();
        relay.stop().await;
        let mut expected = rows(1..=1, b"table");
        expected.extend(rows(2..=8, b"memory"));
        let expected: Vec<(i64, Vec<u8>)> =
            expected.into_iter().map(|r| (r.id, r.payload)).collect();
        assert_eq!(got, expected, "on {backend:?}");
    }
}

#[tokio::test]
async fn rows_delivered_before_a_stop_are_deleted_by_it() {
    for backend in testing::sql_backends() {
        // A batch of 100 and one row: its deletion waits for more rows or REMOVE_AFTER.
        let relay = running(backend, 100).await;
        commit(&relay.outbox, &rows(2..=2, b"table")).await;
        relay.handoff.committed(rows(2..=2, b"memory"));
        wait_for(&relay.sink, 2, "the handed row relayed").await;
        let outbox = relay.outbox.clone();
        relay.stop().await;
        assert!(
            outbox.pending(1).await.unwrap().is_empty(),
            "a delivered row left for the next start on {backend:?}"
        );
    }
}

#[tokio::test]
async fn rows_that_do_not_fit_the_handoff_are_relayed_from_the_table_once_and_in_order() {
    for backend in testing::sql_backends() {
        // Room for 64 batches of 2 rows in memory.
        let relay = running(backend, 2).await;
        let (outbox, sink, handoff) = (&relay.outbox, &relay.sink, &relay.handoff);
        // The sink stalls on row 2 while 300 more rows are committed and handed over.
        let shut = sink.gate.write().await;
        commit(outbox, &rows(2..=2, b"a")).await;
        handoff.committed(rows(2..=2, b"a"));
        commit(outbox, &rows(3..=302, b"a")).await;
        handoff.committed(rows(3..=302, b"a"));
        drop(shut);
        wait_for(sink, 302, "every row relayed").await;
        let ids: Vec<i64> = sink.got.lock().iter().map(|(id, _)| *id).collect();
        let outbox = outbox.clone();
        // The relay deletes what it delivered before it stops.
        relay.stop().await;
        assert_eq!(ids, (1..=302).collect::<Vec<_>>(), "on {backend:?}");
        assert!(
            outbox.pending(1).await.unwrap().is_empty(),
            "on {backend:?}"
        );
    }
}

#[tokio::test]
async fn after_a_row_does_not_fit_nothing_is_handed_over_until_the_relay_reads_the_table() {
    let outbox = outbox(testing::Backend::Sqlite).await;
    // Room for 64 rows in memory.
    let relay = Relay::new(outbox, Arc::new(GatedSink::default()), 1);
    let handoff = relay.handoff();
    handoff.committed(rows(1..=65, b"a"));
    assert_eq!(relay.handed.len(), 64);
    // The relay takes some; a later row would now fit, and would overtake row 65.
    let taken: Vec<i64> = relay.handed.try_iter().take(10).map(|r| r.id).collect();
    assert_eq!(taken, (1..=10).collect::<Vec<_>>());
    handoff.committed(rows(66..=66, b"a"));
    assert_eq!(
        relay.handed.len(),
        54,
        "row 66 was handed over after row 65 missed"
    );
}

/// Delivers one batch per permit added to `steps`, recording the ids.
struct SteppedSink {
    steps: tokio::sync::Semaphore,
    got: Mutex<Vec<i64>>,
}

#[async_trait]
impl Sink for SteppedSink {
    async fn deliver(&self, rows: &[OutboxRow]) -> anyhow::Result<()> {
        self.steps.acquire().await?.forget();
        self.got.lock().extend(rows.iter().map(|r| r.id));
        Ok(())
    }
}

#[tokio::test]
async fn the_backlog_is_the_age_of_the_oldest_row_not_yet_delivered() {
    let outbox = outbox(testing::Backend::Sqlite).await;
    let now = crate::ids::unix_ms();
    let old = crate::ids::first_id_at(now - 3_000);
    let fresh = crate::ids::first_id_at(now);
    let ids = [old, old + 1, fresh, fresh + 1];
    let table: Vec<OutboxRow> = ids
        .iter()
        .map(|&id| OutboxRow {
            id,
            payload: vec![],
        })
        .collect();
    commit(&outbox, &table).await;
    let sink = Arc::new(SteppedSink {
        steps: tokio::sync::Semaphore::new(0),
        got: Mutex::default(),
    });
    let relay = Relay::new(outbox, sink.clone(), 2);
    let backlog = relay.backlog();
    let running = relay.spawn();

    // Delivering the rows written 3 s ago.
    until("behind by the old rows' age", || {
        backlog.behind() >= Duration::from_secs(3)
    })
    .await;
    // Delivering the fresh rows: the old ones no longer count.
    sink.steps.add_permits(1);
    until("behind by the fresh rows' age only", || {
        sink.got.lock().len() == 2 && backlog.behind() < Duration::from_secs(2)
    })
    .await;
    sink.steps.add_permits(1);
    until("caught up", || backlog.behind() == Duration::ZERO).await;
    running.stop().await.unwrap();
    assert_eq!(*sink.got.lock(), ids);
}

#[tokio::test]
async fn writers_find_room_once_the_relay_takes_what_waits() {
    // Batches of two: the relay stopped reading the table after row 1 (a short batch).
    let relay = running(testing::Backend::Sqlite, 2).await;
    let (outbox, sink, backlog) = (&relay.outbox, &relay.sink, &relay.backlog);
    let waiting = || backlog.queue.as_ref().expect("a relay's backlog").0.len();
    // The sink stalls on rows 2 and 3; rows 4..=8 wait, one more than two batches.
    let shut = sink.gate.write().await;
    commit(outbox, &rows(2..=8, b"a")).await;
    relay.handoff.committed(rows(2..=8, b"a"));
    until("rows 2 and 3 taken", || waiting() == 5).await;
    assert!(!backlog.room(Duration::from_millis(20)).await, "no room");
    let room = backlog.room(Duration::from_secs(10));
    drop(shut);
    assert!(room.await, "room once the relay moved on");
    wait_for(sink, 8, "every row relayed").await;
    relay.stop().await;
}

#[tokio::test]
async fn a_partitioned_outbox_reads_its_own_nodes_rows_and_those_no_lease_holds() {
    use crate::ids::{Snowflake, lease::NodeLease};
    for backend in testing::sql_backends() {
        let outbox = outbox(backend).await;
        let db = outbox.db.clone();
        crate::ids::lease::Migration
            .up(&SchemaManager::new(&db))
            .await
            .unwrap();
        // Nodes 1 and 2 are held by live replicas; node 3's holder stopped (released it).
        let _mine = NodeLease::claim(db.clone(), 1..=1).await.unwrap();
        let live = NodeLease::claim(db.clone(), 2..=2).await.unwrap();
        let gone = NodeLease::claim(db.clone(), 3..=3).await.unwrap();
        gone.release().await.unwrap();
        let minting: Vec<Snowflake> = (0..4).map(Snowflake::new).collect();
        let mut written = Vec::new();
        for node in [1, 2, 3, 1] {
            let id = minting[usize::from(node)].next_id().unwrap();
            written.push((node, id));
        }
        let rows: Vec<OutboxRow> = written
            .iter()
            .map(|(_, id)| OutboxRow {
                id: *id,
                payload: vec![1],
            })
            .collect();
        commit(&outbox, &rows).await;
        let nodes_read = |node: Option<u16>| {
            let outbox = outbox.clone().owned_by(node);
            let written = written.clone();
            async move {
                let ids: Vec<i64> = outbox
                    .pending(10)
                    .await
                    .unwrap()
                    .iter()
                    .map(|r| r.id)
                    .collect();
                let mut nodes: Vec<u16> = written
                    .iter()
                    .filter(|(_, id)| ids.contains(id))
                    .map(|(node, _)| *node)
                    .collect();
                nodes.sort_unstable();
                nodes.dedup();
                nodes
            }
        };
        assert_eq!(
            nodes_read(Some(1)).await,
            vec![1, 3],
            "{backend:?}: its own and the dead one's"
        );
        assert_eq!(nodes_read(Some(2)).await, vec![2, 3], "{backend:?}");
        assert_eq!(
            nodes_read(None).await,
            vec![1, 2, 3],
            "{backend:?}: unpartitioned"
        );
        live.release().await.unwrap();
        assert_eq!(
            nodes_read(Some(1)).await,
            vec![1, 2, 3],
            "{backend:?}: a released node's rows are taken over"
        );
    }
}

/// A sync-svc replica that records which events its `Append` calls carried.
#[derive(Clone)]
struct RecordingSync {
    replica: usize,
    got: Arc<Mutex<Vec<(usize, String)>>>,
}

type Unary<T> = Result<tonic::Response<T>, tonic::Status>;

#[async_trait]
impl imesh_protos::sync::sync_service_server::SyncService for RecordingSync {
    async fn append(&self, r: tonic::Request<pb::AppendRequest>) -> Unary<pb::AppendResponse> {
        let events = r.into_inner().events;
        let got = events.iter().map(|e| (self.replica, e.event_id.clone()));
        self.got.lock().extend(got);
        Ok(tonic::Response::new(pb::AppendResponse::default()))
    }
    async fn pull(&self, _: tonic::Request<pb::PullRequest>) -> Unary<pb::PullResponse> {
        Err(tonic::Status::unimplemented("pull"))
    }
    async fn ack(&self, _: tonic::Request<pb::AckRequest>) -> Unary<pb::AckResponse> {
        Err(tonic::Status::unimplemented("ack"))
    }
    async fn ack_batch(
        &self,
        _: tonic::Request<pb::AckBatchRequest>,
    ) -> Unary<pb::AckBatchResponse> {
        Err(tonic::Status::unimplemented("ack_batch"))
    }
    async fn mark_read(
        &self,
        _: tonic::Request<pb::MarkReadRequest>,
    ) -> Unary<pb::MarkReadResponse> {
        Err(tonic::Status::unimplemented("mark_read"))
    }
    async fn conversations(
        &self,
        _: tonic::Request<pb::ConversationsRequest>,
    ) -> Unary<pb::ConversationsResponse> {
        Err(tonic::Status::unimplemented("conversations"))
    }
    async fn update_conversation(
        &self,
        _: tonic::Request<pb::UpdateConversationRequest>,
    ) -> Unary<pb::ConversationSettings> {
        Err(tonic::Status::unimplemented("update_conversation"))
    }
    async fn remove_conversation(
        &self,
        _: tonic::Request<pb::RemoveConversationRequest>,
    ) -> Unary<pb::ConversationRemoved> {
        Err(tonic::Status::unimplemented("remove_conversation"))
    }
    async fn receipt_counts(
        &self,
        _: tonic::Request<pb::ReceiptCountsRequest>,
    ) -> Unary<pb::ReceiptCountsResponse> {
        Err(tonic::Status::unimplemented("receipt_counts"))
    }
    async fn receipt_readers(
        &self,
        _: tonic::Request<pb::ReceiptReadersRequest>,
    ) -> Unary<pb::ReceiptReadersResponse> {
        Err(tonic::Status::unimplemented("receipt_readers"))
    }
    async fn update_push_settings(
        &self,
        _: tonic::Request<pb::PushSettings>,
    ) -> Unary<pb::PushSettings> {
        Err(tonic::Status::unimplemented("update_push_settings"))
    }
    async fn offline_targets(
        &self,
        _: tonic::Request<pb::OfflineTargetsRequest>,
    ) -> Unary<pb::OfflineTargetsResponse> {
        Err(tonic::Status::unimplemented("offline_targets"))
    }
}

/// Three recording replicas listening on loopback, and their addresses as one list.
async fn recording_replicas(got: &Arc<Mutex<Vec<(usize, String)>>>) -> String {
    let mut addrs = Vec::new();
    for replica in 0..3 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.push(listener.local_addr().unwrap().to_string());
        let service = RecordingSync {
            replica,
            got: got.clone(),
        };
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(
                    imesh_protos::sync::sync_service_server::SyncServiceServer::new(service),
                )
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
    }
    addrs.join(",")
}

/// An outbox row of a message event in `conversation`.
fn message_row(id: i64, conversation: &str) -> OutboxRow {
    use prost::Message as _;
    let message = imesh_protos::message::Message {
        conversation_id: conversation.into(),
        ..Default::default()
    };
    let fanout = pb::Fanout {
        event_id: format!("{conversation}/{id}"),
        recipient_ids: vec![id],
        event: Some(pb::SyncEvent {
            kind: Some(pb::sync_event::Kind::Message(message)),
        }),
        ..Default::default()
    };
    OutboxRow {
        id,
        payload: fanout.encode_to_vec(),
    }
}

#[tokio::test]
async fn the_sync_sink_sends_each_conversations_events_to_one_replica_in_order() {
    let got = Arc::default();
    let addrs = recording_replicas(&got).await;
    let replicas = crate::grpc::Peers::default().keyed(&addrs).unwrap();
    let secret = crate::config::Secret::new("0123456789abcdef");
    let sink = SyncSink::new(replicas, crate::identity::Caller::new(&secret).unwrap());
    let conversation = |i: i64| format!("d:{}:{}", i % 40, 1000 + i % 40);
    for batch in 0..3 {
        let rows: Vec<_> = (0..120)
            .map(|i| message_row(batch * 120 + i, &conversation(i)))
            .collect();
        sink.deliver(&rows).await.unwrap();
    }
    let got = got.lock().clone();
    assert_eq!(got.len(), 360, "every event appended once");
    let mut owners = std::collections::BTreeMap::new();
    let mut last = std::collections::BTreeMap::new();
    for (replica, event_id) in &got {
        let (conversation, id) = event_id.rsplit_once('/').unwrap();
        let id: i64 = id.parse().unwrap();
        let owner = owners.entry(conversation.to_owned()).or_insert(*replica);
        assert_eq!(owner, replica, "{conversation} reached two replicas");
        let previous = last.insert(conversation.to_owned(), id);
        assert!(
            previous < Some(id),
            "{conversation}: {id} after {previous:?}"
        );
    }
    let used: std::collections::BTreeSet<_> = owners.values().collect();
    assert_eq!(
        used.len(),
        3,
        "40 conversations spread over the three replicas"
    );
}
