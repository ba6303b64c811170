//! Test support: the real stores a test runs against. SQLite always; PostgreSQL, MySQL,
//! Redis and a Redis Cluster when `IMESH_TEST_POSTGRES_URL`, `IMESH_TEST_MYSQL_URL`,
//! `IMESH_TEST_REDIS_URL` and `IMESH_TEST_REDIS_CLUSTER_URL` are set (scripts/test starts
//! the servers and sets them). With
//! `IMESH_TEST_ALL_BACKENDS=1` a missing server is a test failure, not a skip.

use rand::Rng;

use crate::config::{RedisConfig, Secret};

/// Sends the services' warnings and errors (or what `RUST_LOG` asks for) to the test's
/// captured output, so a failing test shows what the services complained of.
pub fn log_to_test_output() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _already_set = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .with_ansi(false)
        .try_init();
}

/// Polls `done` until it holds, failing with `what` after 10 s.
pub async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
}

/// Polls the async `done` until it holds, failing with `what` after 10 s.
pub async fn until_async<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !done().await {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// What a reader paging "after the last seq I have" sees while `writers` run, and once
/// more after they have finished: every seq `page(after)` answered, in the order read. A
/// seq that became visible after a later one was read is missing from it.
pub async fn read_after_while<T, F, Fut>(
    writers: &[tokio::task::JoinHandle<T>],
    mut page: F,
) -> Vec<i64>
where
    F: FnMut(i64) -> Fut,
    Fut: Future<Output = Vec<i64>>,
{
    let mut seen: Vec<i64> = Vec::new();
    loop {
        let finished = writers.iter().all(|w| w.is_finished());
        let after = seen.last().copied().unwrap_or(0);
        seen.extend(page(after).await);
        if finished {
            return seen;
        }
        tokio::task::yield_now().await;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
    MySql,
}

/// The value of the test setting `var` (a server's URL, a tool's path) when it is set;
/// under `IMESH_TEST_ALL_BACKENDS=1` it must be.
pub fn configured(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("IMESH_TEST_ALL_BACKENDS").as_deref() != Ok("1"),
                "{var} is not set but IMESH_TEST_ALL_BACKENDS=1: run the tests through scripts/test"
            );
            None
        }
    }
}

/// Every SQL backend reachable from this test run.
pub fn sql_backends() -> Vec<Backend> {
    let mut backends = vec![Backend::Sqlite];
    if configured("IMESH_TEST_POSTGRES_URL").is_some() {
        backends.push(Backend::Postgres);
    }
    if configured("IMESH_TEST_MYSQL_URL").is_some() {
        backends.push(Backend::MySql);
    }
    backends
}

/// A fresh, empty database on `backend`, private to the caller: a SQLite file, a MySQL
/// database, or a PostgreSQL schema (the connection's search path), which takes kilobytes
/// where a PostgreSQL database would copy 7.5 MB of catalogs.
#[cfg(feature = "sql")]
pub async fn fresh_sql(backend: Backend) -> anyhow::Result<crate::config::SqlConfig> {
    use crate::config::SqlConfig;
    let name = format!("t{}", rand::rng().random_range(0..u64::MAX / 2));
    let url = match backend {
        Backend::Sqlite => {
            let dir = std::env::temp_dir().join("imesh-tests");
            std::fs::create_dir_all(&dir)?;
            format!("sqlite://{}/{name}.db?mode=rwc", dir.display())
        }
        Backend::Postgres => {
            let server =
                create_on("IMESH_TEST_POSTGRES_URL", &format!("CREATE SCHEMA {name}")).await?;
            let joiner = if server.contains('?') { '&' } else { '?' };
            format!("{server}{joiner}options[search_path]={name}")
        }
        Backend::MySql => {
            let server =
                create_on("IMESH_TEST_MYSQL_URL", &format!("CREATE DATABASE {name}")).await?;
            let base = server
                .rsplit_once('/')
                .map_or(server.as_str(), |(base, _)| base);
            format!("{base}/{name}")
        }
    };
    Ok(SqlConfig {
        url: Secret::new(url),
        max_connections: 8,
        ..SqlConfig::default()
    })
}

/// Runs `create` on the test server `var` names; returns the server's URL.
#[cfg(feature = "sql")]
async fn create_on(var: &str, create: &str) -> anyhow::Result<String> {
    use sea_orm::{ConnectionTrait, Database};
    let server = std::env::var(var)?;
    let admin = Database::connect(&server).await?;
    admin.execute_unprepared(create).await?;
    admin.close().await?;
    Ok(server)
}

/// The test Redis, when one is configured.
pub fn redis() -> Option<RedisConfig> {
    configured("IMESH_TEST_REDIS_URL").map(redis_config)
}

/// Every test Redis configured: the single node and the 3-master cluster
/// (`IMESH_TEST_REDIS_CLUSTER_URL`), named for test messages. Redis adapters run their
/// contract on each, so hash tags are proven to keep multi-key commands in one slot.
pub fn redis_servers() -> Vec<(&'static str, RedisConfig)> {
    let mut out = Vec::new();
    if let Some(config) = redis() {
        out.push(("redis", config));
    }
    if let Some(url) = configured("IMESH_TEST_REDIS_CLUSTER_URL") {
        out.push(("redis-cluster", redis_config(url)));
    }
    out
}

/// A connected pool on each of [`redis_servers`], with its name.
pub async fn redis_pools() -> Vec<(&'static str, fred::prelude::Pool)> {
    let mut out = Vec::new();
    for (name, config) in redis_servers() {
        let url = config.url().expect("a test Redis has a URL");
        let pool = crate::redis::connect(&config, url)
            .await
            .expect("the test Redis answers");
        out.push((name, pool));
    }
    out
}

fn redis_config(url: String) -> RedisConfig {
    RedisConfig {
        url: Secret::new(url),
        pool_size: 4,
    }
}

/// A fresh empty folder under the temporary directory (the test command's, removed with
/// its stores).
pub fn scratch_dir(what: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("imesh-{what}-{}", random_id()));
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    dir
}

/// The test S3-compatible server (`IMESH_TEST_S3_URL`, with `IMESH_TEST_S3_ACCESS_KEY` and
/// `IMESH_TEST_S3_SECRET_KEY`), when one is configured.
#[derive(Debug, Clone)]
pub struct S3Server {
    pub endpoint: String,
    pub access_key: String,
    pub secret_key: String,
}

pub fn s3() -> Option<S3Server> {
    Some(S3Server {
        endpoint: configured("IMESH_TEST_S3_URL")?,
        access_key: configured("IMESH_TEST_S3_ACCESS_KEY")?,
        secret_key: configured("IMESH_TEST_S3_SECRET_KEY")?,
    })
}

/// A random positive id, so tests sharing one Redis or database never collide.
pub fn random_id() -> i64 {
    rand::rng().random_range(1_000_000..i64::MAX / 4)
}

/// Two Ed25519 key pairs (made with `openssl genpkey -algorithm ed25519`) for tests of
/// EdDSA tokens; never for a deployment.
pub const PRIVATE_A: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIKIyv6oEbCttMtqIRsgYrEQWm11q2WUG8MZyAhev+q+9
-----END PRIVATE KEY-----
";
pub const PUBLIC_A: &str = "-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEAPPD1GM0VlE8+I3xPV9Ouurd89LZ7phhSgfa1XI3umcc=
-----END PUBLIC KEY-----
";
pub const PRIVATE_B: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEINi7DRN/HhUJn3WKFKD3KeQwtUVlDmAET+YIGJmie5MV
-----END PRIVATE KEY-----
";
pub const PUBLIC_B: &str = "-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEAPanl7ZzO3akgVRCIi3FHTTwh1cuhCX4/xw+2Gy0vfcY=
-----END PUBLIC KEY-----
";
