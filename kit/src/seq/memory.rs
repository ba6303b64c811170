//! In-process counters for the embedded default and tests.

use std::collections::HashMap;

use async_trait::async_trait;
use parking_lot::Mutex;

use super::Counters;
use crate::error::StoreError;

#[derive(Default)]
pub struct MemoryCounters {
    values: Mutex<HashMap<String, i64>>,
}

impl MemoryCounters {
    /// Forgets every counter, as a Redis flush would.
    pub fn clear(&self) {
        self.values.lock().clear();
    }
}

#[async_trait]
impl Counters for MemoryCounters {
    async fn incr_existing(&self, keys: &[&str]) -> Result<Vec<Option<i64>>, StoreError> {
        let mut values = self.values.lock();
        Ok(keys
            .iter()
            .map(|k| {
                values.get_mut(*k).map(|v| {
                    *v += 1;
                    *v
                })
            })
            .collect())
    }

    async fn init(&self, floors: &[(&str, i64)]) -> Result<(), StoreError> {
        let mut values = self.values.lock();
        for (key, floor) in floors {
            values.entry((*key).to_owned()).or_insert(*floor);
        }
        Ok(())
    }
}
