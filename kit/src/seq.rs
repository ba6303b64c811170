//! Sequence allocation, seqsvr style (DESIGN §4): counters live in Redis (`INCR`) or in
//! process, and a ceiling persisted in SQL in steps bounds every value ever handed out. A
//! counter that vanished (Redis flushed or restarted, process restarted) is re-created at
//! the persisted ceiling, so a value is never handed out twice; at most one step is skipped.

use std::{collections::HashMap, sync::Arc};

use async_trait::async_trait;
use parking_lot::Mutex;
use prometheus_client::{metrics::counter::Counter, registry::Registry};

use crate::error::StoreError;

mod memory;
mod redis;
mod sql;

pub use self::sql::Migration;
pub use self::{memory::MemoryCounters, redis::RedisCounters, sql::SqlCeilings};

/// Where live counters are kept.
#[async_trait]
pub trait Counters: Send + Sync + 'static {
    /// Adds one to each existing key and returns the new values, `None` for keys that do
    /// not exist. MUST NOT create a missing key (that is how a lost counter is detected).
    async fn incr_existing(&self, keys: &[&str]) -> Result<Vec<Option<i64>>, StoreError>;
    /// Creates each key at its floor unless it already exists.
    async fn init(&self, floors: &[(&str, i64)]) -> Result<(), StoreError>;
}

/// Where ceilings are persisted.
#[async_trait]
pub trait Ceilings: Send + Sync + 'static {
    /// The persisted ceiling of each key, in the order given; 0 for a key whose ceiling
    /// was never written.
    async fn get(&self, keys: &[&str]) -> Result<Vec<i64>, StoreError>;
    /// Raises each key's ceiling to at least the given value; MUST never lower one.
    async fn raise(&self, ceilings: &[(&str, i64)]) -> Result<(), StoreError>;
}

pub struct SeqAllocator {
    counters: Arc<dyn Counters>,
    ceilings: Arc<dyn Ceilings>,
    step: i64,
    /// Ceilings this process knows are persisted; values up to them are safe to hand out.
    persisted: Mutex<HashMap<String, i64>>,
    allocated: Counter,
}

impl SeqAllocator {
    /// `step`: how far ahead each persisted ceiling reaches (fewer SQL writes, a bigger gap
    /// after a counter loss).
    pub fn new(counters: Arc<dyn Counters>, ceilings: Arc<dyn Ceilings>, step: i64) -> Self {
        assert!(step > 0, "seq step must be positive");
        Self {
            counters,
            ceilings,
            step,
            persisted: Mutex::new(HashMap::new()),
            allocated: Counter::default(),
        }
    }

    /// Counts allocations in `registry` as `seq_allocations`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "seq_allocations",
            "Sequence values handed out",
            self.allocated.clone(),
        );
    }

    /// The next value of one sequence.
    pub async fn next(&self, key: &str) -> Result<i64, StoreError> {
        Ok(self.next_many(&[key]).await?[0])
    }

    /// The next value of each sequence, in the order given; a key given several times
    /// gets increasing values in that order.
    pub async fn next_many(&self, keys: &[&str]) -> Result<Vec<i64>, StoreError> {
        let mut values = self.counters.incr_existing(keys).await?;
        let some_missing = values.iter().any(Option::is_none);
        // Lost counters come back at their persisted ceilings, all of a call's together: a
        // batch of new conversations costs one read of ceilings, not one per conversation.
        loop {
            let missing: Vec<usize> = (0..keys.len()).filter(|&i| values[i].is_none()).collect();
            if missing.is_empty() {
                break;
            }
            let lost: Vec<&str> = missing
                .iter()
                .map(|&i| keys[i])
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let floors = self.ceilings.get(&lost).await?;
            let floors: Vec<(&str, i64)> = lost.into_iter().zip(floors).collect();
            self.counters.init(&floors).await?;
            let again: Vec<&str> = missing.iter().map(|&i| keys[i]).collect();
            let counted = self.counters.incr_existing(&again).await?;
            for (i, value) in missing.into_iter().zip(counted) {
                values[i] = value;
            }
        }
        let mut values: Vec<i64> = values.into_iter().map(|v| v.unwrap_or_default()).collect();
        if some_missing {
            in_key_order(keys, &mut values);
        }
        // One ceiling per key, however often it repeats: an upsert may touch a row once.
        let to_raise: Vec<(&str, i64)> = {
            let persisted = self.persisted.lock();
            let mut highest: std::collections::BTreeMap<&str, i64> = Default::default();
            for (key, value) in keys.iter().zip(&values) {
                if persisted.get(*key).is_none_or(|c| *value > *c) {
                    let ceiling = highest.entry(key).or_default();
                    *ceiling = (*ceiling).max(value + self.step);
                }
            }
            highest.into_iter().collect()
        };
        if !to_raise.is_empty() {
            self.ceilings.raise(&to_raise).await?;
            let mut persisted = self.persisted.lock();
            for (key, ceiling) in to_raise {
                let known = persisted.entry(key.to_owned()).or_insert(ceiling);
                *known = (*known).max(ceiling);
            }
        }
        self.allocated.inc_by(values.len() as u64);
        Ok(values)
    }
}

/// Hands each key's values to its places in the order given. The increments of one call
/// need not be atomic together (an adapter may count key by key), so a key missing at its
/// first place may be created by another caller before its later places are counted: those
/// then hold lower values than the first one, got on the retry.
fn in_key_order(keys: &[&str], values: &mut [i64]) {
    let mut places: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, key) in keys.iter().enumerate() {
        places.entry(key).or_default().push(i);
    }
    for places in places.values().filter(|p| p.len() > 1) {
        let mut sorted: Vec<i64> = places.iter().map(|&i| values[i]).collect();
        sorted.sort_unstable();
        for (&i, value) in places.iter().zip(sorted) {
            values[i] = value;
        }
    }
}

#[cfg(test)]
mod tests;
