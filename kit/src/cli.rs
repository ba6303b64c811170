//! What every service program does around its own wiring: read its settings, start
//! telemetry, refuse replicas without shared state, run `migrate` or bind its gRPC
//! listener and serve ([`run`], [`run_with_schema`]). A bad configuration exits with one
//! clear line.

use std::path::PathBuf;

use serde::{Deserialize, Serialize, de::DeserializeOwned};
use tokio::net::TcpListener;

use crate::config::{AuthConfig, GrpcConfig, RedisConfig, TelemetryConfig};

/// The sections of a service's own settings the program wiring reads.
pub trait ServiceSettings: DeserializeOwned + Serialize + Default {
    fn grpc(&self) -> &GrpcConfig;
    fn redis(&self) -> &RedisConfig;
}

/// [`ServiceSettings`] of a service with a database.
#[cfg(feature = "sql")]
pub trait DatabaseSettings: ServiceSettings {
    fn database(&self) -> &crate::config::SqlConfig;
}

/// Implements [`ServiceSettings`] for a service's `Config` from its `grpc` and `redis`
/// fields, and with `database`, [`DatabaseSettings`] from its `database` field too.
#[macro_export]
macro_rules! service_settings {
    ($config:ty) => {
        impl $crate::cli::ServiceSettings for $config {
            fn grpc(&self) -> &$crate::config::GrpcConfig {
                &self.grpc
            }

            fn redis(&self) -> &$crate::config::RedisConfig {
                &self.redis
            }
        }
    };
    ($config:ty, database) => {
        $crate::service_settings!($config);

        impl $crate::cli::DatabaseSettings for $config {
            fn database(&self) -> &$crate::config::SqlConfig {
                &self.database
            }
        }
    };
}

/// The program of a service that keeps no database: settings and telemetry, then `serve`
/// with the bound gRPC listener.
pub async fn run<S, F, Fut>(service: &'static str, serve: F) -> anyhow::Result<()>
where
    S: ServiceSettings,
    F: FnOnce(Settings<S>, TcpListener) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let (settings, _telemetry) = start::<S>(service);
    bind_and_serve(service, settings, serve).await
}

/// The program of a service with a database: [`run`], or with `migrate`, `M`'s
/// migrations and exit.
#[cfg(feature = "sql")]
pub async fn run_with_schema<S, M, F, Fut>(service: &'static str, serve: F) -> anyhow::Result<()>
where
    S: DatabaseSettings,
    M: sea_orm_migration::MigratorTrait,
    F: FnOnce(Settings<S>, TcpListener) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let (settings, _telemetry, migrate) = start_with_schema::<S>(service);
    if migrate {
        return self::migrate::<M>(service, settings.service.database()).await;
    }
    bind_and_serve(service, settings, serve).await
}

async fn bind_and_serve<S, F, Fut>(
    service: &'static str,
    settings: Settings<S>,
    serve: F,
) -> anyhow::Result<()>
where
    S: ServiceSettings,
    F: FnOnce(Settings<S>, TcpListener) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    require_shared_state(service, settings.replicas, settings.service.redis());
    let listener = TcpListener::bind(settings.service.grpc().listen).await?;
    tracing::info!(addr = %listener.local_addr()?, "{service} listening");
    serve(settings, listener).await
}

/// A service binary's whole configuration: the shared sections and its own, flattened, so a
/// Deployment sets e.g. `IMESH__DATABASE__URL` and `IMESH__AUTH__JWT_SECRET`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Settings<S> {
    pub auth: AuthConfig,
    pub telemetry: TelemetryConfig,
    /// A fixed snowflake node for this process; unset (the normal case): one is leased
    /// from the service's database.
    pub node_id: Option<u16>,
    /// How many processes of this service the deployment runs (the chart sets it); above
    /// one, state they share must live in Redis.
    pub replicas: u32,
    #[serde(flatten)]
    pub service: S,
}

/// The command line of a service that keeps no database: `<service> [--config FILE]`.
#[derive(Debug, clap::Parser)]
struct Serve {
    #[command(flatten)]
    config: ConfigFile,
}

/// The command line of a service with a database: `<service> [--config FILE] [migrate]`.
#[cfg(feature = "sql")]
#[derive(Debug, clap::Parser)]
struct ServeOrMigrate {
    #[command(flatten)]
    config: ConfigFile,
    #[command(subcommand)]
    command: Option<SchemaCommand>,
}

#[derive(Debug, clap::Args)]
struct ConfigFile {
    /// A TOML file with settings; `IMESH__…` environment variables override it
    #[arg(long, env = "IMESH_CONFIG", global = true)]
    config: Option<PathBuf>,
}

#[cfg(feature = "sql")]
#[derive(Debug, clap::Subcommand)]
enum SchemaCommand {
    /// Bring the database schema up to date and exit (the Helm chart's migration Job)
    Migrate,
}

/// Parses the process's arguments as `A`, under the program's name `service`; exits with
/// clap's usage on bad arguments and with the help on `--help`.
fn parse<A: clap::Parser>(service: &'static str) -> A {
    let about = format!(
        "The imesh {service}: its settings are its defaults, then a TOML file, then \
         IMESH__SECTION__KEY environment variables"
    );
    let matches = A::command().name(service).about(about).get_matches();
    A::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// Reads the command line of a service that keeps no database, loads `Settings<S>` from
/// `--config FILE` (or `IMESH_CONFIG`) and the environment, starts telemetry, and exits
/// the process with one line on any error.
pub fn start<S>(service: &'static str) -> (Settings<S>, crate::telemetry::TelemetryGuard)
where
    S: DeserializeOwned + Serialize + Default,
{
    let args: Serve = parse(service);
    load(service, args.config.config)
}

/// [`start`] for a service with a database, whose program also takes `migrate`: true when
/// it was asked to bring the schema up to date and exit.
#[cfg(feature = "sql")]
fn start_with_schema<S>(
    service: &'static str,
) -> (Settings<S>, crate::telemetry::TelemetryGuard, bool)
where
    S: DeserializeOwned + Serialize + Default,
{
    let args: ServeOrMigrate = parse(service);
    let (settings, telemetry) = load(service, args.config.config);
    let migrate = matches!(args.command, Some(SchemaCommand::Migrate));
    (settings, telemetry, migrate)
}

fn load<S>(
    service: &'static str,
    file: Option<PathBuf>,
) -> (Settings<S>, crate::telemetry::TelemetryGuard)
where
    S: DeserializeOwned + Serialize + Default,
{
    let settings: Settings<S> =
        crate::config::load(file.as_deref()).unwrap_or_else(|e| exit(service, e));
    settings
        .auth
        .validate()
        .unwrap_or_else(|e| exit(service, e));
    let guard =
        crate::telemetry::init(service, &settings.telemetry).unwrap_or_else(|e| exit(service, e));
    (settings, guard)
}

/// Stops the program when several replicas would keep per-process state: seq counters,
/// caches, presence and rate limits are shared through Redis or not at all.
fn require_shared_state(service: &str, replicas: u32, redis: &crate::config::RedisConfig) {
    if replicas > 1 && redis.url().is_none() {
        exit(
            service,
            format!(
                "replicas is {replicas} but redis.url is not set: replicas share seq counters, \
                 caches, presence and rate limits through Redis; set redis.url or run one replica"
            ),
        );
    }
}

/// Runs `M`'s migrations on `database`, logs the outcome and closes the connection.
#[cfg(feature = "sql")]
async fn migrate<M: sea_orm_migration::MigratorTrait>(
    service: &str,
    database: &crate::config::SqlConfig,
) -> anyhow::Result<()> {
    let db = crate::sql::connect_and_migrate::<M>(database).await?;
    db.close().await?;
    tracing::info!(service, "schema is up to date");
    Ok(())
}

/// Prints `service: bad configuration: …` and exits with status 2.
pub fn exit(service: &str, error: impl std::fmt::Display) -> ! {
    eprintln!("{service}: bad configuration: {error}");
    std::process::exit(2)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[cfg(feature = "sql")]
    #[test]
    fn a_service_with_a_database_takes_a_config_file_and_migrate() {
        let args =
            ServeOrMigrate::try_parse_from(["sync-svc", "migrate", "--config", "s.toml"]).unwrap();
        assert_eq!(args.config.config, Some(PathBuf::from("s.toml")));
        assert!(matches!(args.command, Some(SchemaCommand::Migrate)));
        let args = ServeOrMigrate::try_parse_from(["sync-svc"]).unwrap();
        assert!(args.command.is_none());
    }

    #[test]
    fn a_service_without_one_refuses_migrate_and_unknown_flags() {
        assert!(Serve::try_parse_from(["gateway", "migrate"]).is_err());
        assert!(Serve::try_parse_from(["gateway", "--port", "1"]).is_err());
        let args = Serve::try_parse_from(["gateway", "--config=g.toml"]).unwrap();
        assert_eq!(args.config.config, Some(PathBuf::from("g.toml")));
    }
}
