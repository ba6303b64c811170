//! Node ids without configuration: each process leases one from its service's database
//! (`node_leases`), renews it every [`RENEW_EVERY`] and releases it when it stops, so any
//! number of replicas mint distinct ids with no per-pod setting. A lease runs [`TTL`] from
//! its last renewal; its holder stops minting [`CLOCK_MARGIN`] before that, so clocks that
//! agree within the margin never let two processes mint with one node. A holder that finds
//! its node taken (it could not renew in time) claims another and mints with that.
//!
//! Each service leases from its own block of the 1,024 nodes ([`NodeBlock`]), so ids stay
//! unique across services too.

use std::{
    collections::BTreeSet,
    ops::RangeInclusive,
    sync::{
        Arc,
        atomic::{AtomicI64, AtomicU64, Ordering},
    },
    time::Duration,
};

use sea_orm::{ConnectionTrait, DatabaseConnection};
use sea_orm_migration::{prelude::*, schema::*};
use tokio_util::sync::CancellationToken;

use super::{Snowflake, unix_ms};
use crate::error::StoreError;

/// How long a lease lasts past its last renewal.
pub const TTL: Duration = Duration::from_secs(30);
/// How often the holder renews.
pub const RENEW_EVERY: Duration = Duration::from_secs(5);
/// How long before its lease ends a holder stops minting.
pub const CLOCK_MARGIN: Duration = Duration::from_secs(10);

/// The nodes one service's processes lease from.
pub type NodeBlock = RangeInclusive<u16>;

#[derive(Iden)]
enum NodeLeases {
    Table,
    NodeId,
    Holder,
    ExpiresAtMs,
}

/// The nodes some live lease holds now (`SELECT node_id …`), for a subquery.
pub(crate) fn live_nodes() -> SelectStatement {
    Query::select()
        .column(NodeLeases::NodeId)
        .from(NodeLeases::Table)
        .and_where(Expr::col(NodeLeases::ExpiresAtMs).gte(crate::ids::unix_ms()))
        .to_owned()
}

/// A node id held by this process, and the generator minting with it.
pub struct NodeLease {
    db: DatabaseConnection,
    block: NodeBlock,
    holder: String,
    valid_until_ms: Arc<AtomicI64>,
    ids: Arc<Snowflake>,
}

impl NodeLease {
    /// Claims the lowest node of `block` no live lease holds.
    pub async fn claim(db: DatabaseConnection, block: NodeBlock) -> Result<Arc<Self>, StoreError> {
        let holder = format!(
            "{}/{}/{:08x}",
            hostname(),
            std::process::id(),
            rand::random::<u32>()
        );
        let started = unix_ms();
        let node = claim_free(&db, &block, &holder).await?;
        let valid_until_ms = Arc::new(AtomicI64::new(valid_until(started)));
        let ids = Arc::new(Snowflake {
            node: AtomicU64::new(u64::from(node)),
            last: AtomicU64::new(0),
            valid_until_ms: Some(valid_until_ms.clone()),
        });
        tracing::info!(node, %holder, "node id leased");
        Ok(Arc::new(Self {
            db,
            block,
            holder,
            valid_until_ms,
            ids,
        }))
    }

    /// The generator minting with this lease's node.
    pub fn ids(&self) -> Arc<Snowflake> {
        self.ids.clone()
    }

    pub fn node(&self) -> u16 {
        self.ids.node()
    }

    /// Renews every [`RENEW_EVERY`] until `stop`, then releases the node.
    pub async fn keep(self: Arc<Self>, stop: CancellationToken) {
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(RENEW_EVERY) => {}
            }
            if let Err(e) = self.renew().await {
                tracing::warn!(error = %format!("{e:#}"), node = self.node(), "node id lease not renewed; ids stop when it lapses");
            }
        }
        if let Err(e) = self.release().await {
            tracing::warn!(error = %format!("{e:#}"), "node id lease not released; it lapses by itself");
        }
    }

    /// Extends the lease, or claims another node if this one was taken meanwhile.
    pub async fn renew(&self) -> Result<(), StoreError> {
        let started = unix_ms();
        let node = self.node();
        let extend = Query::update()
            .table(NodeLeases::Table)
            .value(NodeLeases::ExpiresAtMs, started + TTL.as_millis() as i64)
            .and_where(Expr::col(NodeLeases::NodeId).eq(i32::from(node)))
            .and_where(Expr::col(NodeLeases::Holder).eq(self.holder.as_str()))
            .to_owned();
        if self.db.execute(&extend).await?.rows_affected() == 1 {
            self.valid_until_ms
                .store(valid_until(started), Ordering::Release);
            return Ok(());
        }
        self.valid_until_ms.store(0, Ordering::Release);
        tracing::error!(
            node,
            "node id lease was taken by another process; claiming another"
        );
        let started = unix_ms();
        let node = claim_free(&self.db, &self.block, &self.holder).await?;
        self.ids.node.store(u64::from(node), Ordering::Release);
        self.valid_until_ms
            .store(valid_until(started), Ordering::Release);
        tracing::info!(node, "node id leased again");
        Ok(())
    }

    /// Gives the node up at once (ids stop); the next process may claim it.
    pub async fn release(&self) -> Result<(), StoreError> {
        self.valid_until_ms.store(0, Ordering::Release);
        let release = Query::update()
            .table(NodeLeases::Table)
            .value(NodeLeases::ExpiresAtMs, 0)
            .and_where(Expr::col(NodeLeases::NodeId).eq(i32::from(self.node())))
            .and_where(Expr::col(NodeLeases::Holder).eq(self.holder.as_str()))
            .to_owned();
        self.db.execute(&release).await?;
        Ok(())
    }
}

/// A process's id generator: a fixed node when configured, else a leased one.
pub struct NodeIds {
    pub ids: Arc<Snowflake>,
    lease: Option<Arc<NodeLease>>,
}

impl NodeIds {
    /// `fixed` (a configured `node_id`), or a node of `block` leased from `db`.
    pub async fn new(
        db: &DatabaseConnection,
        fixed: Option<u16>,
        block: NodeBlock,
    ) -> Result<Self, StoreError> {
        Ok(match fixed {
            Some(node) => Self {
                ids: Arc::new(Snowflake::new(node)),
                lease: None,
            },
            None => {
                let lease = NodeLease::claim(db.clone(), block).await?;
                Self {
                    ids: lease.ids(),
                    lease: Some(lease),
                }
            }
        })
    }

    /// The leased node, when there is a lease: the partition of a shared outbox table this
    /// process relays ([`crate::outbox::SqlOutbox::owned_by`]). `None` for a fixed node.
    pub fn leased_node(&self) -> Option<u16> {
        self.lease.as_ref().map(|lease| lease.node())
    }

    /// Renews the lease, if any, until [`Keeping::stop`] releases it.
    pub fn keep(&self) -> Keeping {
        let stop = CancellationToken::new();
        let task = self
            .lease
            .clone()
            .map(|lease| tokio::spawn(lease.keep(stop.clone())));
        Keeping { stop, task }
    }
}

/// A lease being renewed.
pub struct Keeping {
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Keeping {
    /// Stops renewing and releases the node.
    pub async fn stop(self) {
        self.stop.cancel();
        if let Some(task) = self.task {
            let _ = task.await;
        }
    }
}

fn valid_until(renewal_started_ms: i64) -> i64 {
    renewal_started_ms + (TTL - CLOCK_MARGIN).as_millis() as i64
}

/// Takes over the lowest node of `block` whose lease lapsed or that was never leased.
async fn claim_free(
    db: &DatabaseConnection,
    block: &NodeBlock,
    holder: &str,
) -> Result<u16, StoreError> {
    let now = unix_ms();
    let expires = now + TTL.as_millis() as i64;
    let live = Query::select()
        .column(NodeLeases::NodeId)
        .from(NodeLeases::Table)
        .and_where(Expr::col(NodeLeases::ExpiresAtMs).gte(now))
        .to_owned();
    let held: BTreeSet<i32> = db
        .query_all(&live)
        .await?
        .iter()
        .map(|row| row.try_get::<i32>("", "node_id"))
        .collect::<Result<_, _>>()?;
    for node in block.clone().filter(|n| !held.contains(&i32::from(*n))) {
        let take_over = Query::update()
            .table(NodeLeases::Table)
            .values([
                (NodeLeases::Holder, holder.into()),
                (NodeLeases::ExpiresAtMs, expires.into()),
            ])
            .and_where(Expr::col(NodeLeases::NodeId).eq(i32::from(node)))
            .and_where(Expr::col(NodeLeases::ExpiresAtMs).lt(now))
            .to_owned();
        if db.execute(&take_over).await?.rows_affected() == 1 {
            return Ok(node);
        }
        let first = Query::insert()
            .into_table(NodeLeases::Table)
            .columns([
                NodeLeases::NodeId,
                NodeLeases::Holder,
                NodeLeases::ExpiresAtMs,
            ])
            .values_panic([i32::from(node).into(), holder.into(), expires.into()])
            .to_owned();
        match db.execute(&first).await.map_err(StoreError::from) {
            Ok(_) => return Ok(node),
            // Another process took it between the two statements: try the next one.
            Err(StoreError::Conflict(_)) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(StoreError::Unavailable(anyhow::anyhow!(
        "every node id of {}..={} is leased by a live process",
        block.start(),
        block.end()
    )))
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Creates `node_leases`; include it in the migrator of every service that mints ids.
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261205_000001_node_leases"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(NodeLeases::Table)
                    .if_not_exists()
                    .col(integer(NodeLeases::NodeId).primary_key())
                    .col(string_len(NodeLeases::Holder, 191))
                    .col(big_integer(NodeLeases::ExpiresAtMs))
                    .to_owned(),
            )
            .await
    }
}

#[cfg(test)]
mod tests;
