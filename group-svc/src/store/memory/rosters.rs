//! The in-process [`Rosters`] of the embedded default: the same protocol under one lock.

use std::{
    collections::{BTreeMap, HashMap},
    time::{Duration, Instant},
};

use async_trait::async_trait;
use imesh_kit::error::StoreError;
use parking_lot::Mutex;

use crate::domain::ports::{CLAIM_TTL, Entry, Rosters, TTL};

#[derive(Default)]
struct Roster {
    /// The version it is complete at, and when it was filled.
    published: Option<(i64, Instant)>,
    /// The fill in progress, and when it was claimed.
    claim: Option<(u64, Instant)>,
    by_map: BTreeMap<u32, i64>,
    by_user: HashMap<i64, u32>,
}

impl Roster {
    fn version(&self, ttl: Duration) -> Option<i64> {
        self.published
            .filter(|(_, at)| at.elapsed() < ttl)
            .map(|(v, _)| v)
    }

    /// The fill in progress, unless its claim lapsed.
    fn live_claim(&self) -> Option<u64> {
        self.claim
            .filter(|(_, at)| at.elapsed() < CLAIM_TTL)
            .map(|(claim, _)| claim)
    }

    fn insert(&mut self, e: Entry) {
        self.remove(e.user);
        self.by_map.insert(e.map_id, e.user);
        self.by_user.insert(e.user, e.map_id);
    }

    fn remove(&mut self, user: i64) {
        if let Some(map_id) = self.by_user.remove(&user) {
            self.by_map.remove(&map_id);
        }
    }
}

pub struct MemoryRosters {
    ttl: Duration,
    groups: Mutex<HashMap<i64, Roster>>,
}

impl Default for MemoryRosters {
    fn default() -> Self {
        Self::with_ttl(TTL)
    }
}

impl MemoryRosters {
    pub fn with_ttl(ttl: Duration) -> Self {
        Self {
            ttl,
            groups: Mutex::new(HashMap::new()),
        }
    }

    /// Runs `f` on the group's roster when one is published and fresh.
    fn published<T>(&self, group_id: i64, f: impl FnOnce(&Roster) -> T) -> Option<T> {
        let groups = self.groups.lock();
        let roster = groups.get(&group_id)?;
        roster.version(self.ttl).map(|_| f(roster))
    }
}

#[async_trait]
impl Rosters for MemoryRosters {
    async fn page(
        &self,
        group_id: i64,
        from: u32,
        limit: u32,
    ) -> Result<Option<Vec<Entry>>, StoreError> {
        Ok(self.published(group_id, |r| {
            r.by_map
                .range(from..)
                .take(limit as usize)
                .map(|(map_id, user)| Entry {
                    map_id: *map_id,
                    user: *user,
                })
                .collect()
        }))
    }

    async fn member(&self, group_id: i64, user: i64) -> Result<Option<Option<u32>>, StoreError> {
        Ok(self.published(group_id, |r| r.by_user.get(&user).copied()))
    }

    async fn claim(&self, group_id: i64) -> Result<Option<u64>, StoreError> {
        let mut groups = self.groups.lock();
        let roster = groups.entry(group_id).or_default();
        if roster.live_claim().is_some() || roster.version(self.ttl).is_some() {
            return Ok(None);
        }
        let claim = rand::random::<u64>();
        roster.claim = Some((claim, Instant::now()));
        Ok(Some(claim))
    }

    async fn fill(
        &self,
        group_id: i64,
        claim: u64,
        version: i64,
        members: &[Entry],
    ) -> Result<bool, StoreError> {
        let mut groups = self.groups.lock();
        let held = |r: &&mut Roster| r.live_claim() == Some(claim);
        let Some(roster) = groups.get_mut(&group_id).filter(held) else {
            return Ok(false);
        };
        *roster = Roster::default();
        for e in members {
            roster.insert(*e);
        }
        roster.published = Some((version, Instant::now()));
        Ok(true)
    }

    async fn apply(
        &self,
        group_id: i64,
        version: i64,
        current: &[Entry],
        gone: &[i64],
    ) -> Result<(), StoreError> {
        let mut groups = self.groups.lock();
        let Some(roster) = groups.get_mut(&group_id) else {
            return Ok(());
        };
        roster.claim = None;
        match roster.version(self.ttl) {
            Some(at) if at == version => {}
            Some(at) if at == version - 1 => {
                for e in current {
                    roster.insert(*e);
                }
                for user in gone {
                    roster.remove(*user);
                }
                roster.published = roster.published.map(|(_, filled)| (version, filled));
            }
            _ => {
                groups.remove(&group_id);
            }
        }
        Ok(())
    }

    async fn discard(&self, group_id: i64) -> Result<(), StoreError> {
        self.groups.lock().remove(&group_id);
        Ok(())
    }
}
