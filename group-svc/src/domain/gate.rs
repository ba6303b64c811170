//! The send gate of every group message: `CheckSend` in the seed's fixed order
//! ([`super::rules::check_send`]) over a short per-process cache of group info and member
//! rows (1–3 s as seed 000 asks) in front of the database. Every change of a group forgets
//! its entries in this process; other replicas see it when their entries expire.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use parking_lot::Mutex;

use super::{Error, Group, Member, Role, rules};
use crate::store::GroupStore;

/// What the gate answers for an allowed send: the decision as of now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowed {
    pub role: Role,
    pub map_id: u32,
    pub version: i64,
    pub join_seq: i64,
    pub group: GroupSummary,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupSummary {
    pub kind: super::GroupType,
    pub member_count: u32,
}

struct Entry {
    at: Instant,
    group: Arc<Group>,
    members: HashMap<i64, Option<Member>>,
}

pub struct Gate {
    store: Arc<dyn GroupStore>,
    ttl: Duration,
    max_groups: usize,
    groups: Mutex<HashMap<i64, Entry>>,
}

impl Gate {
    pub fn new(store: Arc<dyn GroupStore>, ttl: Duration, max_groups: usize) -> Self {
        Self {
            store,
            ttl,
            max_groups,
            groups: Mutex::new(HashMap::new()),
        }
    }

    /// May `user` send to `group_id` now, with `needs` bits beyond SEND_MSG?
    pub async fn check(&self, group_id: i64, user: i64, needs: u32) -> Result<Allowed, Error> {
        let (group, member) = match self.cached(group_id, user) {
            Some(hit) => hit,
            None => self.load(group_id, user).await?,
        };
        rules::check_send(&group, member.as_ref(), needs, imesh_kit::ids::unix_ms())?;
        let member = member.expect("check_send passed: a member");
        Ok(Allowed {
            role: member.role,
            map_id: member.map_id,
            version: group.version,
            join_seq: member.join_seq,
            group: GroupSummary {
                kind: group.kind,
                member_count: group.member_count,
            },
        })
    }

    /// Drops this process's entries of a group (after each change to it).
    pub fn forget(&self, group_id: i64) {
        self.groups.lock().remove(&group_id);
    }

    fn cached(&self, group_id: i64, user: i64) -> Option<(Arc<Group>, Option<Member>)> {
        let groups = self.groups.lock();
        let entry = groups
            .get(&group_id)
            .filter(|e| e.at.elapsed() < self.ttl)?;
        Some((entry.group.clone(), entry.members.get(&user)?.clone()))
    }

    async fn load(&self, group_id: i64, user: i64) -> Result<(Arc<Group>, Option<Member>), Error> {
        let group = Arc::new(self.store.group(group_id).await?.ok_or(Error::NotFound)?);
        let member = self.store.members(group_id, &[user]).await?.pop();
        let mut groups = self.groups.lock();
        if groups.len() >= self.max_groups && !groups.contains_key(&group_id) {
            groups.clear();
        }
        let fresh = |group: &Arc<Group>| Entry {
            at: Instant::now(),
            group: group.clone(),
            members: HashMap::new(),
        };
        let entry = groups.entry(group_id).or_insert_with(|| fresh(&group));
        if entry.at.elapsed() >= self.ttl || entry.group.version != group.version {
            *entry = fresh(&group);
        }
        entry.members.insert(user, member.clone());
        Ok((group, member))
    }
}
