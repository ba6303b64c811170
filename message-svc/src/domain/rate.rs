//! Send rate limits per user and per group, and the upload tickets a user may ask for per
//! minute (GCRA token buckets from `governor`), kept per replica: with N replicas behind
//! a balancer a sender gets at most N times the rate.

use std::{
    num::NonZeroU32,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter, clock::Clock as _};

/// A request refused by a rate limit, with how long to wait.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{scope}: over the limit of {limit}; retry in {retry_after_ms} ms")]
pub struct RateLimited {
    /// What is limited: `user_id` (the sender or uploader) or `group_id`.
    pub scope: &'static str,
    /// The limit, e.g. "20 messages per second".
    pub limit: String,
    pub retry_after_ms: u64,
}

struct Bucket {
    limiter: DefaultKeyedRateLimiter<i64>,
    limit: String,
    scope: &'static str,
}

impl Bucket {
    fn new(per_sec: u32, scope: &'static str) -> Option<Self> {
        let rate = NonZeroU32::new(per_sec)?;
        Some(Self {
            limiter: RateLimiter::keyed(Quota::per_second(rate)),
            limit: format!("{per_sec} messages per second"),
            scope,
        })
    }

    fn per_minute(per_min: u32, scope: &'static str, what: &str) -> Option<Self> {
        let rate = NonZeroU32::new(per_min)?;
        Some(Self {
            limiter: RateLimiter::keyed(Quota::per_minute(rate)),
            limit: format!("{per_min} {what} per minute"),
            scope,
        })
    }

    fn check(&self, key: i64) -> Result<(), RateLimited> {
        self.limiter.check_key(&key).map_err(|not_until| {
            let wait = not_until.wait_time_from(governor::clock::DefaultClock::default().now());
            RateLimited {
                scope: self.scope,
                limit: self.limit.clone(),
                retry_after_ms: wait.max(Duration::from_millis(1)).as_millis() as u64,
            }
        })
    }

    fn forget_idle(&self) {
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
    }
}

/// The per-user and per-group send limits and the per-user ticket limit; a rate of 0
/// turns one off.
pub struct RateLimits {
    users: Option<Bucket>,
    groups: Option<Bucket>,
    tickets: Option<Bucket>,
    checks: AtomicU64,
}

/// Idle keys are dropped once every this many checks, bounding the limiters' memory.
const FORGET_EVERY: u64 = 1 << 14;

impl RateLimits {
    pub fn new(user_per_sec: u32, group_per_sec: u32) -> Self {
        Self {
            users: Bucket::new(user_per_sec, "user_id"),
            groups: Bucket::new(group_per_sec, "group_id"),
            tickets: None,
            checks: AtomicU64::new(0),
        }
    }

    /// These limits, and at most `per_min` upload tickets a minute per user.
    pub fn with_tickets(self, per_min: u32) -> Self {
        Self {
            tickets: Bucket::per_minute(per_min, "user_id", "upload tickets"),
            ..self
        }
    }

    /// Takes one upload ticket from `user`'s budget.
    pub fn check_ticket(&self, user: i64) -> Result<(), RateLimited> {
        self.tickets
            .as_ref()
            .map_or(Ok(()), |tickets| tickets.check(user))
    }

    /// No limits at all (tests of other things, load tools).
    pub fn unlimited() -> Self {
        Self::new(0, 0)
    }

    /// Takes one send from `user`'s budget and, for a group message, from the group's.
    pub fn check(&self, user: i64, group: Option<i64>) -> Result<(), RateLimited> {
        if self.checks.fetch_add(1, Ordering::Relaxed) % FORGET_EVERY == FORGET_EVERY - 1 {
            self.users
                .iter()
                .chain(&self.groups)
                .chain(&self.tickets)
                .for_each(Bucket::forget_idle);
        }
        if let Some(users) = &self.users {
            users.check(user)?;
        }
        match (&self.groups, group) {
            (Some(groups), Some(group)) => groups.check(group),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_past_their_rate_is_refused_with_a_wait_and_others_are_not() {
        let limits = RateLimits::new(3, 0);
        for _ in 0..3 {
            limits.check(1, None).unwrap();
        }
        let refused = limits.check(1, None).unwrap_err();
        assert_eq!(refused.scope, "user_id");
        assert!(refused.retry_after_ms >= 1 && refused.retry_after_ms <= 334);
        limits.check(2, None).unwrap();
    }

    #[test]
    fn a_busy_group_is_limited_across_its_senders() {
        let limits = RateLimits::new(0, 2);
        limits.check(1, Some(9)).unwrap();
        limits.check(2, Some(9)).unwrap();
        assert_eq!(limits.check(3, Some(9)).unwrap_err().scope, "group_id");
        limits.check(3, Some(10)).unwrap();
        limits.check(3, None).unwrap();
    }

    #[test]
    fn a_user_past_their_tickets_a_minute_is_refused_with_a_wait() {
        let limits = RateLimits::new(0, 0).with_tickets(2);
        limits.check_ticket(1).unwrap();
        limits.check_ticket(1).unwrap();
        let refused = limits.check_ticket(1).unwrap_err();
        assert_eq!(
            (refused.scope, refused.limit.as_str()),
            ("user_id", "2 upload tickets per minute")
        );
        assert!(
            (1..=30_000).contains(&refused.retry_after_ms),
            "{refused:?}"
        );
        limits.check_ticket(2).unwrap();
        limits.check(1, None).unwrap();
    }

    #[test]
    fn a_rate_of_zero_is_no_limit() {
        let limits = RateLimits::unlimited();
        for _ in 0..10_000 {
            limits.check(1, Some(1)).unwrap();
        }
    }
}
