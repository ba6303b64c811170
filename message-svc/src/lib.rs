//! message-svc: send and store messages, allocate conversation seqs, relay events to sync-svc.
//!
//! # Layout
//! - [`api`]: the tonic handlers: read the caller, parse the request, call the domain.
//! - [`domain`]: the send path (validation, rate limits, the permission gate, seq and id
//!   allocation, notices), history and recall; in [`domain::ports`], every port it needs.
//!   Layers depend downward only: api → domain ← adapters (store, peers).
//! - [`store`]: the sea-orm adapter of [`domain::MessageStore`], with migrations.
//! - [`events`]: the outbox payload and the relay sink into sync-svc.
//! - [`peers`]: the relation-svc and group-svc clients the gate asks, and the app server's
//!   before-send hook over HTTP(S).
//! - [`keys`]: counter key formats.
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
use std::sync::Arc;

use imesh_kit::{
    config::{AuthConfig, GrpcConfig, RedisConfig, SqlConfig},
    grpc,
    identity::Caller,
    ids::lease::{NodeBlock, NodeIds},
    outbox::{Relay, RelayMetrics, SqlOutbox},
    seq::{Counters, MemoryCounters, RedisCounters, SeqAllocator, SqlCeilings},
};
use imesh_protos::message::message_service_server::MessageServiceServer;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct Config {
    pub grpc: GrpcConfig,
    pub database: SqlConfig,
    pub redis: RedisConfig,
    /// relation-svc's gRPC address (`host:port`).
    pub relation_addr: String,
    /// group-svc's gRPC address (CheckSend, MemberIds).
    pub group_addr: String,
    /// sync-svc's gRPC address.
    pub sync_addr: String,
    pub max_content_bytes: usize,
    /// Who may message whom directly: `anyone` (not blocked) or `friends_only`.
    pub direct_policy: domain::DirectPolicy,
    /// How long senders may recall their own messages.
    pub recall_window_secs: u64,
    /// How long a sender may edit their own message.
    pub edit_window_secs: u64,
    /// How far ahead each persisted seq ceiling reaches.
    pub seq_step: i64,
    /// Outbox rows handed to sync-svc per call.
    pub outbox_batch: u64,
    pub rate_limits: RateLimitConfig,
    /// Groups with more members use read fanout (super groups always do).
    pub write_fanout_max_members: u32,
    /// Largest group whose messages may ask for read receipts (larger ones show read
    /// watermarks only).
    pub receipt_max_members: u32,
    /// Sends are refused with RESOURCE_EXHAUSTED while the outbox relay has been behind
    /// for longer than this: past capacity, delivery latency stays bounded.
    pub max_relay_lag_ms: u64,
    /// The app server's before-send hook (off while its URL is empty).
    pub before_send: imesh_kit::config::HookConfig,
    /// When the hook cannot be asked (timeout, error, a bad answer): store the message
    /// anyway (true), or refuse the send with UNAVAILABLE (false).
    pub before_send_fail_open: bool,
    /// Groups with more members hear of reactions as a message's counts, at most once per
    /// `reaction_flush_ms`, instead of one event per reaction.
    pub reaction_coalesce_members: usize,
    pub reaction_flush_ms: u64,
    pub files: FilesConfig,
}

/// Uploads: where their bytes are kept, and the rules of [`domain::FileRules`]
/// (`files.image.max_bytes`, `files.unreferenced_ttl_secs`, …).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct FilesConfig {
    pub store: store::blobs::Backend,
    pub local: store::blobs::LocalConfig,
    pub s3: store::blobs::S3Config,
    /// How often objects no message references are looked for.
    pub sweep_interval_secs: u64,
    #[serde(flatten)]
    pub rules: domain::FileRules,
}

impl Default for FilesConfig {
    fn default() -> Self {
        Self {
            store: Default::default(),
            local: Default::default(),
            s3: Default::default(),
            sweep_interval_secs: 600,
            rules: Default::default(),
        }
    }
}

impl FilesConfig {
    /// The configured object store, `None` when it is off.
    pub fn blobs(&self, auth: &AuthConfig) -> anyhow::Result<Option<Arc<dyn domain::Blobs>>> {
        use store::blobs::{Backend, LocalBlobs, S3Blobs};
        Ok(match self.store {
            Backend::Local => Some(Arc::new(LocalBlobs::new(
                &self.local,
                imesh_kit::files::LinkSigner::new(&auth.internal_secret),
            )?)),
            Backend::S3 => Some(Arc::new(S3Blobs::new(&self.s3)?)),
            Backend::Off => None,
        })
    }
}

/// Sends allowed per second, and upload tickets a minute, on each replica; 0 turns a
/// limit off.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct RateLimitConfig {
    pub user_per_sec: u32,
    pub group_per_sec: u32,
    /// Upload tickets (`CreateUpload`) one user may ask for a minute.
    pub upload_tickets_per_min: u32,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        Self {
            user_per_sec: 20,
            group_per_sec: 40,
            upload_tickets_per_min: 60,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            grpc: GrpcConfig::on(([0, 0, 0, 0], 50053).into()),
            database: SqlConfig::default(),
            redis: RedisConfig::default(),
            relation_addr: "127.0.0.1:50051".into(),
            group_addr: "127.0.0.1:50052".into(),
            sync_addr: "127.0.0.1:50054".into(),
            max_content_bytes: 12 * 1024,
            direct_policy: domain::DirectPolicy::Anyone,
            recall_window_secs: 120,
            edit_window_secs: 24 * 3600,
            seq_step: 1000,
            outbox_batch: 256,
            rate_limits: RateLimitConfig::default(),
            write_fanout_max_members: 2000,
            receipt_max_members: 2000,
            max_relay_lag_ms: 2_000,
            before_send: imesh_kit::config::HookConfig::default(),
            before_send_fail_open: true,
            reaction_coalesce_members: 100,
            reaction_flush_ms: 1_000,
            files: FilesConfig::default(),
        }
    }
}

/// message-svc, built and ready to serve.
pub struct Service {
    config: Config,
    auth: AuthConfig,
    messages: Arc<domain::Messages>,
    relay: Relay,
    registry: imesh_kit::metrics::Registry,
    db: sea_orm::DatabaseConnection,
    /// The database's readers ([`imesh_kit::sql::readers`]).
    reads: sea_orm::DatabaseConnection,
    node: NodeIds,
}

/// The snowflake nodes message-svc processes lease from.
const NODE_IDS: NodeBlock = 512..=767;

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
        let counters: Arc<dyn Counters> = match config.redis.url() {
            Some(url) => Arc::new(RedisCounters::new(
                imesh_kit::redis::connect(&config.redis, url).await?,
            )),
            None => Arc::new(MemoryCounters::default()),
        };
        let seqs = SeqAllocator::new(
            counters,
            Arc::new(SqlCeilings::new(db.clone())),
            config.seq_step,
        );
        let caller = Caller::new(&auth.internal_secret)?;
        let peers = grpc::Peers::new(&config.grpc)?;
        let sink =
            imesh_kit::outbox::SyncSink::new(peers.keyed(&config.sync_addr)?, caller.clone());
        let mut registry = imesh_kit::metrics::registry("message-svc");
        seqs.register(&mut registry);
        let relay = Relay::new(
            SqlOutbox::new(db.clone(), store::OUTBOX_TABLE).owned_by(node.leased_node()),
            Arc::new(sink),
            config.outbox_batch,
        )
        .observed(&RelayMetrics::register(&mut registry));
        let groups = peers::GroupServiceGate::new(
            peers.channel(&config.group_addr)?,
            caller.clone(),
            config.write_fanout_max_members,
        );
        let directory =
            peers::RelationDirectory::new(peers.channel(&config.relation_addr)?, caller);
        let before_send = imesh_kit::hooks::Hook::new(
            "before_send",
            &config.before_send,
            imesh_kit::hooks::Signing::Required,
        )?
        .map(|hook| domain::BeforeSendHook {
            hook: Arc::new(peers::hooks::AppServerCheck(hook)),
            fail_open: config.before_send_fail_open,
        });
        let store = Arc::new(
            store::sql::SqlMessageStore::handing_off(db.clone(), relay.handoff())
                .reading_from(reads.clone()),
        );
        let files = domain::Files {
            store: store.clone(),
            blobs: config.files.blobs(auth)?,
            rules: config.files.rules.clone(),
        };
        let messages = domain::Messages::new(
            store,
            domain::Peers {
                relations: Arc::new(directory),
                groups: Arc::new(groups),
                before_send,
            },
            domain::Parts {
                seqs: Arc::new(seqs),
                ids: node.ids.clone(),
                encode: domain::Encoders {
                    message: events::encode_fanout,
                    recall: events::encode_recall,
                    edit: events::encode_edit,
                    pin: events::encode_pin,
                    hidden: events::encode_hidden,
                    reaction: events::encode_reaction,
                    reaction_counts: events::encode_reaction_counts,
                },
                relay: relay.waker(),
                backlog: relay.backlog(),
                limits: domain::Limits {
                    max_content_bytes: config.max_content_bytes,
                    direct_policy: config.direct_policy,
                    recall_window_ms: config.recall_window_secs as i64 * 1000,
                    edit_window_ms: config.edit_window_secs as i64 * 1000,
                    receipt_max_members: config.receipt_max_members,
                    max_relay_lag: std::time::Duration::from_millis(config.max_relay_lag_ms),
                    reaction_coalesce_members: config.reaction_coalesce_members,
                },
                rates: domain::RateLimits::new(
                    config.rate_limits.user_per_sec,
                    config.rate_limits.group_per_sec,
                )
                .with_tickets(config.rate_limits.upload_tickets_per_min),
                files,
            },
        );
        Ok(Self {
            config,
            auth: auth.clone(),
            messages: Arc::new(messages),
            relay,
            registry,
            db,
            reads,
            node,
        })
    }

    /// Serves gRPC and runs the outbox relay until `shutdown`; the relay stops after the
    /// last in-flight request has drained.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> anyhow::Result<()> {
        let keeping = self.node.keep();
        let relay = self.relay.spawn();
        let flushing = tokio::spawn(flush_reactions(
            self.messages.clone(),
            std::time::Duration::from_millis(self.config.reaction_flush_ms.max(1)),
        ));
        let sweeping = tokio::spawn(sweep_files(
            self.messages.clone(),
            std::time::Duration::from_secs(self.config.files.sweep_interval_secs.max(1)),
        ));
        let api = api::MessageApi::new(self.messages);
        grpc::Server::new(&self.config.grpc)
            .internal(MessageServiceServer::new(api), &self.auth)
            .readiness(imesh_kit::sql::readiness(&self.db))
            .metrics(self.registry)
            .then_stop(async move {
                flushing.abort();
                sweeping.abort();
                Ok(())
            })
            .then_stop(relay.stop())
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

/// Tells large groups of their messages' reaction counts every `every`, until aborted.
async fn flush_reactions(messages: Arc<domain::Messages>, every: std::time::Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if let Err(e) = messages.flush_reactions().await {
            tracing::warn!(error = %e, "flushing reaction counts failed; trying again next tick");
        }
    }
}

/// Deletes the objects no message references every `every`, until aborted.
async fn sweep_files(messages: Arc<domain::Messages>, every: std::time::Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match messages.sweep_files().await {
            Ok(0) => {}
            Ok(deleted) => tracing::info!(deleted, "deleted objects no message references"),
            Err(e) => {
                tracing::warn!(error = %e, "sweeping unreferenced objects failed; trying again next tick")
            }
        }
    }
}

/// The `message-svc` program: settings from the file and environment, `migrate` to bring the
/// schema up to date and stop, otherwise serve until SIGTERM.
pub async fn run_binary() -> anyhow::Result<()> {
    imesh_kit::cli::run_with_schema::<Config, store::sql::Migrator, _, _>(
        "message-svc",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_settings_read_as_documented() {
        let dir = imesh_kit::testing::scratch_dir("settings");
        let file = dir.join("message.toml");
        let settings = r#"
            [files]
            store = "s3"
            unreferenced_ttl_secs = 60
            [files.image]
            max_bytes = 5
            mime_types = ["image/png"]
            [files.s3]
            bucket = "photos"
        "#;
        std::fs::write(&file, settings).unwrap();
        let config: Config = imesh_kit::config::load(Some(&file)).unwrap();
        let files = config.files;
        assert_eq!(files.store, store::blobs::Backend::S3);
        assert_eq!(files.s3.bucket, "photos");
        assert_eq!(files.rules.unreferenced_ttl_secs, 60);
        assert_eq!(
            files.rules.image,
            domain::KindLimit {
                max_bytes: 5,
                mime_types: vec!["image/png".into()]
            }
        );
        assert_eq!(files.rules.video, domain::FileRules::default().video);
        assert_eq!(files.sweep_interval_secs, 600);
    }
}
