//! Redis connections (fred). Adapters hold the pool by value; every key is built by the
//! owning service's `keys` module with a hash tag, so Redis Cluster keeps a user's or a
//! group's keys in one slot.

use std::collections::BTreeMap;

use fred::prelude::*;

use crate::{config::RedisConfig, error::StoreError};

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

/// Each key's answer, in the keys' order, from one `call` per group of `keys` that one
/// script may take: on a cluster one per hash slot (a script may only touch the keys of
/// one slot), on a single node one for all. The calls go out together, so fred pipelines
/// them into one round trip. A call must answer once per key it was given.
pub async fn per_script<'k, K, T, Fut>(
    client: &Client,
    keys: &'k [K],
    call: impl Fn(Vec<&'k K>) -> Fut,
) -> Result<Vec<T>, StoreError>
where
    K: AsRef<[u8]>,
    Fut: Future<Output = Result<Vec<T>, fred::error::Error>>,
{
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let groups: Vec<Vec<usize>> = match client.is_clustered() {
        false => vec![(0..keys.len()).collect()],
        true => {
            let mut slots: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
            for (i, key) in keys.iter().enumerate() {
                let slot = fred::util::redis_keyslot(key.as_ref());
                slots.entry(slot).or_default().push(i);
            }
            slots.into_values().collect()
        }
    };
    let calls = groups
        .iter()
        .map(|places| call(places.iter().map(|&i| &keys[i]).collect()));
    let answers = futures::future::try_join_all(calls).await?;
    let mut out: Vec<Option<T>> = std::iter::repeat_with(|| None).take(keys.len()).collect();
    for (places, answer) in groups.iter().zip(answers) {
        if answer.len() != places.len() {
            return Err(StoreError::Unavailable(anyhow::anyhow!(
                "a script answered {} of {} keys",
                answer.len(),
                places.len()
            )));
        }
        for (&i, value) in places.iter().zip(answer) {
            out[i] = Some(value);
        }
    }
    Ok(out.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use fred::prelude::*;

    use crate::{error::StoreError, testing};

    /// Keys of three hash slots, one slot twice and out of slot order.
    fn keys() -> Vec<String> {
        let run = testing::random_id();
        ["{a}", "{b}", "{a}", "{c}"]
            .iter()
            .enumerate()
            .map(|(i, tag)| format!("{tag}:{run}:{i}"))
            .collect()
    }

    #[tokio::test]
    async fn a_batch_is_one_script_call_per_slot_answered_in_the_keys_order() {
        for (name, pool) in testing::redis_pools().await {
            let client = pool.next();
            let keys = keys();
            let calls = AtomicUsize::new(0);
            let answers = super::per_script(client, &keys, |group| {
                calls.fetch_add(1, Ordering::Relaxed);
                let group: Vec<&str> = group.into_iter().map(String::as_str).collect();
                client.eval::<Vec<String>, _, _, _>("return KEYS", group, ())
            })
            .await
            .unwrap();
            assert_eq!(answers, keys, "{name}");
            let slots = if client.is_clustered() { 3 } else { 1 };
            assert_eq!(calls.into_inner(), slots, "{name}");
        }
    }

    #[tokio::test]
    async fn a_script_answering_fewer_keys_than_it_was_given_is_an_error() {
        for (name, pool) in testing::redis_pools().await {
            let client = pool.next();
            let short = super::per_script(client, &keys(), |group| {
                let first: Vec<&str> = group.into_iter().take(1).map(String::as_str).collect();
                client.eval::<Vec<String>, _, _, _>("return KEYS", first, ())
            })
            .await;
            assert!(
                matches!(short, Err(StoreError::Unavailable(_))),
                "{name}: {short:?}"
            );
        }
    }
}
