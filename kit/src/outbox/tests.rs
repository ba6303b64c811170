use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use sea_orm::TransactionTrait;

use super::*;
use crate::testing;

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
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        // A failing sink marks the relay behind (until it drains).
        while backlog.behind_since_ms.load(Ordering::Relaxed) == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "never behind on {backend:?}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        while !outbox.pending(1).await.unwrap().is_empty() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "relay did not drain on {backend:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
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
