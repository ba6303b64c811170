//! group-svc: groups, members and roles.
//!
//! # Layout
//! - [`api`]: the tonic handlers: read the caller, parse the request, call the domain.
//! - [`domain`]: groups and members: creation, map ids, lookups.
//! - [`store`]: the [`store::GroupStore`] port and its sea-orm adapter with migrations.
//! - [`Service`]: builds all of it from [`Config`] and serves it on a listener.

#![forbid(unsafe_code)]

pub mod api;
pub mod domain;
pub mod store;

use std::sync::Arc;

use imesh_kit::{
    config::{AuthConfig, GrpcConfig, SqlConfig},
    grpc,
    identity::InternalAuth,
    ids::Snowflake,
};
use imesh_protos::group::group_service_server::GroupServiceServer;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct Config {
    pub grpc: GrpcConfig,
    pub database: SqlConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            grpc: GrpcConfig::on(([0, 0, 0, 0], 50052).into()),
            database: SqlConfig::default(),
        }
    }
}

/// group-svc, built and ready to serve.
pub struct Service {
    config: Config,
    auth: AuthConfig,
    groups: Arc<domain::Groups>,
    db: sea_orm::DatabaseConnection,
}

impl Service {
    /// Connects the database and brings its schema up to date.
    pub async fn build(config: Config, auth: &AuthConfig, node_id: u16) -> anyhow::Result<Self> {
        let db =
            imesh_kit::sql::connect_and_migrate::<store::sql::Migrator>(&config.database).await?;
        let store = Arc::new(store::sql::SqlGroupStore::new(db.clone()));
        let groups = Arc::new(domain::Groups::new(
            store,
            Arc::new(Snowflake::new(node_id)),
        ));
        Ok(Self {
            config,
            auth: auth.clone(),
            groups,
            db,
        })
    }

    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> anyhow::Result<()> {
        let api = api::GroupApi::new(self.groups);
        grpc::Server::new(&self.config.grpc)
            .add_service(GroupServiceServer::with_interceptor(
                api,
                InternalAuth::new(&self.auth.internal_secret),
            ))
            .readiness(imesh_kit::sql::readiness(&self.db))
            .serve(listener, shutdown)
            .await?;
        self.db.close().await?;
        Ok(())
    }
}
