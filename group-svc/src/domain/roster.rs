//! Member lists of large groups served from their rosters ([`super::Rosters`]):
//! listing pages and member checks read the roster; without one the database answers while
//! a background task fills it; every change is applied to it in version order.

use std::{collections::HashSet, sync::Arc};

use parking_lot::Mutex;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};

use super::{
    Group, GroupStore, Member,
    ports::{Entry, Rosters},
};

/// Groups with at least this many members keep a roster (seed 000: below it, a set).
pub const ROSTER_FROM: u32 = 2_000;

pub struct Roster {
    store: Arc<dyn GroupStore>,
    rosters: Arc<dyn Rosters>,
    /// Groups this process is filling.
    filling: Mutex<HashSet<i64>>,
    reads: Family<Read, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Read {
    hit: bool,
}

impl Roster {
    pub fn new(store: Arc<dyn GroupStore>, rosters: Arc<dyn Rosters>) -> Arc<Self> {
        Arc::new(Self {
            store,
            rosters,
            filling: Mutex::new(HashSet::new()),
            reads: Family::default(),
        })
    }

    /// Counts roster reads, hit or miss, in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "group_roster_reads",
            "Member pages and member checks of large groups, by whether a roster answered",
            self.reads.clone(),
        );
    }

    pub fn covers(group: &Group) -> bool {
        group.member_count >= ROSTER_FROM
    }

    /// Current members' ids from map id `from`, by map id, at most `limit`; `None` when
    /// the roster cannot answer yet.
    pub async fn page(self: &Arc<Self>, group_id: i64, from: u32, limit: u32) -> Option<Vec<i64>> {
        let found = self.rosters.page(group_id, from, limit).await;
        self.answered(group_id, found)
            .map(|entries| entries.iter().map(|e| e.user).collect())
    }

    /// Whether `user` is a current member; `None` when the roster cannot answer yet.
    pub async fn is_member(self: &Arc<Self>, group_id: i64, user: i64) -> Option<bool> {
        let found = self.rosters.member(group_id, user).await;
        self.answered(group_id, found).map(|m| m.is_some())
    }

    /// Applies a committed change (the group after it, the members it wrote) to the roster.
    pub async fn changed(&self, group: &Group, members: &[Member]) {
        if !Self::covers(group) {
            // A roster left from when the group was larger misses this version, so the
            // first change applied after it grows again drops it.
            return;
        }
        let current: Vec<Entry> = members
            .iter()
            .filter(|m| m.is_current())
            .map(|m| Entry {
                map_id: m.map_id,
                user: m.user_id,
            })
            .collect();
        let gone: Vec<i64> = members
            .iter()
            .filter(|m| !m.is_current())
            .map(|m| m.user_id)
            .collect();
        if let Err(e) = self
            .rosters
            .apply(group.id, group.version, &current, &gone)
            .await
        {
            // A roster that missed this change must not answer: drop it (the next change
            // would too, but there may be none for a long while).
            tracing::warn!(error = %e, group_id = group.id, "applying a change to the roster failed; dropping it");
            self.discard(group.id).await;
        }
    }

    /// Drops the roster after a change too large to apply (imports).
    pub async fn discard(&self, group_id: i64) {
        if let Err(e) = self.rosters.discard(group_id).await {
            tracing::warn!(error = %e, group_id, "dropping the roster failed");
        }
    }

    fn answered<T>(
        self: &Arc<Self>,
        group_id: i64,
        found: Result<Option<T>, imesh_kit::error::StoreError>,
    ) -> Option<T> {
        let found = found.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "roster unavailable; reading the database");
            None
        });
        self.reads
            .get_or_create(&Read {
                hit: found.is_some(),
            })
            .inc();
        if found.is_none() {
            self.fill_later(group_id);
        }
        found
    }

    /// Fills the group's roster in the background, once per process at a time.
    fn fill_later(self: &Arc<Self>, group_id: i64) {
        if !self.filling.lock().insert(group_id) {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            if let Err(e) = this.fill(group_id).await {
                tracing::warn!(error = %e, group_id, "filling a roster failed");
            }
            this.filling.lock().remove(&group_id);
        });
    }

    async fn fill(&self, group_id: i64) -> anyhow::Result<()> {
        // Claim, then read the version, then the members: any change that this snapshot
        // might miss lands after the claim and revokes it.
        let Some(claim) = self.rosters.claim(group_id).await? else {
            return Ok(());
        };
        let Some(group) = self.store.group(group_id).await? else {
            return Ok(());
        };
        let members: Vec<Entry> = self
            .store
            .roster(group_id)
            .await?
            .into_iter()
            .map(|(map_id, user)| Entry { map_id, user })
            .collect();
        self.rosters
            .fill(group_id, claim, group.version, &members)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use async_trait::async_trait;
    use imesh_kit::error::StoreError;

    use super::*;
    use crate::{
        domain::{MemberStatus, Role},
        store::memory::MemoryRosters,
    };

    /// In-process rosters whose `apply` fails, as a Redis hiccup would.
    struct FailingApply(MemoryRosters);

    #[async_trait]
    impl Rosters for FailingApply {
        async fn page(
            &self,
            g: i64,
            from: u32,
            limit: u32,
        ) -> Result<Option<Vec<Entry>>, StoreError> {
            self.0.page(g, from, limit).await
        }
        async fn member(&self, g: i64, user: i64) -> Result<Option<Option<u32>>, StoreError> {
            self.0.member(g, user).await
        }
        async fn claim(&self, g: i64) -> Result<Option<u64>, StoreError> {
            self.0.claim(g).await
        }
        async fn fill(&self, g: i64, claim: u64, v: i64, m: &[Entry]) -> Result<bool, StoreError> {
            self.0.fill(g, claim, v, m).await
        }
        async fn apply(&self, _: i64, _: i64, _: &[Entry], _: &[i64]) -> Result<(), StoreError> {
            Err(StoreError::Unavailable(anyhow::anyhow!("connection reset")))
        }
        async fn discard(&self, g: i64) -> Result<(), StoreError> {
            self.0.discard(g).await
        }
    }

    #[tokio::test]
    async fn a_change_that_cannot_be_applied_drops_the_roster() {
        let rosters = Arc::new(FailingApply(MemoryRosters::default()));
        let claim = rosters.claim(7).await.unwrap().unwrap();
        let members = [Entry { map_id: 0, user: 1 }, Entry { map_id: 1, user: 2 }];
        assert!(rosters.fill(7, claim, 3, &members).await.unwrap());
        let config = imesh_kit::testing::fresh_sql(imesh_kit::testing::Backend::Sqlite)
            .await
            .unwrap();
        let db = imesh_kit::sql::connect_and_migrate::<crate::store::sql::Migrator>(&config)
            .await
            .unwrap();
        let store = Arc::new(crate::store::sql::SqlGroupStore::new(
            db,
            Arc::new(imesh_kit::ids::Snowflake::new(1)),
            crate::events::encode,
            Default::default(),
        ));
        let roster = Roster::new(store, rosters.clone());
        let group = Group {
            id: 7,
            version: 4,
            member_count: ROSTER_FROM,
            ..Default::default()
        };
        let kicked = Member {
            group_id: 7,
            user_id: 2,
            role: Role::Member,
            map_id: 1,
            alias: String::new(),
            nickname: String::new(),
            mute_until_ms: 0,
            join_seq: 0,
            leave_seq: 9,
            joined_at_ms: 0,
            status: MemberStatus::Kicked,
            extra_permissions: 0,
        };
        roster.changed(&group, &[kicked]).await;
        assert_eq!(rosters.member(7, 2).await.unwrap(), None, "no stale answer");
    }
}
