//! group-svc: groups, members, roles and permission bits, mute, join flows, and the send
//! gate every group message passes.
//!
//! # Layout
//! - [`api`]: the tonic handlers: read the caller, parse the request, call the domain.
//! - [`domain`]: the model, the rules (pure decisions under a lock on the group), the
//!   operations, the cached send gate, and large groups' rosters.
//!   Every port it needs is in [`domain::ports`].
//! - [`store`]: the adapters: sea-orm for groups and members, with migrations; Redis (with
//!   pub/sub invalidation) or in-process for the shared group cache and large groups'
//!   rosters (bucketed sorted sets).
//! - [`events`]: group changes as sync events, relayed to sync-svc through the outbox.
//! - [`peers`]: message-svc, for the conversation seq a joiner's history starts after and
//!   the timeline notices group changes leave in the conversation; relation-svc, for
//!   joiners' nicknames.
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
};
use imesh_protos::group::group_service_server::GroupServiceServer;
use prometheus_client::metrics::counter::Counter;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;

use crate::{
    domain::{
        Gate, GroupCache, Groups, Nicknames, SeqSource, ports::Rosters, recount, roster::Roster,
    },
    store::{
        memory::{MemoryGroupCache, MemoryRosters},
        redis::{RedisGroupCache, RedisRosters},
    },
};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct Config {
    pub grpc: GrpcConfig,
    pub database: SqlConfig,
    /// Empty: the in-process group cache.
    pub redis: RedisConfig,
    /// Lifetime of entries in the shared group cache.
    pub cache_ttl_secs: u64,
    /// message-svc's gRPC address (join_seq of new members).
    pub message_addr: String,
    /// relation-svc's gRPC address (joiners' nicknames).
    pub relation_addr: String,
    /// sync-svc's gRPC address: group events go to members' inboxes.
    pub sync_addr: String,
    /// Lifetime of a cached send decision's inputs (seed 000: 1–3 s).
    pub gate_ttl_ms: u64,
    pub gate_max_groups: usize,
    pub outbox_batch: u64,
    /// How often every group's member_count is recounted and corrected (0: never).
    pub recount_interval_secs: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            grpc: GrpcConfig::on(([0, 0, 0, 0], 50052).into()),
            database: SqlConfig::default(),
            redis: RedisConfig::default(),
            cache_ttl_secs: 300,
            recount_interval_secs: 3_600,
            message_addr: "127.0.0.1:50053".into(),
            relation_addr: "127.0.0.1:50051".into(),
            sync_addr: "127.0.0.1:50054".into(),
            gate_ttl_ms: 2_000,
            gate_max_groups: 100_000,
            outbox_batch: 256,
        }
    }
}

/// The handlers over `db` with `seqs` for join_seq, and the relay of their events (of the
/// outbox rows of `partition`, the leased node, when there is one: see
/// [`SqlOutbox::owned_by`]).
pub fn wire(
    config: &Config,
    auth: &AuthConfig,
    (ids, partition): (Arc<Snowflake>, Option<u16>),
    db: sea_orm::DatabaseConnection,
    (seqs, names): (Arc<dyn SeqSource>, Arc<dyn Nicknames>),
    (shared, rosters): (Arc<dyn GroupCache>, Arc<dyn Rosters>),
) -> anyhow::Result<(api::GroupApi, Relay)> {
    let caller = Caller::new(&auth.internal_secret)?;
    let peers = grpc::Peers::new(&config.grpc)?;
    let forgets = Arc::new(std::sync::OnceLock::new());
    let relay = Relay::new(
        SqlOutbox::new(db.clone(), store::OUTBOX_TABLE).owned_by(partition),
        Arc::new(peers::notices::TimelineSink::new(
            SyncSink::new(peers.keyed(&config.sync_addr)?, caller.clone()),
            peers.keyed(&config.message_addr)?,
            caller,
            forgets.clone(),
        )),
        config.outbox_batch,
    );
    let store = Arc::new(store::sql::SqlGroupStore::new(
        db,
        ids.clone(),
        events::encode,
        relay.waker(),
    ));
    let gate = Arc::new(Gate::new(
        store.clone(),
        shared,
        Duration::from_millis(config.gate_ttl_ms),
        config.gate_max_groups,
    ));
    let _ = forgets.set(gate.clone());
    let roster = Roster::new(store.clone(), rosters);
    let groups = Arc::new(Groups::new(
        store,
        ids,
        seqs,
        names,
        (gate.clone(), roster.clone()),
    ));
    Ok((api::GroupApi::new(groups, gate, roster), relay))
}

/// The shared cache the configuration names, and the Redis URL its invalidations are
/// broadcast on (none in process).
async fn shared_cache(config: &Config) -> anyhow::Result<(SharedCaches, Option<String>)> {
    let ttl = Duration::from_secs(config.cache_ttl_secs);
    Ok(match config.redis.url() {
        Some(url) => {
            let pool = imesh_kit::redis::connect(&config.redis, url).await?;
            (
                (
                    Arc::new(RedisGroupCache::new(pool.clone(), ttl)),
                    Arc::new(RedisRosters::new(pool)),
                ),
                Some(url.to_owned()),
            )
        }
        None => (
            (
                Arc::new(MemoryGroupCache::new(ttl)),
                Arc::new(MemoryRosters::default()),
            ),
            None,
        ),
    })
}

/// The shared group cache and the rosters of large groups.
type SharedCaches = (Arc<dyn GroupCache>, Arc<dyn Rosters>);

/// group-svc, built and ready to serve.
pub struct Service {
    config: Config,
    auth: AuthConfig,
    api: api::GroupApi,
    relay: Relay,
    registry: imesh_kit::metrics::Registry,
    db: sea_orm::DatabaseConnection,
    /// Applies other replicas' invalidations (Redis only).
    invalidations: Option<tokio::task::JoinHandle<()>>,
    corrected: Counter,
    node: NodeIds,
}

/// The snowflake nodes group-svc processes lease from.
const NODE_IDS: NodeBlock = 256..=511;

impl Service {
    /// Connects the database, brings its schema up to date and wires the domain.
    /// `node_id` fixes the snowflake node; `None` leases one.
    pub async fn build(
        config: Config,
        auth: &AuthConfig,
        node_id: Option<u16>,
    ) -> anyhow::Result<Self> {
        let db =
            imesh_kit::sql::connect_and_migrate::<store::sql::Migrator>(&config.database).await?;
        let node = NodeIds::new(&db, node_id, NODE_IDS).await?;
        let caller = Caller::new(&auth.internal_secret)?;
        let peers = grpc::Peers::new(&config.grpc)?;
        let seqs = Arc::new(peers::MessageSeqs::new(
            peers.channel(&config.message_addr)?,
            caller.clone(),
        ));
        let names = Arc::new(peers::RelationNames::new(
            peers.channel(&config.relation_addr)?,
            caller,
        ));
        let (shared, redis_url) = shared_cache(&config).await?;
        let (api, relay) = wire(
            &config,
            auth,
            (node.ids.clone(), node.leased_node()),
            db.clone(),
            (seqs, names),
            shared,
        )?;
        let mut registry = imesh_kit::metrics::registry("group-svc");
        api.gate().register(&mut registry);
        api.roster().register(&mut registry);
        let corrected = Counter::default();
        registry.register(
            "group_member_counts_corrected",
            "Groups whose stored member_count the recount sweep corrected",
            corrected.clone(),
        );
        let relay = relay.observed(&RelayMetrics::register(&mut registry));
        let invalidations = match redis_url {
            Some(url) => {
                let gate = api.gate();
                let forget = Arc::new(move |group_id| gate.forget_local(group_id));
                Some(store::redis::listen(&url, forget).await?)
            }
            None => None,
        };
        Ok(Self {
            config,
            auth: auth.clone(),
            api,
            relay,
            registry,
            db,
            invalidations,
            corrected,
            node,
        })
    }

    /// Serves gRPC and runs the outbox relay until `shutdown`.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> anyhow::Result<()> {
        let keeping = self.node.keep();
        let relay = self.relay.spawn();
        let interval = Duration::from_secs(self.config.recount_interval_secs);
        let recounts = (!interval.is_zero())
            .then(|| tokio::spawn(recount::every(self.api.groups(), interval, self.corrected)));
        let tasks: Vec<_> = self.invalidations.into_iter().chain(recounts).collect();
        grpc::Server::new(&self.config.grpc)
            .internal(GroupServiceServer::new(self.api), &self.auth)
            .readiness(imesh_kit::sql::readiness(&self.db))
            .metrics(self.registry)
            .then_stop(relay.stop())
            .then_stop(async move {
                tasks.iter().for_each(|t| t.abort());
                Ok(())
            })
            .then_stop(async move {
                keeping.stop().await;
                Ok(())
            })
            .then_stop(imesh_kit::sql::close(self.db))
            .serve(listener, shutdown)
            .await
    }
}

/// The `group-svc` program: settings from the file and environment, `migrate` to bring the
/// schema up to date and stop, otherwise serve until SIGTERM.
pub async fn run_binary() -> anyhow::Result<()> {
    imesh_kit::cli::run_with_schema::<Config, store::sql::Migrator, _, _>(
        "group-svc",
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
