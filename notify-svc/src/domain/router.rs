//! Routing: inbox entries → the online devices of their users → one Push per gateway; live
//! events of read-fanout groups → the gateways holding their members → one Push each.

use std::{collections::HashMap, sync::Arc, time::Duration};

use bytes::Bytes;
use imesh_kit::{error::StoreError, metrics::Registry};
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, histogram::Histogram},
};

use super::{
    offline::OfflinePush,
    ports::{ConnectionPush, DeviceRoute, Entry, Gateways, Presence},
};

/// Most users one presence query names.
pub const MAX_PRESENCE_USERS: usize = 500;

/// A list of 1–[`MAX_PRESENCE_USERS`] user ids, or why not.
fn checked_users(users: &[i64]) -> Result<(), Error> {
    let reason = if users.is_empty() || users.len() > MAX_PRESENCE_USERS {
        format!("must hold 1–{MAX_PRESENCE_USERS} users")
    } else if users.iter().any(|u| *u <= 0) {
        "must be user ids".to_owned()
    } else {
        return Ok(());
    };
    Err(Error::Invalid {
        field: "user_ids",
        reason,
    })
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    NotFound(&'static str),
    #[error("{0}")]
    Precondition(String),
    /// Another service could not be asked.
    #[error("a peer service failed")]
    Peer(#[source] anyhow::Error),
}

/// How many sessions a user may hold at once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DevicePolicy {
    /// One per platform: a new login on a platform closes the user's other device there.
    #[default]
    OnePerPlatform,
    /// Any number of devices (still one connection per device).
    Unlimited,
}

pub struct Router {
    presence: Arc<dyn Presence>,
    gateways: Arc<dyn Gateways>,
    ttl: Duration,
    policy: DevicePolicy,
    metrics: RouterMetrics,
    /// Where the entries of users with no live connection go; `None`: offline push is off.
    offline: Option<OfflinePush>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GatewayCall {
    ok: bool,
}

struct RouterMetrics {
    /// Device connections handed entries by a gateway that answered.
    pushed: Counter,
    /// Online device connections per delivery.
    fanout: Histogram,
    /// Push calls to gateways (one per gateway per delivery), by outcome.
    calls: Family<GatewayCall, Counter>,
}

impl RouterMetrics {
    fn new() -> Self {
        Self {
            pushed: Counter::default(),
            fanout: Histogram::new(imesh_kit::metrics::size_buckets()),
            calls: Family::default(),
        }
    }

    fn called(&self, ok: bool) {
        self.calls.get_or_create(&GatewayCall { ok }).inc();
    }
}

impl Router {
    pub fn new(
        presence: Arc<dyn Presence>,
        gateways: Arc<dyn Gateways>,
        ttl: Duration,
        policy: DevicePolicy,
    ) -> Self {
        Self {
            presence,
            gateways,
            ttl,
            policy,
            metrics: RouterMetrics::new(),
            offline: None,
        }
    }

    /// Hands the entries of users with no live connection to `offline`.
    pub fn with_offline_push(mut self, offline: OfflinePush) -> Self {
        self.offline = Some(offline);
        self
    }

    /// Reports pushes, fanout sizes and gateway calls in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        let m = &self.metrics;
        registry.register(
            "pushed_connections",
            "Device connections handed events by their gateway",
            m.pushed.clone(),
        );
        registry.register(
            "delivery_fanout_connections",
            "Online device connections one delivery reached",
            m.fanout.clone(),
        );
        registry.register(
            "gateway_push_calls",
            "Push calls to gateways, by outcome",
            m.calls.clone(),
        );
        if let Some(offline) = &self.offline {
            offline.register(registry);
        }
    }

    /// Records a device's route and, for its gateway, the read-fanout groups of its user.
    /// A `fresh` connection first closes the sessions it replaces under the policy.
    pub async fn online(
        &self,
        route: DeviceRoute,
        super_groups: &[i64],
        fresh: bool,
    ) -> Result<(), Error> {
        if route.user_id <= 0 {
            return Err(Error::Invalid {
                field: "device.user_id",
                reason: "must be a user id".into(),
            });
        }
        if route.device_id.is_empty() || route.gateway_addr.is_empty() {
            return Err(Error::Invalid {
                field: "device",
                reason: "device_id and gateway_addr must be set".into(),
            });
        }
        if super_groups.iter().any(|g| *g <= 0) {
            return Err(Error::Invalid {
                field: "super_group_ids",
                reason: "must be group ids".into(),
            });
        }
        if fresh {
            self.replace(&route).await?;
        }
        self.presence.online(&route, self.ttl).await?;
        if !super_groups.is_empty() {
            let gateway = route.gateway_addr.as_str();
            self.presence
                .subscribe(gateway, super_groups, self.ttl)
                .await?;
        }
        Ok(())
    }

    /// Closes every live session of `users` (1–500), telling each client `reason`; returns
    /// how many there were.
    pub async fn disconnect(&self, users: &[i64], reason: &str) -> Result<u32, Error> {
        checked_users(users)?;
        let routes = self.presence.lookup(users).await?;
        let sessions = routes.len() as u32;
        self.close(routes, |_| reason.to_owned()).await?;
        Ok(sessions)
    }

    /// Forgets `routes` and closes their connections, one Kick per gateway and reason.
    /// Best effort per gateway: one that cannot be told is logged.
    async fn close(
        &self,
        routes: Vec<DeviceRoute>,
        reason: impl Fn(&DeviceRoute) -> String,
    ) -> Result<(), Error> {
        let forgets = routes.iter().map(|old| {
            self.presence
                .offline(old.user_id, &old.device_id, old.conn_id)
        });
        futures::future::try_join_all(forgets).await?;
        let mut kicks: HashMap<(String, String), Vec<u64>> = HashMap::new();
        for old in routes {
            let why = reason(&old);
            kicks
                .entry((old.gateway_addr, why))
                .or_default()
                .push(old.conn_id);
        }
        let calls = kicks.into_iter().map(|((addr, reason), conns)| async move {
            if let Err(e) = self.gateways.kick(&addr, conns, reason).await {
                tracing::warn!(gateway = %addr, error = %format!("{e:#}"), "closing sessions failed");
            }
        });
        futures::future::join_all(calls).await;
        Ok(())
    }

    /// Closes the user's sessions `route` replaces: the same device's older connection and,
    /// with one session per platform, other devices on its platform. Best effort per
    /// gateway: a gateway that cannot be told is logged, and its stale route is dropped.
    async fn replace(&self, route: &DeviceRoute) -> Result<(), Error> {
        let replaced: Vec<DeviceRoute> = self
            .presence
            .lookup(&[route.user_id])
            .await?
            .into_iter()
            .filter(|old| {
                let same_device = old.device_id == route.device_id;
                let same_platform = self.policy == DevicePolicy::OnePerPlatform
                    && !route.platform.is_empty()
                    && old.platform == route.platform;
                let same_conn = same_device
                    && old.gateway_addr == route.gateway_addr
                    && old.conn_id == route.conn_id;
                !same_conn && (same_device || same_platform)
            })
            .collect();
        self.close(replaced, |old| {
            if old.device_id == route.device_id {
                "session: this device connected again".to_owned()
            } else {
                format!("session: signed in on another {} device", route.platform)
            }
        })
        .await
    }

    /// Pushes each group's events to every gateway holding members of it, one call per
    /// gateway, all at once. Returns how many gateways were reached; a failing gateway is
    /// logged and skipped (its devices catch up through History).
    pub async fn deliver_to_groups(&self, events: Vec<(i64, Bytes)>) -> Result<u32, Error> {
        if events.iter().any(|(group, _)| *group <= 0) {
            return Err(Error::Invalid {
                field: "events.group_id",
                reason: "must be group ids".into(),
            });
        }
        let mut by_gateway: HashMap<String, Vec<(i64, Bytes)>> = HashMap::new();
        let lookups = events
            .iter()
            .map(|(group, _)| self.presence.gateways_of(*group));
        let gateways = futures::future::try_join_all(lookups).await?;
        for ((group, event), gateways) in events.into_iter().zip(gateways) {
            for gateway in gateways {
                by_gateway
                    .entry(gateway)
                    .or_default()
                    .push((group, event.clone()));
            }
        }
        let calls = by_gateway.into_iter().map(|(addr, events)| async move {
            let result = self.gateways.push_groups(&addr, events).await;
            (addr, result)
        });
        let mut reached = 0;
        for (addr, result) in futures::future::join_all(calls).await {
            self.metrics.called(result.is_ok());
            match result {
                Ok(()) => reached += 1,
                Err(e) => {
                    tracing::warn!(gateway = %addr, error = %format!("{e:#}"), "group push to gateway failed")
                }
            }
        }
        Ok(reached)
    }

    /// Each distinct user of `users` (1–500), in order, with the sorted platforms of their
    /// live connections (none: offline).
    pub async fn presence(&self, users: &[i64]) -> Result<Vec<(i64, Vec<String>)>, Error> {
        checked_users(users)?;
        let mut distinct = users.to_vec();
        let mut seen = std::collections::HashSet::new();
        distinct.retain(|u| seen.insert(*u));
        let mut platforms: HashMap<i64, Vec<String>> = HashMap::new();
        for route in self.presence.lookup(&distinct).await? {
            platforms
                .entry(route.user_id)
                .or_default()
                .push(route.platform);
        }
        Ok(distinct
            .into_iter()
            .map(|user| {
                let mut on = platforms.remove(&user).unwrap_or_default();
                on.sort_unstable();
                on.dedup();
                (user, on)
            })
            .collect())
    }

    pub async fn offline(&self, user_id: i64, device_id: &str, conn_id: u64) -> Result<(), Error> {
        Ok(self.presence.offline(user_id, device_id, conn_id).await?)
    }

    /// Pushes a live-only `event` (sync_seq 0, never stored) to every online device of
    /// `users`; returns how many devices it reached.
    pub async fn deliver_live(&self, users: Vec<i64>, event: Bytes) -> Result<u32, Error> {
        let live = users
            .into_iter()
            .map(|user| {
                let entry = Entry {
                    sync_seq: 0,
                    event: event.clone(),
                };
                (user, vec![entry])
            })
            .collect();
        self.deliver(live).await
    }

    /// Pushes each user's entries to every online device, one call per gateway, all
    /// gateways at once. Returns how many devices were reached. A gateway that fails is
    /// logged and skipped: its devices catch up by pulling.
    pub async fn deliver(&self, deliveries: Vec<(i64, Vec<Entry>)>) -> Result<u32, Error> {
        let users: Vec<i64> = deliveries.iter().map(|(u, _)| *u).collect();
        let routes = self.presence.lookup(&users).await?;
        let mut by_user: HashMap<i64, Vec<Entry>> = deliveries.into_iter().collect();
        let mut by_gateway: HashMap<String, Vec<ConnectionPush>> = HashMap::new();
        let mut owners: HashMap<(String, u64), DeviceRoute> = HashMap::new();
        let mut users_left: HashMap<i64, usize> = HashMap::new();
        for route in &routes {
            *users_left.entry(route.user_id).or_default() += 1;
        }
        for route in routes {
            let left = users_left.get_mut(&route.user_id).expect("counted above");
            *left -= 1;
            // The last device of a user takes the entries; the others get a copy.
            let entries = if *left == 0 {
                by_user.remove(&route.user_id).unwrap_or_default()
            } else {
                by_user.get(&route.user_id).cloned().unwrap_or_default()
            };
            by_gateway
                .entry(route.gateway_addr.clone())
                .or_default()
                .push(ConnectionPush {
                    conn_id: route.conn_id,
                    entries,
                });
            owners.insert((route.gateway_addr.clone(), route.conn_id), route);
        }
        // What is left belongs to users with no live connection; live-only events
        // (sync_seq 0) are for live devices alone.
        if let Some(offline) = &self.offline {
            by_user.retain(|_, entries| entries.iter().any(|e| e.sync_seq > 0));
            offline.offer(by_user.into_iter().collect());
        }
        let devices = owners.len() as u32;
        self.metrics.fanout.observe(f64::from(devices));
        let calls = by_gateway.into_iter().map(|(addr, pushes)| async move {
            let count = pushes.len() as u64;
            let result = self.gateways.push(&addr, pushes).await;
            (addr, count, result)
        });
        for (addr, count, result) in futures::future::join_all(calls).await {
            self.metrics.called(result.is_ok());
            match result {
                Ok(gone) => {
                    self.metrics
                        .pushed
                        .inc_by(count.saturating_sub(gone.len() as u64));
                    for conn in gone {
                        if let Some(route) = owners.get(&(addr.clone(), conn)) {
                            self.presence
                                .offline(route.user_id, &route.device_id, conn)
                                .await?;
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(gateway = %addr, error = %format!("{e:#}"), "push to gateway failed")
                }
            }
        }
        Ok(devices)
    }
}

#[cfg(test)]
mod tests;
