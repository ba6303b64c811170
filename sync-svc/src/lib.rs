//! sync-svc: per-user inboxes (write fanout), sync events, device cursors, and conversation
//! state (read watermarks, unread counts, mentions, the conversation list).
//!
//! # Layout
//! - [`api`]: the tonic handlers: read the caller, parse the request, call the domain.
//! - [`domain`]: fanout into inboxes with per-user `sync_seq`, pulls, acks; reads and the
//!   conversation list; in [`domain::ports`], every port it needs. Layers depend downward
//!   only: api → domain ← adapters (store, peers).
//! - [`store`]: the sea-orm adapter of [`domain::InboxStore`], with migrations, and the
//!   Redis and in-process adapters of [`domain::ReceiptBits`].
//! - [`events`]: the events sync-svc makes itself, encoded, and the webhook payloads.
//! - [`peers`]: the notify-svc client for live delivery, the group-svc client for
//!   memberships of read-fanout groups.
//! - [`keys`]: Redis key formats.
//! - [`Service`]: builds all of it from [`Config`] and serves it on a listener.

#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(unused_crate_dependencies))]

pub mod api;
pub mod domain;
pub mod events;
pub mod keys;
pub mod peers;
pub mod store;

// The program's allocator, set in main.rs.
use mimalloc as _;
use std::{sync::Arc, time::Duration};

use domain::ReceiptBits;
use imesh_kit::{
    config::{AuthConfig, GrpcConfig, RedisConfig, SqlConfig},
    grpc,
    hooks::{Hook, Signing},
    identity::Caller,
    ids::lease::{NodeBlock, NodeIds},
    outbox::{Relay, RelayMetrics, SqlOutbox, WebhookSink},
};
use imesh_protos::sync::sync_service_server::SyncServiceServer;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct Config {
    pub grpc: GrpcConfig,
    pub database: SqlConfig,
    pub redis: RedisConfig,
    /// notify-svc's gRPC address (`host:port`).
    pub notify_addr: String,
    /// group-svc's gRPC address (memberships of read-fanout groups).
    pub group_addr: String,
    /// Inbox entries older than this are dropped (hourly); 0 keeps them forever. The
    /// messages stay in message-svc's history.
    pub inbox_retention_hours: u64,
    /// How often senders hear that their receipt messages' read counts moved (one event
    /// per message per window).
    pub receipt_window_ms: u64,
    /// The app server's after-event webhook (off while its URL is empty): messages stored,
    /// edited and recalled, group and friendship changes, POSTed in batches from an outbox
    /// written with them, at least once.
    pub webhooks: imesh_kit::config::HookConfig,
    /// Events one webhook call carries at most (and 1 MiB of them: a longer batch goes as
    /// several calls).
    pub webhook_batch: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            grpc: GrpcConfig::on(([0, 0, 0, 0], 50054).into()),
            database: SqlConfig::default(),
            redis: RedisConfig::default(),
            notify_addr: "127.0.0.1:50055".into(),
            group_addr: "127.0.0.1:50052".into(),
            inbox_retention_hours: 7 * 24,
            receipt_window_ms: 1000,
            webhooks: imesh_kit::config::HookConfig::default(),
            webhook_batch: 100,
        }
    }
}

/// sync-svc, built and ready to serve.
pub struct Service {
    config: Config,
    auth: AuthConfig,
    registry: imesh_kit::metrics::Registry,
    inboxes: Arc<domain::Inboxes>,
    db: sea_orm::DatabaseConnection,
    /// The database's readers ([`imesh_kit::sql::readers`]).
    reads: sea_orm::DatabaseConnection,
    node: NodeIds,
    /// The after-event webhooks' relay, when the app server takes them.
    webhooks: Option<Relay>,
}

/// The snowflake nodes sync-svc processes lease from.
const NODE_IDS: NodeBlock = 768..=1023;

/// Appends' live deliveries that may wait for notify-svc before appends wait too
/// (`domain::Queued`): one call's, beside the call out. An append answers at once while
/// pushes keep up; past that, appends go at the pushes' pace, so a busy relay's batches
/// grow instead of splitting into more, smaller appends (with two replicas of every
/// service a bound of 64 cost about a tenth more CPU a delivery, saturated).
const LIVE_QUEUE: usize = 1;

impl Service {
    /// Connects the stores, brings the schema up to date and wires the domain.
    /// `node_id` fixes the snowflake node; `None` leases one.
    pub async fn build(
        config: Config,
        auth: &AuthConfig,
        node_id: Option<u16>,
    ) -> anyhow::Result<Self> {
        let db =
            imesh_kit::sql::connect_and_migrate::<store::sql::Migrator>(&config.database).await?;
        let reads = imesh_kit::sql::readers(&config.database, &db).await?;
        let node = NodeIds::new(&db, node_id, NODE_IDS).await?;
        let bits: Arc<dyn ReceiptBits> = match config.redis.url() {
            Some(url) => {
                let pool = imesh_kit::redis::connect(&config.redis, url).await?;
                let arena_ttl = Duration::from_secs(config.inbox_retention_hours.max(24) * 3600);
                Arc::new(store::redis::RedisBits::new(pool, arena_ttl))
            }
            None => Arc::new(store::memory::MemoryBits::default()),
        };
        let caller = Caller::new(&auth.internal_secret)?;
        let peers = grpc::Peers::new(&config.grpc)?;
        let notifier = domain::Queued::spawn(
            Arc::new(peers::NotifyNotifier::new(
                peers.channel(&config.notify_addr)?,
                caller.clone(),
            )),
            LIVE_QUEUE,
        );
        let members = peers::GroupMemberships::new(peers.channel(&config.group_addr)?, caller);
        let mut registry = imesh_kit::metrics::registry("sync-svc");
        notifier.register(&mut registry);
        let webhooks = match Hook::new("webhooks", &config.webhooks, Signing::Required)? {
            Some(hook) => Some(
                Relay::new(
                    SqlOutbox::new(db.clone(), store::WEBHOOK_TABLE).owned_by(node.leased_node()),
                    Arc::new(WebhookSink(hook)),
                    config.webhook_batch,
                )
                .observed(&RelayMetrics::register(&mut registry)),
            ),
            None => None,
        };
        let inboxes = domain::Inboxes::new(
            Arc::new(store::sql::SqlInboxStore::new(db.clone()).reading_from(reads.clone())),
            domain::Parts {
                ids: node.ids.clone(),
                notifier: Arc::new(notifier),
                members: Arc::new(members),
                bits,
                encode: events::ENCODERS,
                webhooks: webhooks.as_ref().map(Relay::waker),
            },
        );
        inboxes.register(&mut registry);
        Ok(Self {
            config,
            auth: auth.clone(),
            registry,
            inboxes: Arc::new(inboxes),
            db,
            reads,
            node,
            webhooks,
        })
    }

    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> anyhow::Result<()> {
        let keeping = self.node.keep();
        let stop = tokio_util::sync::CancellationToken::new();
        let purging = tokio::spawn(purge_hourly(
            self.inboxes.clone(),
            self.config.inbox_retention_hours,
            stop.clone(),
        ));
        let counting = tokio::spawn(flush_receipts(
            self.inboxes.clone(),
            Duration::from_millis(self.config.receipt_window_ms.max(10)),
            stop.clone(),
        ));
        let webhooks = self.webhooks.map(Relay::spawn);
        let api = api::SyncApi::new(self.inboxes);
        grpc::Server::new(&self.config.grpc)
            .internal(SyncServiceServer::new(api), &self.auth)
            .readiness(imesh_kit::sql::readiness(&self.db))
            .metrics(self.registry)
            .then_stop(async move {
                stop.cancel();
                purging.await?;
                Ok(counting.await?)
            })
            .then_stop(async move {
                match webhooks {
                    Some(relay) => relay.stop().await,
                    None => Ok(()),
                }
            })
            .then_stop(async move {
                keeping.stop().await;
                Ok(())
            })
            .then_stop(imesh_kit::sql::close(self.reads))
            .then_stop(imesh_kit::sql::close(self.db))
            .serve(listener, shutdown)
            .await
    }
}

/// Tells senders their receipt messages' new read counts once per `window` until `stop`.
async fn flush_receipts(
    inboxes: Arc<domain::Inboxes>,
    window: Duration,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut every = tokio::time::interval(window);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = every.tick() => if let Err(e) = inboxes.flush_receipts().await {
                tracing::warn!(error = %e, "sending read counts failed; next window");
            },
        }
    }
}

/// Drops inbox entries past the retention once an hour until `stop`.
async fn purge_hourly(
    inboxes: Arc<domain::Inboxes>,
    retention_hours: u64,
    stop: tokio_util::sync::CancellationToken,
) {
    if retention_hours == 0 {
        return;
    }
    let retention = std::time::Duration::from_secs(retention_hours * 3600);
    let mut every = tokio::time::interval(std::time::Duration::from_secs(3600));
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = every.tick() => match inboxes.purge(retention).await {
                Ok(0) => {}
                Ok(purged) => tracing::info!(purged, "dropped inbox entries past the retention"),
                Err(e) => tracing::warn!(error = %e, "purging old inbox entries failed; next hour"),
            },
        }
    }
}

/// The `sync-svc` program: settings from the file and environment, `migrate` to bring the
/// schema up to date and stop, otherwise serve until SIGTERM.
pub async fn run_binary() -> anyhow::Result<()> {
    imesh_kit::cli::run_with_schema::<Config, store::sql::Migrator, _, _>(
        "sync-svc",
        |settings, listener| async move {
            Service::build(settings.service, &settings.auth, settings.node_id)
                .await?
                .serve(listener, grpc::shutdown_signal())
                .await
        },
    )
    .await
}

imesh_kit::service_settings!(Config, database);
