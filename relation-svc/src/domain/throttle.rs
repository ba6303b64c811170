//! Throttling of logins and registrations. Failed logins slow down per account and per
//! source address: past a number of free failures each one makes the next attempt wait
//! twice as long as the last, up to a lock; an attempt while waiting is refused before any
//! password is checked. Registrations are counted per source in a window. The counters
//! live behind the [`Attempts`] port, in Redis when replicas share them.

use std::{net::IpAddr, sync::Arc, time::Duration};

use serde::{Deserialize, Serialize};

use super::{Error, ports::Attempts};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct Limits {
    /// Failed logins of one account that cost no wait; each further one doubles the wait.
    pub free_failures: u32,
    /// The same from one source address (many users may share one, behind NAT).
    pub free_failures_per_source: u32,
    /// The wait after the first failure past the free ones.
    pub first_wait_ms: u64,
    /// The longest wait: the lock.
    pub lock_secs: u64,
    /// Failures are forgotten this long after the first of them (a login forgets the
    /// account's at once).
    pub failure_window_secs: u64,
    /// Registrations one source address may make per window; 0 turns the limit off.
    pub registrations_per_source: u32,
    pub registration_window_secs: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            free_failures: 5,
            free_failures_per_source: 50,
            first_wait_ms: 1_000,
            lock_secs: 15 * 60,
            failure_window_secs: 3_600,
            registrations_per_source: 20,
            registration_window_secs: 3_600,
        }
    }
}

/// The wait after the `failures`th failure: none while free, then the first wait doubling
/// with each failure, never over `lock`.
pub fn wait_after(failures: u64, free: u32, first: Duration, lock: Duration) -> Option<Duration> {
    let past = failures.checked_sub(u64::from(free)).filter(|&n| n > 0)?;
    let doublings = u32::try_from(past - 1).unwrap_or(u32::MAX).min(31);
    Some(first.saturating_mul(1 << doublings).min(lock))
}

/// Who is attempting: the account's username and, when the caller says, the end user's
/// address.
pub struct Attempt<'a> {
    pub username: &'a str,
    pub source: Option<IpAddr>,
}

impl Attempt<'_> {
    fn account_key(&self) -> String {
        format!("im:login:user:{}", self.username)
    }

    fn source_key(&self) -> Option<String> {
        self.source
            .map(|ip| format!("im:login:addr:{}", source_id(ip)))
    }
}

/// An address as a throttling key: IPv4 whole, IPv6 by its /64 (one host's share).
fn source_id(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let s = v6.segments();
                format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
            }
        },
    }
}

fn hold_key(key: &str) -> String {
    format!("{key}:hold")
}

pub struct Throttle {
    attempts: Arc<dyn Attempts>,
    limits: Limits,
}

impl Throttle {
    pub fn new(attempts: Arc<dyn Attempts>, limits: Limits) -> Self {
        Self { attempts, limits }
    }

    /// Refuses an attempt while its account or source waits after failures.
    pub async fn admit(&self, attempt: &Attempt<'_>) -> Result<(), Error> {
        let holds: Vec<String> = std::iter::once(attempt.account_key())
            .chain(attempt.source_key())
            .map(|key| hold_key(&key))
            .collect();
        match self.attempts.held(&holds).await? {
            Some(wait) => Err(Error::Throttled {
                what: "login: too many failed attempts",
                retry_after_ms: wait.as_millis().max(1) as u64,
            }),
            None => Ok(()),
        }
    }

    /// Counts a failed attempt against its account and source, and holds each past its
    /// free failures.
    pub async fn failed(&self, attempt: &Attempt<'_>) -> Result<(), Error> {
        let window = Duration::from_secs(self.limits.failure_window_secs);
        let first = Duration::from_millis(self.limits.first_wait_ms);
        let lock = Duration::from_secs(self.limits.lock_secs);
        let scopes = [
            (Some(attempt.account_key()), self.limits.free_failures),
            (attempt.source_key(), self.limits.free_failures_per_source),
        ];
        for (key, free) in scopes {
            let Some(key) = key else { continue };
            let hit = self.attempts.hit(&key, window).await?;
            if let Some(wait) = wait_after(hit.count, free, first, lock) {
                self.attempts.hold(&hold_key(&key), wait).await?;
            }
        }
        Ok(())
    }

    /// A login succeeded: the account's failures are forgotten (its source's are not, or
    /// one good account would clear the way for guessing others).
    pub async fn succeeded(&self, attempt: &Attempt<'_>) -> Result<(), Error> {
        Ok(self.attempts.forget(&attempt.account_key()).await?)
    }

    /// Counts a registration from `source`; refuses it past the window's limit.
    pub async fn register(&self, source: Option<IpAddr>) -> Result<(), Error> {
        let limit = self.limits.registrations_per_source;
        let Some(ip) = source.filter(|_| limit > 0) else {
            return Ok(());
        };
        let window = Duration::from_secs(self.limits.registration_window_secs);
        let key = format!("im:register:addr:{}", source_id(ip));
        let hit = self.attempts.hit(&key, window).await?;
        if hit.count > u64::from(limit) {
            return Err(Error::Throttled {
                what: "register: too many registrations from this address",
                retry_after_ms: hit.resets_in.as_millis().max(1) as u64,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_start_past_the_free_failures_and_double_up_to_the_lock() {
        let (first, lock) = (Duration::from_secs(1), Duration::from_secs(60));
        let waits: Vec<_> = (1..=13)
            .map(|n| wait_after(n, 5, first, lock).map(|w| w.as_secs()))
            .collect();
        assert_eq!(
            waits,
            [
                None,
                None,
                None,
                None,
                None,
                Some(1),
                Some(2),
                Some(4),
                Some(8),
                Some(16),
                Some(32),
                Some(60),
                Some(60)
            ]
        );
        assert_eq!(wait_after(u64::MAX, 5, first, lock), Some(lock));
    }

    #[test]
    fn an_ipv6_source_counts_by_its_64_and_a_mapped_ipv4_as_itself() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        assert_eq!(source_id(a), source_id(b));
        assert_eq!(source_id("::ffff:10.0.0.1".parse().unwrap()), "10.0.0.1");
    }
}
