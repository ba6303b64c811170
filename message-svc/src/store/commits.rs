//! Group commit for appends: sends that arrive while a transaction is being written wait
//! and go into the next one together, as multi-row inserts. Under load one transaction
//! carries many messages; alone, a message is written at once. A batch that fails (one
//! row's conflict fails them all) is written again row by row, so each send gets its own
//! answer and a conflict only refuses the send it belongs to.

use std::sync::Arc;

use imesh_kit::{error::StoreError, outbox::OutboxRow};
use sea_orm::DatabaseConnection;
use tokio::sync::{Mutex, mpsc, oneshot};

use crate::domain::Message;

/// Appends one transaction holds at most.
const MAX_BATCH: usize = 256;
/// Appends waiting for a writer before senders wait to queue.
const QUEUE: usize = 4096;

/// One send's message and outbox event, and where its outcome goes.
pub(super) struct Append {
    pub(super) message: Message,
    pub(super) event: OutboxRow,
    done: oneshot::Sender<Result<(), StoreError>>,
}

#[derive(Clone)]
pub(super) struct GroupCommit {
    queue: mpsc::Sender<Append>,
}

impl GroupCommit {
    /// Starts `writers` concurrent writers (1 for SQLite, whose writes serialize anyway).
    pub(super) fn spawn(db: DatabaseConnection, writers: usize) -> Self {
        let (queue, waiting) = mpsc::channel(QUEUE);
        let waiting = Arc::new(Mutex::new(waiting));
        for _ in 0..writers.max(1) {
            tokio::spawn(write_batches(db.clone(), waiting.clone()));
        }
        Self { queue }
    }

    pub(super) async fn append(
        &self,
        message: Message,
        event: OutboxRow,
    ) -> Result<(), StoreError> {
        let (done, outcome) = oneshot::channel();
        let append = Append {
            message,
            event,
            done,
        };
        let stopped = || StoreError::Unavailable(anyhow::anyhow!("the message writer stopped"));
        self.queue.send(append).await.map_err(|_| stopped())?;
        outcome.await.map_err(|_| stopped())?
    }
}

async fn write_batches(db: DatabaseConnection, waiting: Arc<Mutex<mpsc::Receiver<Append>>>) {
    loop {
        let batch = {
            let mut waiting = waiting.lock().await;
            let Some(first) = waiting.recv().await else {
                return;
            };
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match waiting.try_recv() {
                    Ok(next) => batch.push(next),
                    Err(_) => break,
                }
            }
            batch
        };
        if batch.len() > 1 && super::sql::write_appends(&db, &batch).await.is_ok() {
            for append in batch {
                let _ = append.done.send(Ok(()));
            }
            continue;
        }
        for append in batch {
            let outcome = super::sql::write_appends(&db, std::slice::from_ref(&append)).await;
            let _ = append.done.send(outcome);
        }
    }
}
