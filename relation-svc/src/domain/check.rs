//! The relation check of every direct send (seed 001 §4): both directions of a user's
//! relation with many peers in one call, served from a short local cache → the shared
//! cache (Redis hash per user, or in-process) → the database, which stays the truth.
//! Every write forgets the pair's entries (delete-on-write).

use std::{collections::HashMap, sync::Arc};

use imesh_kit::error::StoreError;

use super::{EdgeCache, Error, FriendStatus, FriendStore, LocalCache, UserStore, invalid};

/// Most peers one check may name.
pub const MAX_PEERS_PER_CHECK: usize = 500;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Account {
    Active,
    Disabled,
    Missing,
}

/// What an owner's row about one peer says, as far as checks care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edge {
    pub friend: bool,
    pub blocked: bool,
}

/// What the caches hold per (owner, peer): the owner's account and their row about the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cached {
    pub account: Account,
    pub edge: Option<Edge>,
}

/// An owner's whole row set, as loaded from the database into the caches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Known {
    pub account: Account,
    pub edges: HashMap<i64, Edge>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    None,
    Both,
    MineOnly,
    TheirsOnly,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerRelation {
    pub peer: i64,
    /// The peer exists and is not disabled.
    pub exists: bool,
    pub relation: Relation,
    pub blocked_by_me: bool,
    pub blocked_me: bool,
}

pub struct Checker {
    local: LocalCache,
    shared: Arc<dyn EdgeCache>,
    users: Arc<dyn UserStore>,
    friends: Arc<dyn FriendStore>,
}

impl Checker {
    pub fn new(
        local: LocalCache,
        shared: Arc<dyn EdgeCache>,
        users: Arc<dyn UserStore>,
        friends: Arc<dyn FriendStore>,
    ) -> Self {
        Self {
            local,
            shared,
            users,
            friends,
        }
    }

    /// Both directions of `user`'s relation with each of `peers`, in the order asked.
    pub async fn check(&self, user: i64, peers: &[i64]) -> Result<Vec<PeerRelation>, Error> {
        if peers.len() > MAX_PEERS_PER_CHECK {
            return Err(invalid(
                "peer_ids",
                format!("at most {MAX_PEERS_PER_CHECK} per call"),
            ));
        }
        let pairs: Vec<(i64, i64)> = peers.iter().flat_map(|&p| [(user, p), (p, user)]).collect();
        let found = self.lookup(&pairs).await?;
        Ok(peers
            .iter()
            .zip(found.chunks_exact(2))
            .map(|(&peer, both)| relation(peer, both[0], both[1]))
            .collect())
    }

    /// Both directions of each `(user, peer)` pair's relation, in the order asked: the
    /// check of many senders' direct messages at once.
    pub async fn check_pairs(&self, pairs: &[(i64, i64)]) -> Result<Vec<PeerRelation>, Error> {
        if pairs.len() > MAX_PEERS_PER_CHECK {
            return Err(invalid(
                "pairs",
                format!("at most {MAX_PEERS_PER_CHECK} per call"),
            ));
        }
        if pairs.iter().any(|&(user, peer)| user <= 0 || peer <= 0) {
            return Err(invalid("pairs", "user_id and peer_id must be user ids"));
        }
        let both: Vec<(i64, i64)> = pairs.iter().flat_map(|&(u, p)| [(u, p), (p, u)]).collect();
        let found = self.lookup(&both).await?;
        Ok(pairs
            .iter()
            .zip(found.chunks_exact(2))
            .map(|(&(_, peer), both)| relation(peer, both[0], both[1]))
            .collect())
    }

    /// Drops what the caches hold about `owners` (after a write to their rows or account).
    /// A failing shared cache is logged: its entries expire on their own.
    pub async fn forget(&self, owners: &[i64]) {
        self.local.forget(owners);
        if let Err(e) = self.shared.invalidate(owners).await {
            tracing::warn!(error = %e, ?owners, "relation cache invalidation failed; entries expire by TTL");
        }
    }

    async fn lookup(&self, pairs: &[(i64, i64)]) -> Result<Vec<Cached>, Error> {
        let forgets = self.local.forgets();
        let mut out: Vec<Option<Cached>> =
            pairs.iter().map(|&(o, p)| self.local.get(o, p)).collect();
        let missing: Vec<usize> = (0..pairs.len()).filter(|&i| out[i].is_none()).collect();
        if missing.is_empty() {
            return Ok(out.into_iter().flatten().collect());
        }
        let ask: Vec<(i64, i64)> = missing.iter().map(|&i| pairs[i]).collect();
        let (shared, fill) = match self.shared.get(&ask).await {
            Ok(found) => (found, true),
            Err(e) => {
                tracing::warn!(error = %e, "relation cache unavailable; reading the database");
                (vec![None; ask.len()], false)
            }
        };
        let mut unloaded: Vec<i64> = Vec::new();
        for (&i, hit) in missing.iter().zip(shared) {
            match hit {
                Some(cached) => {
                    self.local.put(forgets, pairs[i].0, pairs[i].1, cached);
                    out[i] = Some(cached);
                }
                None => unloaded.push(pairs[i].0),
            }
        }
        if !unloaded.is_empty() {
            unloaded.sort_unstable();
            unloaded.dedup();
            let known = self.load(&unloaded, fill).await?;
            for i in missing {
                if out[i].is_none() {
                    let (owner, peer) = pairs[i];
                    let k = &known[&owner];
                    let cached = Cached {
                        account: k.account,
                        edge: k.edges.get(&peer).copied(),
                    };
                    self.local.put(forgets, owner, peer, cached);
                    out[i] = Some(cached);
                }
            }
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// Reads owners' accounts and rows from the database and, with `fill`, fills the
    /// shared cache.
    async fn load(&self, owners: &[i64], fill: bool) -> Result<HashMap<i64, Known>, Error> {
        // Read before the database: rows a write changes meanwhile are not stored.
        let generations = match fill {
            true => Some(self.shared.generations(owners).await),
            false => None,
        };
        let users = self.users.by_ids(owners).await?;
        let mut known: HashMap<i64, Known> = owners
            .iter()
            .map(|&o| {
                (
                    o,
                    Known {
                        account: Account::Missing,
                        edges: HashMap::new(),
                    },
                )
            })
            .collect();
        for user in users {
            if let Some(k) = known.get_mut(&user.id) {
                k.account = if user.disabled {
                    Account::Disabled
                } else {
                    Account::Active
                };
            }
        }
        for row in self.friends.rows_of(owners).await? {
            if let Some(k) = known.get_mut(&row.owner) {
                let edge = Edge {
                    friend: row.status == FriendStatus::Friend,
                    blocked: row.blocked,
                };
                k.edges.insert(row.peer, edge);
            }
        }
        if let Some(generations) = generations
            && let Err(e) = self.fill(owners, generations, &known).await
        {
            tracing::warn!(error = %e, "filling the relation cache failed");
        }
        Ok(known)
    }

    /// Stores each owner's rows at the generation read before the database.
    async fn fill(
        &self,
        owners: &[i64],
        generations: Result<Vec<u64>, StoreError>,
        known: &HashMap<i64, Known>,
    ) -> Result<(), StoreError> {
        let entries: Vec<(i64, u64, Known)> = owners
            .iter()
            .zip(generations?)
            .map(|(o, generation)| (*o, generation, known[o].clone()))
            .collect();
        self.shared.put(&entries).await
    }
}

fn relation(peer: i64, mine: Cached, theirs: Cached) -> PeerRelation {
    let friend = |c: Cached| c.edge.is_some_and(|e| e.friend);
    let blocked = |c: Cached| c.edge.is_some_and(|e| e.blocked);
    let relation = match (friend(mine), friend(theirs)) {
        (true, true) => Relation::Both,
        (true, false) => Relation::MineOnly,
        (false, true) => Relation::TheirsOnly,
        (false, false) => Relation::None,
    };
    PeerRelation {
        peer,
        exists: theirs.account == Account::Active,
        relation,
        blocked_by_me: blocked(mine),
        blocked_me: blocked(theirs),
    }
}
