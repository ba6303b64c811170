//! Who may connect and hold a session. Connections not yet authenticated are capped per
//! source address and in total, and new connections per address per second; authenticated
//! ones per gateway (readiness turns NOT_SERVING near the cap, [`Admission::ready`]) and
//! per user ([`crate::connections`]); a session's platform must be one of a known set.
//! Each refusal is a fatal error frame naming the limit (an HTTP status before a WebSocket
//! upgrade) and is counted by reason.

use std::{
    collections::HashMap,
    net::IpAddr,
    num::NonZeroU32,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter, clock::Clock};
use parking_lot::Mutex;
use prometheus_client::{
    encoding::{EncodeLabelSet, EncodeLabelValue},
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct Limits {
    /// Connections from one address that have not authenticated yet.
    pub unauthenticated_per_addr: usize,
    /// Connections on this gateway that have not authenticated yet.
    pub unauthenticated_total: usize,
    /// New connections one address may open per second (bursts of twice that); 0 turns
    /// it off.
    pub connects_per_addr_per_sec: u32,
    /// Authenticated connections on this gateway; past 95 % readiness turns NOT_SERVING.
    pub max_connections: usize,
    /// Sessions one user may hold on this gateway.
    pub sessions_per_user: usize,
    /// What a session past `sessions_per_user` does.
    pub session_overflow: Overflow,
    /// The platforms a session may name; empty accepts any short name of `[a-z0-9_-]`.
    #[serde(deserialize_with = "imesh_kit::config::list")]
    pub platforms: Vec<String>,
    /// Whether the per-address limits apply to loopback clients too (local tools and
    /// `imesh bench` open many connections from one loopback address).
    pub limit_loopback: bool,
    /// Proxies (addresses or networks, `10.0.0.0/8`) whose clients' own addresses count:
    /// from a PROXY protocol v2 header on the TCP port, from the first `X-Forwarded-For`
    /// address on the WebSocket port. Anyone else's forwarded address is ignored.
    #[serde(deserialize_with = "imesh_kit::config::list")]
    pub trusted_proxies: Vec<Network>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            unauthenticated_per_addr: 64,
            unauthenticated_total: 10_000,
            connects_per_addr_per_sec: 50,
            max_connections: 100_000,
            sessions_per_user: 10,
            session_overflow: Overflow::CloseOldest,
            platforms: [
                "ios", "android", "ipad", "web", "desktop", "macos", "windows", "linux",
            ]
            .map(String::from)
            .to_vec(),
            limit_loopback: false,
            trusted_proxies: Vec::new(),
        }
    }
}

/// A network (`10.0.0.0/8`) or one address (`10.1.2.3`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(into = "String")]
pub struct Network(ipnet::IpNet);

impl std::str::FromStr for Network {
    type Err = ipnet::AddrParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.parse::<IpAddr>() {
            Ok(one) => Ok(Self(one.into())),
            Err(_) => text.parse().map(Self),
        }
    }
}

impl From<Network> for String {
    fn from(network: Network) -> Self {
        network.0.to_string()
    }
}

/// What a session past the per-user cap does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Overflow {
    /// The user's oldest session on this gateway is closed with a reason.
    CloseOldest,
    /// The new session is refused.
    RefuseNew,
}

/// Why a connection or session was refused: the counter's label.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Reason {
    unauthenticated_per_addr,
    unauthenticated_total,
    connect_rate,
    max_connections,
    sessions_per_user,
    platform,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Refusal {
    reason: Reason,
}

/// A refused connection or session: what to tell the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub reason: Reason,
    pub message: String,
    /// When to try again (zero: not by waiting).
    pub retry_after: Duration,
}

impl Refused {
    /// The status a client is told: a bad platform is the client's error; the rest are
    /// limits to wait out.
    pub fn code(&self) -> tonic::Code {
        match self.reason {
            Reason::platform => tonic::Code::InvalidArgument,
            _ => tonic::Code::ResourceExhausted,
        }
    }

    /// The wait in whole seconds, at least one: HTTP's `Retry-After`.
    pub fn retry_after_secs(&self) -> u64 {
        self.retry_after.as_secs_f64().ceil().max(1.0) as u64
    }
}

/// Longest platform name when any is accepted.
const MAX_PLATFORM: usize = 32;
/// Arrivals between two sweeps of the per-address rate limiter's idle entries.
const SWEEP_EVERY: usize = 4_096;

pub struct Admission {
    limits: Limits,
    /// Unauthenticated connections per address, and their total.
    pending: Mutex<(HashMap<IpAddr, usize>, usize)>,
    connects: Option<DefaultKeyedRateLimiter<IpAddr>>,
    arrivals: AtomicUsize,
    refused: Family<Refusal, Counter>,
    sessions_replaced: Counter,
}

impl Admission {
    pub fn new(limits: Limits) -> Self {
        let connects = NonZeroU32::new(limits.connects_per_addr_per_sec).map(|rate| {
            let burst = rate.saturating_add(rate.get());
            RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
        });
        Self {
            limits,
            pending: Mutex::default(),
            connects,
            arrivals: AtomicUsize::new(0),
            refused: Family::default(),
            sessions_replaced: Counter::default(),
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "admission_refused",
            "Connections and sessions refused at admission, by the limit they hit",
            self.refused.clone(),
        );
        registry.register(
            "sessions_replaced",
            "Sessions closed for a newer session of their user past sessions_per_user",
            self.sessions_replaced.clone(),
        );
    }

    /// A new connection from `addr`, held as unauthenticated until the guard drops.
    pub fn arrive(self: &Arc<Self>, addr: IpAddr) -> Result<Unauthenticated, Refused> {
        let per_addr = self.limits.limit_loopback || !addr.is_loopback();
        if let Some(connects) = self.connects.as_ref().filter(|_| per_addr) {
            if self
                .arrivals
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(SWEEP_EVERY)
            {
                connects.retain_recent();
            }
            if let Err(not_until) = connects.check_key(&addr) {
                // At least a millisecond: the token may be due by the time of the reading.
                let wait = not_until
                    .wait_time_from(connects.clock().now())
                    .max(Duration::from_millis(1));
                let per_sec = self.limits.connects_per_addr_per_sec;
                return Err(self.refuse(
                    Reason::connect_rate,
                    format!(
                        "connections: more than {per_sec} new ones per second from your address"
                    ),
                    wait,
                ));
            }
        }
        let mut pending = self.pending.lock();
        let (by_addr, total) = &mut *pending;
        if *total >= self.limits.unauthenticated_total {
            drop(pending);
            return Err(self.refuse(
                Reason::unauthenticated_total,
                "connections: the gateway holds too many unauthenticated connections; retry".into(),
                Duration::from_secs(1),
            ));
        }
        let from_addr = by_addr.entry(addr).or_default();
        if per_addr && *from_addr >= self.limits.unauthenticated_per_addr {
            let cap = self.limits.unauthenticated_per_addr;
            drop(pending);
            return Err(self.refuse(
                Reason::unauthenticated_per_addr,
                format!("connections: more than {cap} unauthenticated from your address"),
                Duration::from_secs(1),
            ));
        }
        *from_addr += 1;
        *total += 1;
        Ok(Unauthenticated {
            admission: self.clone(),
            addr,
        })
    }

    /// Whether `peer` is a trusted proxy, which names its clients' addresses.
    pub fn trusts(&self, peer: IpAddr) -> bool {
        self.limits
            .trusted_proxies
            .iter()
            .any(|network| network.0.contains(&peer))
    }

    /// Whether a session may name `platform`.
    pub fn check_platform(&self, platform: &str) -> Result<(), Refused> {
        let known = &self.limits.platforms;
        let ok = if known.is_empty() {
            (1..=MAX_PLATFORM).contains(&platform.len())
                && platform
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-".contains(&b))
        } else {
            known.iter().any(|p| p == platform)
        };
        if ok {
            return Ok(());
        }
        let reason = if known.is_empty() {
            format!("must be 1–{MAX_PLATFORM} characters of a-z, 0-9, '_', '-'")
        } else {
            format!("must be one of {}", known.join(", "))
        };
        Err(self.refuse(
            Reason::platform,
            format!("auth.platform: {reason}"),
            Duration::ZERO,
        ))
    }

    /// Whether another authenticated connection fits beside the `open` ones.
    pub fn check_capacity(&self, open: usize) -> Result<(), Refused> {
        if open < self.limits.max_connections {
            return Ok(());
        }
        Err(self.refuse(
            Reason::max_connections,
            "connections: this gateway is full; connect to another".into(),
            Duration::from_secs(1),
        ))
    }

    /// Whether a load balancer should send new clients here: below 95 % of the cap.
    pub fn ready(&self, open: usize) -> bool {
        open.saturating_mul(100) < self.limits.max_connections.saturating_mul(95)
    }

    /// A session refused past the per-user cap.
    pub fn too_many_sessions(&self) -> Refused {
        let cap = self.limits.sessions_per_user;
        self.refuse(
            Reason::sessions_per_user,
            format!("session: this user already holds {cap} sessions here"),
            Duration::ZERO,
        )
    }

    /// The reason given to a session closed for a newer one.
    pub fn replaced(&self) -> String {
        self.sessions_replaced.inc();
        let cap = self.limits.sessions_per_user;
        format!("session: closed for a newer session of this user (at most {cap})")
    }

    fn refuse(&self, reason: Reason, message: String, retry_after: Duration) -> Refused {
        self.refused.get_or_create(&Refusal { reason }).inc();
        Refused {
            reason,
            message,
            retry_after,
        }
    }
}

/// An unauthenticated connection, counted against its address until dropped.
pub struct Unauthenticated {
    admission: Arc<Admission>,
    addr: IpAddr,
}

impl Drop for Unauthenticated {
    fn drop(&mut self) {
        let mut pending = self.admission.pending.lock();
        let (by_addr, total) = &mut *pending;
        *total -= 1;
        if let Some(n) = by_addr.get_mut(&self.addr) {
            *n -= 1;
            if *n == 0 {
                by_addr.remove(&self.addr);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(limits: Limits) -> Arc<Admission> {
        Arc::new(Admission::new(limits))
    }

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    #[test]
    fn unauthenticated_connections_are_capped_per_address_and_freed_when_dropped() {
        let admission = admission(Limits {
            unauthenticated_per_addr: 2,
            connects_per_addr_per_sec: 0,
            ..Limits::default()
        });
        let held = [admission.arrive(A).unwrap(), admission.arrive(A).unwrap()];
        let refused = admission.arrive(A).err().unwrap();
        assert_eq!(refused.reason, Reason::unauthenticated_per_addr);
        let other = admission.arrive(B).unwrap();
        assert_eq!(admission.pending.lock().1, 3);
        drop(held);
        drop(other);
        assert_eq!(admission.pending.lock().1, 0);
        assert!(
            admission.pending.lock().0.is_empty(),
            "no entry left behind"
        );
        admission.arrive(A).unwrap();
    }

    #[test]
    fn loopback_clients_skip_the_per_address_limits_unless_told() {
        let limits = Limits {
            unauthenticated_per_addr: 1,
            connects_per_addr_per_sec: 1,
            ..Limits::default()
        };
        let local = IpAddr::from([127, 0, 0, 1]);
        let open = admission(limits.clone());
        let _held: Vec<_> = (0..5).map(|_| open.arrive(local).unwrap()).collect();
        let strict = admission(Limits {
            limit_loopback: true,
            ..limits
        });
        let _held = strict.arrive(local).unwrap();
        assert!(strict.arrive(local).is_err());
    }

    #[test]
    fn trusted_proxies_are_networks_or_single_addresses() {
        let admission = admission(Limits {
            trusted_proxies: vec!["10.0.0.0/8".parse().unwrap(), "192.0.2.7".parse().unwrap()],
            ..Limits::default()
        });
        assert!(admission.trusts(IpAddr::from([10, 9, 8, 7])));
        assert!(admission.trusts(IpAddr::from([192, 0, 2, 7])));
        assert!(!admission.trusts(IpAddr::from([192, 0, 2, 8])));
        assert!("10.0.0.0/33".parse::<Network>().is_err());
    }

    #[test]
    fn unauthenticated_connections_are_capped_in_total() {
        let admission = admission(Limits {
            unauthenticated_total: 3,
            connects_per_addr_per_sec: 0,
            ..Limits::default()
        });
        let ips = (1..=3).map(|i| IpAddr::from([10, 1, 0, i]));
        let _held: Vec<_> = ips.map(|ip| admission.arrive(ip).unwrap()).collect();
        let refused = admission.arrive(B).err().unwrap();
        assert_eq!(refused.reason, Reason::unauthenticated_total);
    }

    #[test]
    fn new_connections_per_address_are_rate_limited_with_a_wait() {
        let admission = admission(Limits {
            connects_per_addr_per_sec: 5,
            ..Limits::default()
        });
        // Bursts of twice the rate pass; the next is refused with a wait under a second.
        for _ in 0..10 {
            drop(admission.arrive(A).unwrap());
        }
        let refused = admission.arrive(A).err().unwrap();
        assert_eq!(refused.reason, Reason::connect_rate);
        assert!(
            refused.retry_after > Duration::ZERO && refused.retry_after <= Duration::from_secs(1)
        );
        drop(admission.arrive(B).unwrap());
    }

    #[test]
    fn platforms_must_be_known_or_when_any_is_accepted_short_and_plain() {
        let known = admission(Limits::default());
        known.check_platform("ios").unwrap();
        let refused = known.check_platform("ios-500").unwrap_err();
        assert!(
            refused
                .message
                .starts_with("auth.platform: must be one of ios, android")
        );
        let any = admission(Limits {
            platforms: Vec::new(),
            ..Limits::default()
        });
        any.check_platform("test-device-1").unwrap();
        for bad in ["", "Web", "a b", &"x".repeat(33)] {
            assert_eq!(
                any.check_platform(bad).unwrap_err().reason,
                Reason::platform,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn readiness_turns_off_at_95_percent_of_the_cap_and_the_cap_refuses() {
        let admission = admission(Limits {
            max_connections: 100,
            ..Limits::default()
        });
        assert!(admission.ready(94));
        assert!(!admission.ready(95));
        admission.check_capacity(99).unwrap();
        assert_eq!(
            admission.check_capacity(100).unwrap_err().reason,
            Reason::max_connections
        );
    }
}
