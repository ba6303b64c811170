//! The in-process [`GroupCache`] of the embedded default, with a TTL. An invalidated
//! group keeps an empty entry that holds its generation.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use async_trait::async_trait;
use imesh_kit::error::StoreError;
use parking_lot::Mutex;

use crate::domain::{ACTIVE_KEPT, GateGroup, GateMember, GroupCache};

#[derive(Default)]
struct Entry {
    group: Option<(Instant, GateGroup)>,
    members: HashMap<i64, (Instant, Option<GateMember>)>,
    ids: Option<(Instant, Vec<i64>)>,
    generation: u64,
}

/// Recent activity per group, most recent last.
type Activity = HashMap<i64, Vec<(i64, i64)>>;

pub struct MemoryGroupCache {
    ttl: Duration,
    groups: Mutex<HashMap<i64, Entry>>,
    activity: Mutex<Activity>,
}

impl MemoryGroupCache {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            groups: Mutex::new(HashMap::new()),
            activity: Mutex::new(HashMap::new()),
        }
    }

    /// Runs `put` on the group's entry while it is still at `generation`.
    fn put_at(&self, group_id: i64, generation: u64, put: impl FnOnce(&mut Entry)) -> bool {
        let mut groups = self.groups.lock();
        let entry = groups.entry(group_id).or_default();
        let current = entry.generation == generation;
        if current {
            put(entry);
        }
        current
    }

    fn fresh<T: Clone>(&self, entry: Option<&(Instant, T)>) -> Option<T> {
        entry
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, v)| v.clone())
    }
}

#[async_trait]
impl GroupCache for MemoryGroupCache {
    async fn generation(&self, group_id: i64) -> Result<u64, StoreError> {
        Ok(self
            .groups
            .lock()
            .get(&group_id)
            .map_or(0, |e| e.generation))
    }

    async fn group(&self, group_id: i64) -> Result<Option<GateGroup>, StoreError> {
        Ok(self
            .groups
            .lock()
            .get(&group_id)
            .and_then(|e| self.fresh(e.group.as_ref())))
    }

    async fn put_group(
        &self,
        group_id: i64,
        generation: u64,
        group: GateGroup,
    ) -> Result<bool, StoreError> {
        Ok(self.put_at(group_id, generation, |e| {
            e.group = Some((Instant::now(), group));
        }))
    }

    async fn member(
        &self,
        group_id: i64,
        user: i64,
    ) -> Result<Option<Option<GateMember>>, StoreError> {
        Ok(self
            .groups
            .lock()
            .get(&group_id)
            .and_then(|e| self.fresh(e.members.get(&user))))
    }

    async fn put_member(
        &self,
        group_id: i64,
        generation: u64,
        user: i64,
        member: Option<GateMember>,
    ) -> Result<bool, StoreError> {
        Ok(self.put_at(group_id, generation, |e| {
            e.members.insert(user, (Instant::now(), member));
        }))
    }

    async fn member_ids(&self, group_id: i64) -> Result<Option<Vec<i64>>, StoreError> {
        Ok(self
            .groups
            .lock()
            .get(&group_id)
            .and_then(|e| self.fresh(e.ids.as_ref())))
    }

    async fn put_member_ids(
        &self,
        group_id: i64,
        generation: u64,
        ids: &[i64],
    ) -> Result<bool, StoreError> {
        Ok(self.put_at(group_id, generation, |e| {
            e.ids = Some((Instant::now(), ids.to_vec()));
        }))
    }

    async fn touch(&self, group_id: i64, user: i64, at_ms: i64) -> Result<(), StoreError> {
        let mut activity = self.activity.lock();
        let recent = activity.entry(group_id).or_default();
        recent.retain(|(u, _)| *u != user);
        recent.push((user, at_ms));
        if recent.len() > ACTIVE_KEPT {
            recent.remove(0);
        }
        Ok(())
    }

    async fn active(&self, group_id: i64, limit: u32) -> Result<Vec<i64>, StoreError> {
        let activity = self.activity.lock();
        let recent = activity.get(&group_id).map_or(&[][..], Vec::as_slice);
        Ok(recent
            .iter()
            .rev()
            .take(limit as usize)
            .map(|(u, _)| *u)
            .collect())
    }

    async fn invalidate(&self, group_id: i64) -> Result<(), StoreError> {
        let mut groups = self.groups.lock();
        let entry = groups.entry(group_id).or_default();
        *entry = Entry {
            generation: entry.generation + 1,
            ..Entry::default()
        };
        Ok(())
    }
}
