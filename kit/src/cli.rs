//! What every service binary does before wiring itself: read its settings and start
//! telemetry. A bad configuration exits with one clear line.

use std::path::PathBuf;

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::config::{AuthConfig, TelemetryConfig};

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

/// Loads `Settings<S>` from `--config FILE` (or `IMESH_CONFIG`) and the environment, starts
/// telemetry, and exits the process with one line on any error.
pub fn start<S>(service: &'static str) -> (Settings<S>, crate::telemetry::TelemetryGuard)
where
    S: DeserializeOwned + Serialize + Default,
{
    let file = config_file();
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
pub fn require_shared_state(service: &str, replicas: u32, redis: &crate::config::RedisConfig) {
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

/// True when the binary was started as `<service> migrate`: bring the schema up to date
/// and exit (the Helm chart's migration Job).
pub fn migrate_only() -> bool {
    std::env::args().nth(1).as_deref() == Some("migrate")
}

/// Runs `M`'s migrations on `database`, logs the outcome and closes the connection.
#[cfg(feature = "sql")]
pub async fn migrate<M: sea_orm_migration::MigratorTrait>(
    service: &str,
    database: &crate::config::SqlConfig,
) -> anyhow::Result<()> {
    let db = crate::sql::connect_and_migrate::<M>(database).await?;
    db.close().await?;
    tracing::info!(service, "schema is up to date");
    Ok(())
}

fn config_file() -> Option<PathBuf> {
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--config" {
            return args.next().map(PathBuf::from);
        }
        if let Some(path) = arg.strip_prefix("--config=") {
            return Some(PathBuf::from(path));
        }
    }
    std::env::var_os("IMESH_CONFIG").map(PathBuf::from)
}

/// Prints `service: bad configuration: …` and exits with status 2.
pub fn exit(service: &str, error: impl std::fmt::Display) -> ! {
    eprintln!("{service}: bad configuration: {error}");
    std::process::exit(2)
}
