//! relation-svc: accounts, credentials and tokens (friendships and the blacklist build on
//! these).
//!
//! # Layout
//! - [`api`]: the tonic handlers: read the caller, parse the request, call the domain.
//! - [`domain`]: accounts: validation, password hashing (argon2), token issuance.
//! - [`store`]: the [`store::UserStore`] port and its sea-orm adapter with migrations.
//! - [`Service`]: builds all of it from [`Config`] and serves it on a listener.

#![forbid(unsafe_code)]

pub mod api;
pub mod domain;
pub mod store;

use std::{sync::Arc, time::Duration};

use imesh_kit::{
    config::{AuthConfig, GrpcConfig, SqlConfig},
    grpc,
    identity::InternalAuth,
    ids::Snowflake,
    token::Tokens,
};
use imesh_protos::relation::relation_service_server::RelationServiceServer;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct Config {
    pub grpc: GrpcConfig,
    pub database: SqlConfig,
    /// Lifetime of the tokens Login issues.
    pub token_ttl_secs: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            grpc: GrpcConfig::on(([0, 0, 0, 0], 50051).into()),
            database: SqlConfig::default(),
            token_ttl_secs: 7 * 24 * 3600,
        }
    }
}

/// relation-svc, built and ready to serve.
pub struct Service {
    config: Config,
    auth: AuthConfig,
    accounts: Arc<domain::Accounts>,
    db: sea_orm::DatabaseConnection,
}

impl Service {
    /// Connects the database and brings its schema up to date.
    pub async fn build(config: Config, auth: &AuthConfig, node_id: u16) -> anyhow::Result<Self> {
        let db =
            imesh_kit::sql::connect_and_migrate::<store::sql::Migrator>(&config.database).await?;
        let tokens = Tokens::new(&auth.jwt_secret, Duration::from_secs(config.token_ttl_secs))?;
        let store = Arc::new(store::sql::SqlUserStore::new(db.clone()));
        let accounts = Arc::new(domain::Accounts::new(
            store,
            Arc::new(Snowflake::new(node_id)),
            tokens,
        ));
        Ok(Self {
            config,
            auth: auth.clone(),
            accounts,
            db,
        })
    }

    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> anyhow::Result<()> {
        let api = api::RelationApi::new(self.accounts);
        let db = self.db.clone();
        grpc::Server::new(&self.config.grpc)
            .add_service(RelationServiceServer::with_interceptor(
                api,
                InternalAuth::new(&self.auth.internal_secret),
            ))
            .readiness(Arc::new(move || {
                let db = db.clone();
                Box::pin(async move { imesh_kit::sql::ping(&db).await })
            }))
            .serve(listener, shutdown)
            .await?;
        self.db.close().await?;
        Ok(())
    }
}
