//! The transactional outbox (seed 001's "local message table"). A service inserts events
//! with [`insert`] inside the same SQL transaction as the change they describe; one
//! [`Relay`] per process hands them, oldest first and in batches, to a [`Sink`] (usually
//! sync-svc over gRPC) and deletes them once the sink acknowledged. Failures back off
//! exponentially and retry: delivery is at least once, so sinks MUST be idempotent.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};
use sea_orm::{ConnectionTrait, DatabaseConnection};
use sea_orm_migration::{prelude::*, schema::*};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use tokio::sync::Notify;

use crate::error::StoreError;

mod sync_sink;
pub use sync_sink::SyncSink;

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

/// Inserts `rows` into `table` on `conn` (pass the open transaction).
pub async fn insert(
    conn: &impl ConnectionTrait,
    table: &str,
    rows: &[OutboxRow],
) -> Result<(), StoreError> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut stmt = Query::insert();
    stmt.into_table(Alias::new(table))
        .columns([Col::Id, Col::Payload]);
    for row in rows {
        stmt.values_panic([row.id.into(), row.payload.clone().into()]);
    }
    conn.execute(&stmt).await?;
    Ok(())
}

/// Reads and acknowledges the rows of one outbox table.
#[derive(Clone)]
pub struct SqlOutbox {
    db: DatabaseConnection,
    table: &'static str,
}

impl SqlOutbox {
    pub fn new(db: DatabaseConnection, table: &'static str) -> Self {
        Self { db, table }
    }

    /// The oldest pending rows, at most `limit`.
    pub async fn pending(&self, limit: u64) -> Result<Vec<OutboxRow>, StoreError> {
        let stmt = Query::select()
            .columns([Col::Id, Col::Payload])
            .from(Alias::new(self.table))
            .order_by(Col::Id, Order::Asc)
            .limit(limit)
            .to_owned();
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
    batch: u64,
    metrics: RelayMetrics,
    backlog: Backlog,
}

/// How far behind a relay is: since when it has had rows waiting that it has not caught
/// up with. Writers read it to refuse new work before the backlog grows without bound.
#[derive(Clone, Default)]
pub struct Backlog {
    /// Unix ms since the relay has been behind; 0 while it is caught up.
    behind_since_ms: Arc<AtomicI64>,
}

impl Backlog {
    /// How long the relay has been behind (zero while it keeps up).
    pub fn behind(&self) -> Duration {
        match self.behind_since_ms.load(Ordering::Relaxed) {
            0 => Duration::ZERO,
            since => Duration::from_millis(Ord::max(crate::ids::unix_ms() - since, 0) as u64),
        }
    }

    /// Marks the relay behind since `unix_ms`, unless it already was.
    pub fn behind_since(&self, unix_ms: i64) {
        let _ = self.behind_since_ms.compare_exchange(
            0,
            Ord::max(unix_ms, 1),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    fn falling_behind(&self) {
        self.behind_since(crate::ids::unix_ms());
    }

    fn caught_up(&self) {
        self.behind_since_ms.store(0, Ordering::Relaxed);
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
            "Time since the outbox was last found empty (0 while the relay keeps up)",
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
        Self {
            outbox,
            sink,
            wake: Arc::new(Notify::new()),
            batch,
            metrics: RelayMetrics::default(),
            backlog: Backlog::default(),
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

    /// Runs the relay on its own task until [`Running::stop`].
    pub fn spawn(self) -> Running {
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(self.run(stop.clone().cancelled_owned()));
        Running { stop, task }
    }

    /// Relays until `shutdown` completes (rows still pending stay for the next start).
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut backoff = Duration::ZERO;
        let table = OutboxLabel {
            table: self.outbox.table,
        };
        let mut caught_up = std::time::Instant::now();
        loop {
            let delay = if backoff.is_zero() {
                IDLE_POLL
            } else {
                backoff
            };
            tokio::select! {
                () = &mut shutdown => return,
                () = self.wake.notified(), if backoff.is_zero() => {}
                () = tokio::time::sleep(delay) => {}
            }
            backoff = match self.drain(&table).await {
                Ok(()) => {
                    caught_up = std::time::Instant::now();
                    self.metrics.lag.get_or_create(&table).set(0.0);
                    Duration::ZERO
                }
                Err(e) => {
                    self.backlog.falling_behind();
                    self.metrics.failures.get_or_create(&table).inc();
                    self.metrics
                        .lag
                        .get_or_create(&table)
                        .set(caught_up.elapsed().as_secs_f64());
                    let next = (backoff * 2).clamp(Duration::from_millis(50), MAX_BACKOFF);
                    tracing::warn!(error = %format!("{e:#}"), retry_in = ?next, table = self.outbox.table, "outbox relay failed");
                    next
                }
            };
        }
    }

    /// Hands over every pending row, batch by batch.
    async fn drain(&self, table: &OutboxLabel) -> anyhow::Result<()> {
        loop {
            let rows = self.outbox.pending(self.batch).await?;
            if rows.is_empty() {
                self.backlog.caught_up();
                return Ok(());
            }
            if rows.len() as u64 == self.batch {
                // A full batch: more may wait behind it.
                self.backlog.falling_behind();
            }
            self.sink.deliver(&rows).await?;
            let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
            self.outbox.remove(&ids).await?;
            self.metrics
                .relayed
                .get_or_create(table)
                .inc_by(ids.len() as u64);
            if (rows.len() as u64) < self.batch {
                self.backlog.caught_up();
                return Ok(());
            }
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
