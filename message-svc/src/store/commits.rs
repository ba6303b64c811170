//! Group commit for appends: sends that arrive while a transaction is being written wait
//! and go into the next one together, as multi-row inserts. Under load one transaction
//! carries many messages; alone, a message is written at once. A batch that fails (one
//! row's conflict fails them all) is written again row by row, so each send gets its own
//! answer and a conflict only refuses the send it belongs to. On PostgreSQL a batch leaves
//! out the conversations that are behind (`sql::order`) and stores the rest; their sends
//! are refused.
//!
//! One writer commits in queue order, on every backend: appends become visible to the
//! outbox relay in the order they were queued, which is what keeps one device's messages
//! in order on their way out. The writer hands each commit's events to the relay in
//! memory, in that order, so the relay need not read them back. Throughput comes from the
//! batch size (up to 256 rows a transaction), not from concurrent writers.

use imesh_kit::{
    error::StoreError,
    outbox::{Handoff, OutboxRow},
};
use sea_orm::DatabaseConnection;
use tokio::sync::{mpsc, oneshot};

use crate::domain::{Message, Queued};

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
    /// Starts the writer; it hands what it commits to `handoff`, if given, and calls
    /// `wrote` after each commit that stored messages.
    pub(super) fn spawn(
        db: DatabaseConnection,
        handoff: Option<Handoff>,
        wrote: impl Fn() + Send + Sync + 'static,
    ) -> Self {
        let (queue, waiting) = mpsc::channel(QUEUE);
        tokio::spawn(write_batches(db, handoff, wrote, waiting));
        Self { queue }
    }

    /// Queues every append in order; their outcomes come through the answer.
    pub(super) async fn append_many(&self, appends: &[(Message, OutboxRow)]) -> Queued {
        let mut outcomes = Vec::with_capacity(appends.len());
        for (message, event) in appends {
            let (done, outcome) = oneshot::channel();
            let append = Append {
                message: message.clone(),
                event: event.clone(),
                done,
            };
            match self.queue.send(append).await {
                Ok(()) => outcomes.push(Some(outcome)),
                Err(_) => outcomes.push(None),
            }
        }
        Queued::new(outcomes)
    }
}

async fn write_batches(
    db: DatabaseConnection,
    handoff: Option<Handoff>,
    wrote: impl Fn(),
    mut waiting: mpsc::Receiver<Append>,
) {
    let hand_over = |events: Vec<OutboxRow>| {
        if !events.is_empty() {
            wrote();
        }
        if let Some(handoff) = &handoff {
            handoff.committed(events);
        }
    };
    loop {
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
        if batch.len() > 1
            && let Ok(behind) = super::sql::write_appends(&db, &batch).await
        {
            let mut events = Vec::with_capacity(batch.len());
            for append in batch {
                let outcome = refused(&append, &behind);
                if outcome.is_ok() {
                    events.push(append.event);
                }
                let _ = append.done.send(outcome);
            }
            hand_over(events);
            continue;
        }
        for append in batch {
            let outcome = super::sql::write_appends(&db, std::slice::from_ref(&append))
                .await
                .and_then(|behind| refused(&append, &behind));
            let stored = outcome.is_ok();
            let _ = append.done.send(outcome);
            if stored {
                hand_over(vec![append.event]);
            }
        }
    }
}

/// The outcome of a written append: refused when its conversation is among those
/// `behind`, whose messages the write left out.
fn refused(append: &Append, behind: &[String]) -> Result<(), StoreError> {
    let message = &append.message;
    match behind.contains(&message.conversation_id) {
        true => Err(super::sql::behind(&message.conversation_id, message.seq)),
        false => Ok(()),
    }
}
