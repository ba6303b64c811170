//! Calls that must reach one replica per key: a channel to each address a service's name
//! resolves to, and rendezvous hashing to pick the one that owns a key. Whoever writes to a
//! conversation (gateways' sends, group-svc's notices) sends to the message-svc replica
//! owning the conversation ([`direct_key`], [`group_key`]), so one replica (one writer,
//! one outbox relay) puts its messages in order all the way out. When a replica comes or
//! goes, only the keys it owns move.

use std::{
    collections::BTreeMap,
    hash::{BuildHasher, BuildHasherDefault, DefaultHasher},
    net::SocketAddr,
    sync::{Arc, Weak},
};

use parking_lot::RwLock;
use std::time::{Duration, Instant};

use super::{Channel, Peers, RESOLVE_EVERY};

/// The replicas of one service, each with its own channel.
#[derive(Clone)]
pub struct Keyed {
    members: Arc<RwLock<BTreeMap<SocketAddr, Channel>>>,
    /// Replicas a call to failed at the transport, left out of [`Keyed::split`] until then.
    down: Arc<RwLock<BTreeMap<SocketAddr, Instant>>>,
    /// Until the name first resolves: calls balanced over whatever it resolves to.
    fallback: Channel,
}

/// One replica's channel, as [`Keyed::split`] hands it out.
#[derive(Clone)]
pub struct Replica {
    pub channel: Channel,
    addr: Option<SocketAddr>,
}

/// How long a replica a call failed to reach is left out.
const DOWN_FOR: Duration = Duration::from_secs(5);

impl Keyed {
    /// Splits `items` by the replica owning each one's key, keeping their order within
    /// each replica's share; one share, with no split, while one replica (or none yet) is
    /// known. Replicas marked [`Keyed::down`] own nothing while others are up: their keys go
    /// to their next choice.
    pub fn split<T>(&self, items: Vec<T>, key: impl Fn(&T) -> u64) -> Vec<(Replica, Vec<T>)> {
        let members = self.members.read();
        let now = Instant::now();
        let down = self.down.read();
        let up: Vec<&SocketAddr> = members
            .keys()
            .filter(|a| down.get(*a).is_none_or(|until| *until <= now))
            .collect();
        let addrs: Vec<&SocketAddr> = if up.is_empty() {
            members.keys().collect()
        } else {
            up
        };
        if addrs.len() <= 1 {
            let only = match addrs.first() {
                Some(addr) => Replica {
                    channel: members[*addr].clone(),
                    addr: Some(**addr),
                },
                None => Replica {
                    channel: self.fallback.clone(),
                    addr: None,
                },
            };
            return vec![(only, items)];
        }
        let mut shares: Vec<Vec<T>> = addrs.iter().map(|_| Vec::new()).collect();
        for item in items {
            shares[owner(&addrs, key(&item))].push(item);
        }
        addrs
            .into_iter()
            .zip(shares)
            .filter(|(_, share)| !share.is_empty())
            .map(|(addr, share)| {
                let replica = Replica {
                    channel: members[addr].clone(),
                    addr: Some(*addr),
                };
                (replica, share)
            })
            .collect()
    }

    /// The replica owning `key`, as [`Keyed::split`] would choose it.
    pub fn owner(&self, key: u64) -> Replica {
        let mut shares = self.split(vec![()], |_| key);
        shares.pop().expect("one item, one share").0
    }

    /// Leaves `replica` out for a few seconds: a call to it failed at the transport (it
    /// died, or is restarting). False when there is no other to turn to.
    pub fn down(&self, replica: &Replica) -> bool {
        let Some(addr) = replica.addr else {
            return false;
        };
        let others = self.members.read().len() > 1;
        if others {
            self.down.write().insert(addr, Instant::now() + DOWN_FOR);
        }
        others
    }

    /// Leaves `replica` out ([`Keyed::down`]) when `status` says a call could not reach it:
    /// UNAVAILABLE, or UNKNOWN, as tonic reports a connection torn down mid-call. True when
    /// another replica takes its keys meanwhile.
    pub fn unreachable(&self, replica: &Replica, status: &tonic::Status) -> bool {
        matches!(
            status.code(),
            tonic::Code::Unavailable | tonic::Code::Unknown
        ) && self.down(replica)
    }

    /// The replicas known now.
    pub fn len(&self) -> usize {
        self.members.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The key of the direct conversation between users `a` and `b` (either way round).
pub fn direct_key(a: i64, b: i64) -> u64 {
    BuildHasherDefault::<DefaultHasher>::default().hash_one(("d", a.min(b), a.max(b)))
}

/// The key of a group's conversation.
pub fn group_key(group_id: i64) -> u64 {
    BuildHasherDefault::<DefaultHasher>::default().hash_one(("g", group_id))
}

/// The index of the address owning `key`: the highest hash of (address, key).
fn owner(addrs: &[&SocketAddr], key: u64) -> usize {
    let hasher = BuildHasherDefault::<DefaultHasher>::default();
    (0..addrs.len())
        .max_by_key(|i| hasher.hash_one((addrs[*i], key)))
        .unwrap_or(0)
}

impl Peers {
    /// [`Keyed`] channels to the service at `addr` (`host:port`): an IP address is one
    /// replica, as is each of a comma-separated list of them; a host name is resolved now
    /// and every 10 s (a headless Service's pods).
    pub fn keyed(&self, addr: &str) -> anyhow::Result<Keyed> {
        let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
        let fixed = if addr.contains(',') {
            super::listed(addr)?
        } else if let Ok(ip) = host.trim_matches(['[', ']']).parse::<std::net::IpAddr>() {
            let port = addr.rsplit_once(':').map_or("", |(_, port)| port).parse()?;
            vec![SocketAddr::new(ip, port)]
        } else {
            // A host name: balanced over what it resolves to until it first resolves.
            let keyed = Keyed {
                members: Arc::default(),
                down: Arc::default(),
                fallback: self.channel(addr)?,
            };
            let members = Arc::downgrade(&keyed.members);
            tokio::spawn(follow(addr.to_owned(), self.clone(), members));
            return Ok(keyed);
        };
        let mut members = BTreeMap::new();
        for replica in fixed {
            members.insert(replica, self.channel(&replica.to_string())?);
        }
        let fallback = members
            .values()
            .next()
            .cloned()
            .expect("one replica at least");
        Ok(Keyed {
            members: Arc::new(RwLock::new(members)),
            down: Arc::default(),
            fallback,
        })
    }
}

/// Keeps `members` in step with the addresses `name` resolves to, until it is dropped.
async fn follow(name: String, peers: Peers, members: Weak<RwLock<BTreeMap<SocketAddr, Channel>>>) {
    loop {
        // Keep the replicas we had when resolving fails: a hiccup must not move every key.
        if let Some(found) = super::resolved(&name).await {
            let Some(members) = members.upgrade() else {
                return;
            };
            let mut next = BTreeMap::new();
            for addr in found {
                let known = members.read().get(&addr).cloned();
                let channel = match known {
                    Some(channel) => channel,
                    None => match peers.channel(&addr.to_string()) {
                        Ok(channel) => channel,
                        Err(_) => continue,
                    },
                };
                next.insert(addr, channel);
            }
            if !next.is_empty() {
                *members.write() = next;
            }
        }
        if members.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(RESOLVE_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(n: u16) -> Vec<SocketAddr> {
        (0..n)
            .map(|i| SocketAddr::from(([10, 0, 0, i as u8 + 1], 50053)))
            .collect()
    }

    #[test]
    fn keys_spread_over_replicas_and_only_a_gone_replicas_keys_move() {
        let three = addrs(3);
        let refs: Vec<&SocketAddr> = three.iter().collect();
        let before: Vec<usize> = (0..3000u64).map(|k| owner(&refs, k)).collect();
        for replica in 0..3 {
            let share = before.iter().filter(|o| **o == replica).count();
            assert!(
                (800..1200).contains(&share),
                "replica {replica} owns {share}"
            );
        }
        let two: Vec<&SocketAddr> = vec![&three[0], &three[2]];
        for (key, owned) in before.iter().enumerate() {
            let now = two[owner(&two, key as u64)];
            if *owned != 1 {
                assert_eq!(
                    now, refs[*owned],
                    "key {key} moved though its replica stayed"
                );
            }
        }
    }

    #[tokio::test]
    async fn one_replica_takes_everything_in_order() {
        let keyed = Peers::default().keyed("127.0.0.1:1").unwrap();
        assert_eq!(keyed.len(), 1);
        let shares = keyed.split(vec![5, 3, 9], |k| *k);
        assert_eq!(shares.len(), 1);
        assert_eq!(shares[0].1, vec![5, 3, 9]);
    }

    #[tokio::test]
    async fn a_listed_set_of_replicas_splits_keys_keeping_each_shares_order() {
        let keyed = Peers::default()
            .keyed("127.0.0.1:1, 127.0.0.1:2,127.0.0.1:3")
            .unwrap();
        assert_eq!(keyed.len(), 3);
        let shares = keyed.split((0..300u64).collect(), |k| *k);
        assert_eq!(shares.len(), 3, "300 keys reach all three");
        for (_, share) in &shares {
            assert!(share.windows(2).all(|w| w[0] < w[1]), "order kept");
        }
        assert_eq!(shares.iter().map(|(_, s)| s.len()).sum::<usize>(), 300);
        let again = keyed.split((0..300u64).collect(), |k| *k);
        let firsts = |s: &[(Replica, Vec<u64>)]| s.iter().map(|(_, v)| v[0]).collect::<Vec<_>>();
        assert_eq!(
            firsts(&shares),
            firsts(&again),
            "the same keys, the same replicas"
        );
        assert!(keyed.down(&shares[0].0));
        let without = keyed.split((0..300u64).collect(), |k| *k);
        assert_eq!(without.len(), 2, "a replica marked down owns nothing");
        assert_eq!(without.iter().map(|(_, s)| s.len()).sum::<usize>(), 300);
        for (_, kept) in &shares[1..] {
            assert!(
                without
                    .iter()
                    .any(|(_, share)| kept.iter().all(|k| share.contains(k))),
                "the others keep their keys"
            );
        }
        let refused = tonic::Status::invalid_argument("bad field");
        assert!(
            !keyed.unreachable(&shares[1].0, &refused),
            "a refusal leaves the replica in"
        );
        assert_eq!(keyed.split((0..300u64).collect(), |k| *k).len(), 2);
        let gone = tonic::Status::unavailable("connection refused");
        assert!(keyed.unreachable(&shares[1].0, &gone));
        let left = keyed.split((0..300u64).collect(), |k| *k);
        assert_eq!(left.len(), 1, "an unreachable replica is left out too");
        let lone = Peers::default().keyed("127.0.0.1:1").unwrap();
        let (replica, _) = lone.split(vec![1], |k| *k).remove(0);
        assert!(!lone.down(&replica), "a lone replica is never left out");
        assert!(Peers::default().keyed("127.0.0.1:1,nonsense").is_err());
    }

    #[tokio::test]
    async fn a_groups_notices_reach_the_replica_its_sends_reach() {
        let keyed = Peers::default()
            .keyed("127.0.0.1:1, 127.0.0.1:2,127.0.0.1:3")
            .unwrap();
        for group in 1..=50i64 {
            // A gateway splits its sends by conversation key; group-svc asks for the owner.
            let sends = keyed.split(vec![group], |g| group_key(*g));
            let notices = keyed.owner(group_key(group));
            assert_eq!(sends[0].0.addr, notices.addr, "group {group}");
        }
        assert_eq!(direct_key(3, 9), direct_key(9, 3), "either way round");
        assert_ne!(
            direct_key(3, 9),
            group_key(3),
            "direct and group keys differ"
        );
    }
}
