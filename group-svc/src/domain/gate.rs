//! The send gate of every group message: `CheckSend` in the seed's fixed order
//! ([`super::rules::check_send`]) over three tiers: a short per-process cache (1–3 s, seed
//! 000) → the shared [`GroupCache`] (Redis, or in-process) → the database. Every change of a
//! group forgets its entries in all three (other replicas' local entries through the
//! cache's invalidation broadcast, or by expiry), and a fill that read the database before
//! a change stores nothing after it (the shared tier's generations; locally, a count of
//! forgets).

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use parking_lot::Mutex;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};

use super::{Error, GateGroup, GateMember, GroupCache, GroupStore, Role, rules};

/// What the gate answers for an allowed send: the decision as of now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowed {
    pub role: Role,
    pub map_id: u32,
    pub version: i64,
    pub join_seq: i64,
    pub group: GateGroup,
}

struct Entry {
    at: Instant,
    group: GateGroup,
    members: HashMap<i64, Option<GateMember>>,
}

pub struct Gate {
    store: Arc<dyn GroupStore>,
    shared: Arc<dyn GroupCache>,
    ttl: Duration,
    max_groups: usize,
    local: Mutex<HashMap<i64, Entry>>,
    /// Local forgets so far: a load remembers what it read only if none came meanwhile.
    forgets: AtomicU64,
    lookups: Family<Lookup, Counter>,
}

/// One cache lookup: which tier, and whether it answered.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Lookup {
    cache: &'static str,
    hit: bool,
}

impl Gate {
    pub fn new(
        store: Arc<dyn GroupStore>,
        shared: Arc<dyn GroupCache>,
        ttl: Duration,
        max_groups: usize,
    ) -> Self {
        Self {
            store,
            shared,
            ttl,
            max_groups,
            local: Mutex::new(HashMap::new()),
            forgets: AtomicU64::new(0),
            lookups: Family::default(),
        }
    }

    /// Counts lookups per cache tier, hit or miss, in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "group_cache_lookups",
            "Send-gate and member-set cache lookups, by tier and hit",
            self.lookups.clone(),
        );
    }

    fn looked_up(&self, cache: &'static str, hit: bool) {
        self.lookups.get_or_create(&Lookup { cache, hit }).inc();
    }

    /// May `user` send to `group_id` now, with `needs` bits beyond SEND_MSG?
    pub async fn check(&self, group_id: i64, user: i64, needs: u32) -> Result<Allowed, Error> {
        let cached = self.cached(group_id, user);
        self.looked_up("local", cached.is_some());
        let (group, member) = match cached {
            Some(hit) => hit,
            None => self.load(group_id, user).await?,
        };
        rules::check_send(&group, member.as_ref(), needs, imesh_kit::ids::unix_ms())?;
        let member = member.expect("check_send passed: a member");
        if group.kind == super::GroupType::Super
            && let Err(e) = self
                .shared
                .touch(group_id, user, imesh_kit::ids::unix_ms())
                .await
        {
            tracing::warn!(error = %e, "recording member activity failed");
        }
        Ok(Allowed {
            role: member.role,
            map_id: member.map_id,
            version: group.version,
            join_seq: member.join_seq,
            group,
        })
    }

    /// Current member ids for write fanout: shared cache, else the database (then cached).
    pub async fn member_ids(&self, group_id: i64) -> Result<Vec<i64>, Error> {
        // A miss reads the generation before the database; an unavailable cache is not filled.
        let generation = match self.shared.member_ids(group_id).await {
            Ok(Some(ids)) => {
                self.looked_up("member_ids", true);
                return Ok(ids);
            }
            Ok(None) => {
                self.looked_up("member_ids", false);
                self.shared.generation(group_id).await.ok()
            }
            Err(e) => {
                tracing::warn!(error = %e, "group cache unavailable; reading the database");
                None
            }
        };
        let ids = self.store.member_ids(group_id).await?;
        if let Some(generation) = generation
            && let Err(e) = self.shared.put_member_ids(group_id, generation, &ids).await
        {
            tracing::warn!(error = %e, "filling the group cache failed");
        }
        Ok(ids)
    }

    /// The most recently active senders of a super group, most recent first.
    pub async fn active(&self, group_id: i64, limit: u32) -> Result<Vec<i64>, Error> {
        Ok(self.shared.active(group_id, limit).await?)
    }

    /// Forgets a group everywhere after a change to it.
    pub async fn forget(&self, group_id: i64) {
        self.forget_local(group_id);
        if let Err(e) = self.shared.invalidate(group_id).await {
            tracing::warn!(error = %e, group_id, "group cache invalidation failed; entries expire by TTL");
        }
    }

    /// Forgets this process's entries of a group (a change elsewhere was broadcast).
    pub fn forget_local(&self, group_id: i64) {
        let mut local = self.local.lock();
        self.forgets.fetch_add(1, Ordering::AcqRel);
        local.remove(&group_id);
    }

    fn cached(&self, group_id: i64, user: i64) -> Option<(GateGroup, Option<GateMember>)> {
        let local = self.local.lock();
        let entry = local.get(&group_id).filter(|e| e.at.elapsed() < self.ttl)?;
        Some((entry.group, *entry.members.get(&user)?))
    }

    async fn load(
        &self,
        group_id: i64,
        user: i64,
    ) -> Result<(GateGroup, Option<GateMember>), Error> {
        let forgets = self.forgets.load(Ordering::Acquire);
        let shared_group = self.shared.group(group_id).await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "group cache unavailable; reading the database");
            None
        });
        self.looked_up("shared_group", shared_group.is_some());
        let shared_member = self.shared.member(group_id, user).await.ok().flatten();
        self.looked_up("shared_member", shared_member.is_some());
        // Fills of the shared tier carry the generation read before the database.
        let generation = match (shared_group, shared_member) {
            (Some(_), Some(_)) => None,
            _ => self.shared.generation(group_id).await.ok(),
        };
        let group = match shared_group {
            Some(group) => group,
            None => {
                let group = self.store.group(group_id).await?.ok_or(Error::NotFound)?;
                let gate = GateGroup::from(&group);
                if let Some(generation) = generation {
                    let _ = self.shared.put_group(group_id, generation, gate).await;
                }
                gate
            }
        };
        let member = match shared_member {
            Some(member) => member,
            None => {
                let row = self
                    .store
                    .members(group_id, &[user])
                    .await?
                    .pop()
                    .map(|m| GateMember::from(&m));
                if let Some(generation) = generation {
                    let _ = self
                        .shared
                        .put_member(group_id, generation, user, row)
                        .await;
                }
                row
            }
        };
        self.remember(forgets, group_id, group, user, member);
        Ok((group, member))
    }

    /// Keeps what a load read, unless a forget came since `forgets` were counted.
    fn remember(
        &self,
        forgets: u64,
        group_id: i64,
        group: GateGroup,
        user: i64,
        member: Option<GateMember>,
    ) {
        let mut local = self.local.lock();
        if self.forgets.load(Ordering::Acquire) != forgets {
            return;
        }
        if local.len() >= self.max_groups && !local.contains_key(&group_id) {
            local.clear();
        }
        let fresh = || Entry {
            at: Instant::now(),
            group,
            members: HashMap::new(),
        };
        let entry = local.entry(group_id).or_insert_with(fresh);
        if entry.at.elapsed() >= self.ttl || entry.group.version != group.version {
            *entry = fresh();
        }
        entry.members.insert(user, member);
    }
}
