//! The transactional outbox (seed 001's "local message table"). A service inserts events
//! with [`insert`] inside the same SQL transaction as the change they describe; one
//! [`Relay`] per process hands them, oldest first and in batches, to a [`Sink`] (usually
//! sync-svc over gRPC) and deletes them once the sink acknowledged. Failures back off
//! exponentially and retry: delivery is at least once, so sinks MUST be idempotent.
//!
//! A writer that commits in order can also pass its committed rows to the relay in memory
//! ([`Handoff`]): the relay then delivers them without reading them back, and deletes them
//! while it delivers the next batch. The table stays the truth: at start, after a failure,
//! when a hand-off did not fit, and whenever a writer without one wakes the relay, it
//! drains the table instead (rows it was handed and had not taken yet are dropped first,
//! they are in the table too).

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};
use sea_orm::{ConnectionTrait, DatabaseConnection};
use sea_orm_migration::{prelude::*, schema::*};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use tokio::sync::Notify;

use crate::error::StoreError;

mod sync_sink;
mod webhook_sink;
pub use sync_sink::SyncSink;
pub use webhook_sink::WebhookSink;

/// One pending event. `payload` is opaque to the kit (services store encoded protobuf).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRow {
    pub id: i64,
    pub payload: Vec<u8>,
}

#[derive(Iden)]
enum Col {
    Id,
    Payload,
}

/// The node that wrote a row: the node bits of its snowflake id ([`crate::ids`]).
fn writer_node() -> Expr {
    Expr::cust(format!(
        "((id >> {}) & {})",
        crate::ids::SEQ_BITS,
        crate::ids::MAX_NODE
    ))
}

/// Inserts `rows` into `table` on `conn` (pass the open transaction).
pub async fn insert(
    conn: &impl ConnectionTrait,
    table: &str,
    rows: &[OutboxRow],
) -> Result<(), StoreError> {
    if rows.is_empty() {
        return Ok(());
    }
    conn.execute_raw(insert_statement(conn.get_database_backend(), table, rows))
        .await?;
    Ok(())
}

/// The statement [`insert`] runs, for a transaction written with [`crate::sql::commit`].
/// `rows` must not be empty.
pub fn insert_statement(
    backend: sea_orm::DatabaseBackend,
    table: &str,
    rows: &[OutboxRow],
) -> sea_orm::Statement {
    let rows = (rows.iter())
        .map(|row| vec![row.id.into(), row.payload.clone().into()])
        .collect();
    crate::sql::insert(backend, table, &["id", "payload"], rows)
}

/// Reads and acknowledges the rows of one outbox table.
#[derive(Clone)]
pub struct SqlOutbox {
    db: DatabaseConnection,
    table: &'static str,
    /// The node whose rows this outbox reads, with those of nodes no lease holds.
    node: Option<u16>,
}

impl SqlOutbox {
    pub fn new(db: DatabaseConnection, table: &'static str) -> Self {
        Self {
            db,
            table,
            node: None,
        }
    }

    /// Reads only the rows written by `node` (a row's id is a snowflake naming its node)
    /// and those of nodes no live lease holds: replicas of a service share its table, each
    /// relays what it wrote, in the order it committed it, and what a stopped or dead
    /// replica left is taken over once its lease lapses. `None` reads every row.
    pub fn owned_by(mut self, node: Option<u16>) -> Self {
        self.node = node;
        self
    }

    /// The oldest pending rows, at most `limit`.
    pub async fn pending(&self, limit: u64) -> Result<Vec<OutboxRow>, StoreError> {
        let mut stmt = Query::select()
            .columns([Col::Id, Col::Payload])
            .from(Alias::new(self.table))
            .order_by(Col::Id, Order::Asc)
            .limit(limit)
            .to_owned();
        if let Some(node) = self.node {
            stmt.cond_where(
                Cond::any()
                    .add(writer_node().eq(i32::from(node)))
                    .add(writer_node().not_in_subquery(crate::ids::lease::live_nodes())),
            );
        }
        let rows = self.db.query_all(&stmt).await?;
        rows.iter()
            .map(|r| {
                Ok(OutboxRow {
                    id: r.try_get("", "id")?,
                    payload: r.try_get("", "payload")?,
                })
            })
            .collect::<Result<_, sea_orm::DbErr>>()
            .map_err(Into::into)
    }

    /// Removes delivered rows.
    pub async fn remove(&self, ids: &[i64]) -> Result<(), StoreError> {
        let stmt = Query::delete()
            .from_table(Alias::new(self.table))
            .and_where(Expr::col(Col::Id).is_in(ids.iter().copied()))
            .to_owned();
        self.db.execute(&stmt).await?;
        Ok(())
    }
}

/// Where relayed rows go. MUST be idempotent: a row may be handed over more than once.
#[async_trait]
pub trait Sink: Send + Sync + 'static {
    async fn deliver(&self, rows: &[OutboxRow]) -> anyhow::Result<()>;
}

pub struct Relay {
    outbox: SqlOutbox,
    sink: Arc<dyn Sink>,
    wake: Arc<Notify>,
    handed: flume::Receiver<OutboxRow>,
    handoff: Handoff,
    batch: u64,
    metrics: RelayMetrics,
    backlog: Backlog,
}

/// Rows committed to the outbox table, passed to its relay in commit order.
#[derive(Clone)]
pub struct Handoff {
    rows: flume::Sender<OutboxRow>,
    wake: Arc<Notify>,
    /// Set when a row did not fit: nothing more is handed over until the relay has gone
    /// back to the table, or later rows would overtake it.
    missed: Arc<AtomicBool>,
}

impl Handoff {
    /// Hands over rows just committed, in commit order. Rows that do not fit (the relay
    /// is far behind) make the relay drain the table instead.
    pub fn committed(&self, rows: impl IntoIterator<Item = OutboxRow>) {
        if !self.missed.load(Ordering::Acquire) {
            for row in rows {
                if self.rows.try_send(row).is_ok() {
                    continue;
                }
                self.missed.store(true, Ordering::Release);
                break;
            }
        }
        if self.missed.load(Ordering::Acquire) {
            self.wake.notify_one();
        }
    }
}

/// Batches of committed rows waiting in memory for the relay, at most.
const HANDOFF_BATCHES: usize = 64;

/// Batches of handed-over rows that may wait for the relay before [`Backlog::room`]
/// holds writers back.
const ROOM_BATCHES: usize = 2;

/// How far behind a relay is: the age of the oldest row it has not delivered yet (rows are
/// keyed by snowflake ids, so a row's id tells when it was written), and how many rows
/// wait for it in memory. Writers wait for [`Backlog::room`] before they write more, so
/// they go at the relay's pace, and refuse new work when it is too far behind.
#[derive(Clone, Default)]
pub struct Backlog {
    /// Unix ms of the oldest row not delivered yet; 0 while the relay is caught up.
    oldest_ms: Arc<AtomicI64>,
    /// The rows handed over and not taken yet, and how many may wait (none without a relay).
    queue: Option<(flume::Receiver<OutboxRow>, usize)>,
    /// Notified whenever the relay takes rows.
    taken: Arc<Notify>,
}

impl Backlog {
    /// Waits until few enough handed-over rows wait for the relay, for at most `patience`;
    /// `false` when they still do (the relay is too slow or stuck).
    pub async fn room(&self, patience: Duration) -> bool {
        let Some((queue, room)) = &self.queue else {
            return true;
        };
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let taken = self.taken.notified();
            tokio::pin!(taken);
            taken.as_mut().enable();
            if queue.len() <= *room {
                return true;
            }
            if tokio::time::timeout_at(deadline, taken).await.is_err() {
                return queue.len() <= *room;
            }
        }
    }

    /// How long the oldest undelivered row has waited (zero while the relay keeps up).
    pub fn behind(&self) -> Duration {
        match self.oldest_ms.load(Ordering::Relaxed) {
            0 => Duration::ZERO,
            since => Duration::from_millis(Ord::max(crate::ids::unix_ms() - since, 0) as u64),
        }
    }

    /// Marks the oldest undelivered row as written at `unix_ms`.
    pub fn waiting_since(&self, unix_ms: i64) {
        self.oldest_ms
            .store(Ord::max(unix_ms, 1), Ordering::Relaxed);
    }

    /// The oldest undelivered row is the one with this id.
    fn waiting_from(&self, row: &OutboxRow) {
        self.waiting_since(crate::ids::unix_ms_of(row.id));
    }

    /// The relay failed before it could tell what waits: behind from now, unless it
    /// already was.
    fn failing(&self) {
        let _ = self.oldest_ms.compare_exchange(
            0,
            crate::ids::unix_ms(),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    fn caught_up(&self) {
        self.oldest_ms.store(0, Ordering::Relaxed);
    }

    /// After delivering a batch ending with `last`: caught up when nothing waits, or else
    /// waiting from `last` on (what waits was written after it).
    fn delivered(&self, last: &OutboxRow, more_waiting: bool) {
        if more_waiting {
            self.waiting_from(last);
        } else {
            self.caught_up();
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutboxLabel {
    table: &'static str,
}

/// What the outbox relays of one service report, labelled by table. Register once per
/// registry and hand a clone to each relay.
#[derive(Clone, Default)]
pub struct RelayMetrics {
    relayed: Family<OutboxLabel, Counter>,
    failures: Family<OutboxLabel, Counter>,
    lag: Family<OutboxLabel, Gauge<f64, AtomicU64>>,
}

impl RelayMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "outbox_relayed",
            "Outbox rows handed to their sink",
            metrics.relayed.clone(),
        );
        registry.register(
            "outbox_relay_failures",
            "Relay attempts that failed and will be retried",
            metrics.failures.clone(),
        );
        registry.register(
            "outbox_lag_seconds",
            "Age of the oldest outbox row not relayed yet (0 while the relay keeps up)",
            metrics.lag.clone(),
        );
        metrics
    }
}

/// How often the relay looks for rows nobody woke it for (e.g. left by a crash).
const IDLE_POLL: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

impl Relay {
    pub fn new(outbox: SqlOutbox, sink: Arc<dyn Sink>, batch: u64) -> Self {
        let batch = Ord::max(batch, 1);
        let wake = Arc::new(Notify::new());
        let (rows, handed) = flume::bounded(HANDOFF_BATCHES * batch as usize);
        let backlog = Backlog {
            queue: Some((handed.clone(), ROOM_BATCHES * batch as usize)),
            ..Backlog::default()
        };
        Self {
            outbox,
            sink,
            handoff: Handoff {
                rows,
                wake: wake.clone(),
                missed: Arc::default(),
            },
            handed,
            wake,
            batch,
            metrics: RelayMetrics::default(),
            backlog,
        }
    }

    /// How far behind this relay is, for writers that bound their backlog.
    pub fn backlog(&self) -> Backlog {
        self.backlog.clone()
    }

    /// Reports into `metrics` (see [`RelayMetrics::register`]).
    pub fn observed(mut self, metrics: &RelayMetrics) -> Self {
        self.metrics = metrics.clone();
        self
    }

    /// Call [`Notify::notify_one`] on this after committing new rows, to relay them now.
    pub fn waker(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// For the one writer that commits this table's rows in order: see [`Handoff`].
    pub fn handoff(&self) -> Handoff {
        self.handoff.clone()
    }

    /// Runs the relay on its own task until [`Running::stop`].
    pub fn spawn(self) -> Running {
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(self.run(stop.clone().cancelled_owned()));
        Running { stop, task }
    }

    /// Relays until `shutdown` completes (rows still pending stay for the next start).
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let table = OutboxLabel {
            table: self.outbox.table,
        };
        let mut removing = Removing::default();
        // Rows left by an earlier run are in the table only.
        let mut from_table = true;
        let mut backoff = Duration::ZERO;
        loop {
            let relayed = if from_table || self.handoff.missed.load(Ordering::Acquire) {
                self.drain(&table, &mut removing).await
            } else {
                let handed = tokio::select! {
                    biased;
                    () = &mut shutdown => break,
                    () = self.wake.notified() => None,
                    row = self.handed.recv_async() => row.ok(),
                    () = tokio::time::sleep(IDLE_POLL) => None,
                };
                match handed {
                    Some(first) => self.relay_handed(first, &table, &mut removing).await,
                    None => self.drain(&table, &mut removing).await,
                }
            };
            from_table = relayed.is_err();
            if relayed.is_err() {
                self.backlog.failing();
            }
            self.metrics
                .lag
                .get_or_create(&table)
                .set(self.backlog.behind().as_secs_f64());
            backoff = match relayed {
                Ok(()) => Duration::ZERO,
                Err(e) => {
                    self.metrics.failures.get_or_create(&table).inc();
                    let next = (backoff * 2).clamp(Duration::from_millis(50), MAX_BACKOFF);
                    tracing::warn!(error = %format!("{e:#}"), retry_in = ?next, table = self.outbox.table, "outbox relay failed");
                    next
                }
            };
            if !backoff.is_zero() {
                tokio::select! {
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(backoff) => {}
                }
            }
        }
        // Delivered rows are deleted before the relay stops (or delivered again next time).
        let _ = removing.finish(&self.outbox).await;
    }

    /// Delivers `first` and the rows handed over after it (up to a batch), then queues
    /// them for deletion ([`Removing`]).
    async fn relay_handed(
        &self,
        first: OutboxRow,
        table: &OutboxLabel,
        removing: &mut Removing,
    ) -> anyhow::Result<()> {
        self.backlog.waiting_from(&first);
        let mut rows = vec![first];
        rows.extend(self.handed.try_iter().take(self.batch as usize - 1));
        self.backlog.taken.notify_waiters();
        self.sink.deliver(&rows).await?;
        let ids = rows.iter().map(|r| r.id);
        removing
            .delivered(&self.outbox, ids, self.batch as usize)
            .await?;
        self.count_relayed(table, rows.len());
        let last = rows.last().expect("a batch holds its first row");
        self.backlog.delivered(last, !self.handed.is_empty());
        Ok(())
    }

    fn count_relayed(&self, table: &OutboxLabel, rows: usize) {
        self.metrics
            .relayed
            .get_or_create(table)
            .inc_by(rows as u64);
    }

    /// Hands over every row of the table, batch by batch. Rows handed over in memory and
    /// not taken yet are dropped first: the table has them (rows handed over from then on
    /// may be read from the table too, and delivered twice).
    async fn drain(&self, table: &OutboxLabel, removing: &mut Removing) -> anyhow::Result<()> {
        self.handoff.missed.store(false, Ordering::Release);
        self.handed.drain();
        self.backlog.taken.notify_waiters();
        removing.finish(&self.outbox).await?;
        loop {
            let rows = self.outbox.pending(self.batch).await?;
            let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
                self.backlog.caught_up();
                return Ok(());
            };
            self.backlog.waiting_from(first);
            self.sink.deliver(&rows).await?;
            let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
            self.outbox.remove(&ids).await?;
            self.count_relayed(table, ids.len());
            // A full batch: more may wait behind it.
            let full = rows.len() as u64 == self.batch;
            self.backlog.delivered(last, full);
            if !full {
                return Ok(());
            }
        }
    }
}

/// How old the first of the delivered rows gathered for deletion may be before the next
/// delivery deletes them with its own: under light load the relay deletes about once per
/// interval instead of once per batch, each DELETE a trip to the database. Rows of an idle
/// relay wait for its next delivery or its stop; a crash before the deletion delivers
/// them again, which sinks must tolerate anyway.
const REMOVE_AFTER: Duration = Duration::from_millis(100);

/// Handed-over rows delivered and not deleted yet, and the deletion under way (it runs
/// while the next batch is delivered).
#[derive(Default)]
struct Removing {
    delivered: Vec<i64>,
    since: Option<tokio::time::Instant>,
    task: Option<tokio::task::JoinHandle<Result<(), StoreError>>>,
}

impl Removing {
    /// Adds delivered rows; once `at_least` of them or [`REMOVE_AFTER`] have gathered,
    /// starts deleting them (after the deletion before has finished).
    async fn delivered(
        &mut self,
        outbox: &SqlOutbox,
        ids: impl IntoIterator<Item = i64>,
        at_least: usize,
    ) -> anyhow::Result<()> {
        self.delivered.extend(ids);
        let since = *self.since.get_or_insert_with(tokio::time::Instant::now);
        if self.delivered.len() < at_least && since.elapsed() < REMOVE_AFTER {
            return Ok(());
        }
        self.wait().await?;
        let ids = std::mem::take(&mut self.delivered);
        self.since = None;
        let outbox = outbox.clone();
        self.task = Some(tokio::spawn(async move { outbox.remove(&ids).await }));
        Ok(())
    }

    /// Waits for the deletion under way, then deletes the rest.
    async fn finish(&mut self, outbox: &SqlOutbox) -> anyhow::Result<()> {
        self.wait().await?;
        if !self.delivered.is_empty() {
            outbox.remove(&self.delivered).await?;
            self.delivered.clear();
            self.since = None;
        }
        Ok(())
    }

    async fn wait(&mut self) -> anyhow::Result<()> {
        match self.task.take() {
            Some(task) => Ok(task.await??),
            None => Ok(()),
        }
    }
}

/// A relay running on its own task.
pub struct Running {
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stops the relay after its current batch; pending rows wait for the next start.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.stop.cancel();
        Ok(self.task.await?)
    }
}

/// Creates an outbox table; include it in the service's migrator.
pub struct Migration {
    pub table: &'static str,
    pub name: &'static str,
}

impl MigrationName for Migration {
    fn name(&self) -> &str {
        self.name
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Alias::new(self.table))
                    .if_not_exists()
                    .col(big_integer(Col::Id).primary_key())
                    .col(blob(Col::Payload))
                    .to_owned(),
            )
            .await
    }
}

#[cfg(test)]
mod tests;
