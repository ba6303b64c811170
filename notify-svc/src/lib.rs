//! notify-svc: presence (who is online where) and routing of inbox entries to gateways.
//!
//! # Layout
//! - [`api`]: the tonic handlers (all internal: gateways and sync-svc call them).
//! - [`domain`]: routing (presence lookups grouped into one Push per gateway), presence
//!   changes told to friends, typing indicators, and offline push through a webhook as
//!   sync-svc decides (muted conversations, quiet hours, badge); its ports in
//!   [`domain::ports`].
//! - [`store`]: the presence port's in-process and Redis adapters.
//! - [`peers`]: the ports over other services (each gateway's `Push`, friend lists, group
//!   members, offline decisions) and over the company's push webhook.
//! - [`events`]: the pushed events between their wire form and the domain.
//! - [`keys`]: every Redis key.
//! - [`Service`]: builds all of it from [`Config`] and serves it on a listener.

#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(unused_crate_dependencies))]

pub mod api;
pub mod domain;
pub mod events;
pub mod keys;
pub mod peers;
pub mod store;
#[cfg(test)]
mod testing;

// The program's allocator, set in main.rs.
use mimalloc as _;
use std::{sync::Arc, time::Duration};

use imesh_kit::{
    config::{AuthConfig, GrpcConfig, RedisConfig},
    grpc,
    identity::Caller,
};
use imesh_protos::notify::notify_service_server::NotifyServiceServer;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct Config {
    pub grpc: GrpcConfig,
    /// Presence lives here when set; in process otherwise (single-process deployments only).
    pub redis: RedisConfig,
    /// How long a device stays online without a refresh from its gateway.
    pub presence_ttl_secs: u64,
    /// `one_per_platform` (a new login closes the user's other device on that platform)
    /// or `unlimited`.
    pub multi_device: domain::DevicePolicy,
    /// sync-svc, which decides offline pushes.
    pub sync_addr: String,
    pub offline_push: domain::offline::Config,
    /// group-svc, whose member lists say who sees someone typing.
    pub group_addr: String,
    /// relation-svc, whose friend lists say who hears of presence changes.
    pub relation_addr: String,
    /// Largest group with typing indicators.
    pub typing_max_members: usize,
    /// At most one typing notice per user and conversation this often.
    pub typing_interval_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            grpc: GrpcConfig::on(([0, 0, 0, 0], 50055).into()),
            redis: RedisConfig::default(),
            presence_ttl_secs: 120,
            multi_device: domain::DevicePolicy::default(),
            sync_addr: "127.0.0.1:50054".into(),
            offline_push: domain::offline::Config::default(),
            group_addr: "127.0.0.1:50052".into(),
            relation_addr: "127.0.0.1:50051".into(),
            typing_max_members: 100,
            typing_interval_ms: 2_000,
        }
    }
}

/// notify-svc, built and ready to serve.
pub struct Service {
    config: Config,
    auth: AuthConfig,
    registry: imesh_kit::metrics::Registry,
    router: Arc<domain::Router>,
    typing: domain::typing::Typing,
    watch: domain::watch::Watch,
    redis: Option<fred::prelude::Pool>,
}

impl Service {
    pub async fn build(config: Config, auth: &AuthConfig) -> anyhow::Result<Self> {
        let (presence, redis): (Arc<dyn domain::ports::Presence>, _) = match config.redis.url() {
            Some(url) => {
                let pool = imesh_kit::redis::connect(&config.redis, url).await?;
                (
                    Arc::new(store::RedisPresence::new(pool.clone())),
                    Some(pool),
                )
            }
            None => (Arc::new(store::MemoryPresence::default()), None),
        };
        let caller = Caller::new(&auth.internal_secret)?;
        let peers = grpc::Peers::new(&config.grpc)?;
        let gateways = peers::gateways::GrpcGateways::new(caller.clone(), peers.clone());
        let ttl = Duration::from_secs(config.presence_ttl_secs);
        let mut router =
            domain::Router::new(presence, Arc::new(gateways), ttl, config.multi_device);
        let push = &config.offline_push;
        if let Some(webhook) = peers::webhook::Webhook::new(push)? {
            let targets =
                peers::targets::SyncTargets::new(caller.clone(), peers.channel(&config.sync_addr)?);
            let offline = domain::offline::OfflinePush::start(
                push,
                events::decode_message,
                Arc::new(targets),
                Arc::new(webhook),
            );
            router = router.with_offline_push(offline);
        }
        let router = Arc::new(router);
        let typing = domain::typing::Typing::new(
            router.clone(),
            Arc::new(peers::groups::GrpcGroups::new(
                caller.clone(),
                peers.channel(&config.group_addr)?,
            )),
            events::encode_typing,
            config.typing_max_members,
            Duration::from_millis(config.typing_interval_ms),
        );
        let watch = domain::watch::Watch::new(
            router.clone(),
            Arc::new(peers::friends::GrpcFriends::new(
                caller,
                peers.channel(&config.relation_addr)?,
            )),
            events::encode_presence,
        );
        let mut registry = imesh_kit::metrics::registry("notify-svc");
        router.register(&mut registry);
        Ok(Self {
            config,
            auth: auth.clone(),
            registry,
            router,
            typing,
            watch,
            redis,
        })
    }

    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> anyhow::Result<()> {
        let api = api::NotifyApi::new(self.router, self.typing, self.watch);
        let mut server = grpc::Server::new(&self.config.grpc)
            .internal(NotifyServiceServer::new(api), &self.auth)
            .metrics(self.registry);
        if let Some(pool) = self.redis.clone() {
            server = server.readiness(Arc::new(move || {
                let pool = pool.clone();
                Box::pin(async move { imesh_kit::redis::ping(&pool).await })
            }));
        }
        server.serve(listener, shutdown).await
    }
}

/// The `notify-svc` program: settings from the file and environment; serves until SIGTERM.
pub async fn run_binary() -> anyhow::Result<()> {
    imesh_kit::cli::run::<Config, _, _>("notify-svc", |settings, listener| async move {
        Service::build(settings.service, &settings.auth)
            .await?
            .serve(listener, grpc::shutdown_signal())
            .await
    })
    .await
}

imesh_kit::service_settings!(Config);
