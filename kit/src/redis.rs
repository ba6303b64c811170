//! Redis connections (fred). Adapters hold the pool by value; every key is built by the
//! owning service's `keys` module with a hash tag, so Redis Cluster keeps a user's or a
//! group's keys in one slot.

use fred::prelude::*;

use crate::config::RedisConfig;

/// Connects a pool to the configured Redis and waits until it answers.
pub async fn connect(config: &RedisConfig, url: &str) -> anyhow::Result<Pool> {
    let mut redis_config = Config::from_url(url).map_err(|e| anyhow::anyhow!("redis.url: {e}"))?;
    // A span per command (`fred.command`, with its round trip) when traces are exported.
    redis_config.tracing = TracingConfig::new(crate::telemetry::exporting());
    let pool = Builder::from_config(redis_config)
        .with_connection_config(|c| {
            c.connection_timeout = std::time::Duration::from_secs(5);
            // Pipelined bursts must not wait for Nagle's algorithm.
            c.tcp = TcpConfig {
                nodelay: Some(true),
                ..Default::default()
            };
        })
        .set_policy(ReconnectPolicy::new_exponential(0, 100, 5_000, 2))
        .build_pool(config.pool_size.max(1))?;
    pool.init()
        .await
        .map_err(|e| anyhow::anyhow!("connecting to redis: {e}"))?;
    Ok(pool)
}

/// True while Redis answers PING.
pub async fn ping(pool: &Pool) -> bool {
    pool.ping::<String>(None).await.is_ok()
}
