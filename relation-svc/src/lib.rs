//! relation-svc: accounts, credentials and tokens, friendships, friend requests, the
//! blacklist, and the relation check every direct send goes through.
//!
//! # Layout
//! - [`api`]: the tonic handlers: read the caller, parse the request, call the domain.
//! - [`domain`]: accounts (argon2, tokens, the admin path), friendships and requests (pure
//!   decisions in [`domain::plan`]), and the cached relation check.
//!   Every port it needs is in [`domain::ports`].
//! - [`store`]: the adapters: sea-orm for accounts and relations, Redis and in-process for
//!   the shared relation cache and the login throttle's counters.
//! - [`peers`]: notify-svc (closing a disabled user's sessions) and group-svc (nickname
//!   changes, through an outbox relay of their own).
//! - [`events`]: the outbox payloads: relation changes as sync events, nickname changes.
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

// The program's allocator, set in main.rs.
use mimalloc as _;
use std::{sync::Arc, time::Duration};

use imesh_kit::{
    config::{AuthConfig, GrpcConfig, RedisConfig, SqlConfig},
    grpc,
    identity::Caller,
    ids::{
        Snowflake,
        lease::{NodeBlock, NodeIds},
    },
    outbox::{Relay, RelayMetrics, SqlOutbox, SyncSink},
    token::Tokens,
};
use imesh_protos::relation::relation_service_server::RelationServiceServer;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;

use crate::{
    domain::{Accounts, Attempts, Checker, EdgeCache, Friends, LocalCache, throttle::Throttle},
    store::{
        memory::{MemoryAttempts, MemoryEdgeCache},
        redis::{RedisAttempts, RedisEdgeCache},
        sql::{SqlFriendStore, SqlUserStore},
    },
};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct Config {
    pub grpc: GrpcConfig,
    pub database: SqlConfig,
    /// Empty: the in-process relation cache.
    pub redis: RedisConfig,
    /// sync-svc's gRPC address: relation events go to users' inboxes.
    pub sync_addr: String,
    /// group-svc's gRPC address: nickname changes reach members' copies.
    pub group_addr: String,
    /// notify-svc's gRPC address: a disabled user's sessions are closed.
    pub notify_addr: String,
    /// Lifetime of the tokens Login issues.
    pub token_ttl_secs: u64,
    /// How long a friend request stays answerable.
    pub request_ttl_days: u32,
    /// Lifetime of a user's row set in the shared cache.
    pub cache_ttl_secs: u64,
    /// Lifetime of an answer in the per-process cache (other replicas' writes show after it).
    pub local_cache_ttl_ms: u64,
    pub local_cache_max_users: usize,
    /// Outbox rows handed to sync-svc per call.
    pub outbox_batch: u64,
    /// Login and registration throttling.
    pub login: domain::throttle::Limits,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            grpc: GrpcConfig::on(([0, 0, 0, 0], 50051).into()),
            database: SqlConfig::default(),
            redis: RedisConfig::default(),
            sync_addr: "127.0.0.1:50054".into(),
            group_addr: "127.0.0.1:50052".into(),
            notify_addr: "127.0.0.1:50055".into(),
            token_ttl_secs: 7 * 24 * 3600,
            request_ttl_days: 30,
            cache_ttl_secs: 600,
            local_cache_ttl_ms: 1_000,
            local_cache_max_users: 100_000,
            outbox_batch: 256,
            login: domain::throttle::Limits::default(),
        }
    }
}

/// The handlers over `db` and the `shared` relation cache, and the relays of their events
/// (relation events to sync-svc, nickname changes to group-svc), each of the outbox rows of
/// `partition`, the leased node, when there is one (see [`SqlOutbox::owned_by`]).
pub fn wire(
    config: &Config,
    auth: &AuthConfig,
    (ids, partition): (Arc<Snowflake>, Option<u16>),
    db: sea_orm::DatabaseConnection,
    (shared, attempts): (Arc<dyn EdgeCache>, Arc<dyn Attempts>),
) -> anyhow::Result<(api::RelationApi, [Relay; 2])> {
    let caller = Caller::new(&auth.internal_secret)?;
    let peers = grpc::Peers::new(&config.grpc)?;
    let relay = Relay::new(
        SqlOutbox::new(db.clone(), store::OUTBOX_TABLE).owned_by(partition),
        Arc::new(SyncSink::new(
            peers.keyed(&config.sync_addr)?,
            caller.clone(),
        )),
        config.outbox_batch,
    );
    let renames = Relay::new(
        SqlOutbox::new(db.clone(), events::RENAME_OUTBOX_TABLE).owned_by(partition),
        Arc::new(peers::groups::GroupRenameSink::new(
            peers.channel(&config.group_addr)?,
            caller,
        )),
        config.outbox_batch,
    );
    let users = Arc::new(SqlUserStore::new(db.clone(), ids.clone(), renames.waker()));
    let friend_store = Arc::new(SqlFriendStore::new(
        db,
        ids.clone(),
        events::encode,
        relay.waker(),
    ));
    let local = LocalCache::new(
        Duration::from_millis(config.local_cache_ttl_ms),
        config.local_cache_max_users,
    );
    let checker = Arc::new(Checker::new(
        local,
        shared,
        users.clone(),
        friend_store.clone(),
    ));
    let tokens = Tokens::new(auth, Duration::from_secs(config.token_ttl_secs))?;
    let sessions = Arc::new(peers::notify::NotifySessions::new(
        peers.channel(&config.notify_addr)?,
        Caller::new(&auth.internal_secret)?,
    ));
    let accounts = Arc::new(Accounts::new(
        users,
        ids.clone(),
        tokens,
        checker.clone(),
        sessions,
        Throttle::new(attempts, config.login.clone()),
    ));
    let request_ttl_ms = i64::from(config.request_ttl_days) * 24 * 3600 * 1000;
    let friends = Arc::new(Friends::new(
        friend_store,
        ids,
        checker.clone(),
        request_ttl_ms,
    ));
    Ok((
        api::RelationApi::new(accounts, friends, checker),
        [relay, renames],
    ))
}

/// relation-svc, built and ready to serve.
pub struct Service {
    config: Config,
    auth: AuthConfig,
    api: api::RelationApi,
    /// Relation events to sync-svc, nickname changes to group-svc.
    relays: [Relay; 2],
    registry: imesh_kit::metrics::Registry,
    db: sea_orm::DatabaseConnection,
    node: NodeIds,
}

/// The snowflake nodes relation-svc processes lease from.
const NODE_IDS: NodeBlock = 0..=255;

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
        let node = NodeIds::new(&db, node_id, NODE_IDS).await?;
        let cache_ttl = Duration::from_secs(config.cache_ttl_secs);
        let shared: (Arc<dyn EdgeCache>, Arc<dyn Attempts>) = match config.redis.url() {
            Some(url) => {
                let pool = imesh_kit::redis::connect(&config.redis, url).await?;
                (
                    Arc::new(RedisEdgeCache::new(pool.clone(), cache_ttl)),
                    Arc::new(RedisAttempts::new(pool)),
                )
            }
            None => (
                Arc::new(MemoryEdgeCache::new(cache_ttl)),
                Arc::new(MemoryAttempts::default()),
            ),
        };
        let (api, relays) = wire(
            &config,
            auth,
            (node.ids.clone(), node.leased_node()),
            db.clone(),
            shared,
        )?;
        let mut registry = imesh_kit::metrics::registry("relation-svc");
        let observed = RelayMetrics::register(&mut registry);
        Ok(Self {
            api,
            config,
            auth: auth.clone(),
            relays: relays.map(|relay| relay.observed(&observed)),
            registry,
            db,
            node,
        })
    }

    /// Serves gRPC and runs the outbox relays until `shutdown`; they stop after the last
    /// in-flight request has drained.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> anyhow::Result<()> {
        let keeping = self.node.keep();
        let [events, renames] = self.relays;
        let (events, renames) = (events.spawn(), renames.spawn());
        grpc::Server::new(&self.config.grpc)
            .internal(RelationServiceServer::new(self.api), &self.auth)
            .readiness(imesh_kit::sql::readiness(&self.db))
            .metrics(self.registry)
            .then_stop(events.stop())
            .then_stop(renames.stop())
            .then_stop(async move {
                keeping.stop().await;
                Ok(())
            })
            .then_stop(imesh_kit::sql::close(self.db))
            .serve(listener, shutdown)
            .await
    }
}

/// The `relation-svc` program: settings from the file and environment, `migrate` to bring the
/// schema up to date and stop, otherwise serve until SIGTERM.
pub async fn run_binary() -> anyhow::Result<()> {
    imesh_kit::cli::run_with_schema::<Config, store::sql::Migrator, _, _>(
        "relation-svc",
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
