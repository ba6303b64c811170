//! Order across refusals. A send refused with a retryable status (a bound, an overloaded
//! message-svc) holds its conversation on that connection: every send to the conversation
//! read after it is refused too, until the refused sends come again in the order first
//! read. A client that resends what was refused therefore keeps the order it sent in,
//! whatever it had in flight. One that never resends gets the conversation back
//! `send_hold_ms` after the wait it was told (or after its last resend).

use std::{
    collections::VecDeque,
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use imesh_protos::message::send_request::To;
use parking_lot::Mutex;

#[derive(Debug, Clone, Copy)]
pub struct HoldLimits {
    /// How long a hold outlasts the wait a refusal names, or the last resend.
    pub grace: Duration,
    /// Conversations held per connection, and sends refused by a hold listed per
    /// conversation.
    pub max: usize,
}

/// One connection's held conversations.
#[derive(Default)]
pub struct Holds {
    held: Mutex<Vec<Held>>,
    /// The place of each send read, in the order read.
    read: AtomicU64,
}

struct Held {
    to: Option<To>,
    /// The refused sends, by the place they were first read in.
    refused: VecDeque<(u64, String)>,
    until: Instant,
}

impl Holds {
    /// A send just read: its place in the connection's order (a resend of the first
    /// refused send takes back its first place), or `Err` naming the send it waits for.
    pub fn admit(&self, to: &Option<To>, id: &str, limits: HoldLimits) -> Result<u64, String> {
        let now = Instant::now();
        let mut held = self.held.lock();
        held.retain(|h| h.until > now && !h.refused.is_empty());
        let Some(at) = held.iter().position(|h| h.to == *to) else {
            return Ok(self.read.fetch_add(1, Ordering::Relaxed));
        };
        let h = &mut held[at];
        let (place, first) = h.refused[0].clone();
        if first == id {
            h.refused.pop_front();
            h.until = h.until.max(now + limits.grace);
            if h.refused.is_empty() {
                held.swap_remove(at);
            }
            return Ok(place);
        }
        let listed = h.refused.iter().any(|(_, r)| r == id);
        if !listed && h.refused.len() < limits.max {
            let place = self.read.fetch_add(1, Ordering::Relaxed);
            h.refused.push_back((place, id.to_owned()));
        }
        Err(first)
    }

    /// Whether a send admitted at `place` may still go out: `Err` naming the send it waits
    /// for when one read before it was refused since.
    pub fn still_free(&self, to: &Option<To>, place: u64) -> Result<(), String> {
        let now = Instant::now();
        let held = self.held.lock();
        let waits_for = held
            .iter()
            .find(|h| h.to == *to && h.until > now)
            .and_then(|h| h.refused.front())
            .filter(|(first, _)| *first < place);
        match waits_for {
            Some((_, first)) => Err(first.clone()),
            None => Ok(()),
        }
    }

    /// The send read at `place` was refused with a retryable status, naming `wait`: its
    /// conversation waits for it.
    pub fn refused(&self, send: (&Option<To>, &str, u64), wait: Duration, limits: HoldLimits) {
        let (to, id, place) = send;
        let now = Instant::now();
        let mut held = self.held.lock();
        held.retain(|h| h.until > now && !h.refused.is_empty());
        let at = match held.iter().position(|h| h.to == *to) {
            Some(at) => at,
            None => {
                if held.len() >= limits.max.max(1) {
                    held.remove(0);
                }
                held.push(Held {
                    to: *to,
                    refused: VecDeque::new(),
                    until: now,
                });
                held.len() - 1
            }
        };
        let h = &mut held[at];
        h.until = h.until.max(now + wait + limits.grace);
        if h.refused.iter().any(|(_, r)| r == id) {
            return;
        }
        let at = h.refused.partition_point(|(p, _)| *p < place);
        h.refused.insert(at, (place, id.to_owned()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: HoldLimits = HoldLimits {
        grace: Duration::from_secs(60),
        max: 8,
    };
    const BOB: Option<To> = Some(To::UserId(2));
    const NOW: Duration = Duration::ZERO;

    #[test]
    fn later_sends_wait_until_the_refused_ones_come_again_in_the_order_read() {
        let holds = Holds::default();
        let s3 = holds.admit(&BOB, "s3", LIMITS).unwrap();
        holds.refused((&BOB, "s3", s3), NOW, LIMITS);
        assert_eq!(holds.admit(&BOB, "s4", LIMITS), Err("s3".into()));
        assert_eq!(holds.admit(&BOB, "s5", LIMITS), Err("s3".into()));
        assert_eq!(
            holds.admit(&BOB, "s5", LIMITS),
            Err("s3".into()),
            "listed once"
        );
        let cat = Some(To::UserId(3));
        assert!(
            holds.admit(&cat, "c1", LIMITS).is_ok(),
            "other conversations go"
        );
        assert!(holds.admit(&Some(To::GroupId(2)), "g1", LIMITS).is_ok());
        assert_eq!(holds.admit(&BOB, "s3", LIMITS), Ok(s3), "its first place");
        assert_eq!(holds.admit(&BOB, "s5", LIMITS), Err("s4".into()));
        assert!(holds.admit(&BOB, "s4", LIMITS).is_ok());
        assert!(holds.admit(&BOB, "s5", LIMITS).is_ok());
        assert!(holds.admit(&BOB, "s6", LIMITS).is_ok(), "released");
    }

    #[test]
    fn sends_read_before_the_refused_one_still_go_and_those_after_it_wait() {
        let holds = Holds::default();
        let s1 = holds.admit(&BOB, "s1", LIMITS).unwrap();
        let s2 = holds.admit(&BOB, "s2", LIMITS).unwrap();
        let s3 = holds.admit(&BOB, "s3", LIMITS).unwrap();
        holds.refused((&BOB, "s2", s2), NOW, LIMITS);
        assert_eq!(holds.still_free(&BOB, s1), Ok(()));
        assert_eq!(holds.still_free(&BOB, s3), Err("s2".into()));
        holds.refused((&BOB, "s3", s3), NOW, LIMITS);
        // A refusal of a send read earlier goes first, whenever it comes.
        holds.refused((&BOB, "s1", s1), NOW, LIMITS);
        assert_eq!(holds.admit(&BOB, "s2", LIMITS), Err("s1".into()));
        assert_eq!(holds.admit(&BOB, "s1", LIMITS), Ok(s1));
        assert_eq!(holds.admit(&BOB, "s3", LIMITS), Err("s2".into()));
        assert_eq!(holds.admit(&BOB, "s2", LIMITS), Ok(s2));
        // Refused again after its resend, it is first again.
        holds.refused((&BOB, "s2", s2), NOW, LIMITS);
        assert_eq!(holds.admit(&BOB, "s3", LIMITS), Err("s2".into()));
    }

    #[test]
    fn a_hold_ends_its_grace_after_the_wait_named_and_holds_are_bounded() {
        let brief = HoldLimits {
            grace: Duration::ZERO,
            max: 2,
        };
        let holds = Holds::default();
        holds.refused((&BOB, "s3", 0), NOW, brief);
        assert!(holds.admit(&BOB, "s4", brief).is_ok(), "lapsed");

        let holds = Holds::default();
        let small = HoldLimits { max: 2, ..LIMITS };
        for user in 1..=3 {
            holds.refused((&Some(To::UserId(user)), "x", 0), NOW, small);
        }
        assert_eq!(holds.held.lock().len(), 2, "the oldest hold gave way");
        assert!(holds.admit(&Some(To::UserId(1)), "y", small).is_ok());
        let third = Some(To::UserId(3));
        for id in ["y", "z", "w"] {
            assert_eq!(holds.admit(&third, id, small), Err("x".into()));
        }
        let listed = holds.held.lock()[1].refused.len();
        assert_eq!(listed, 2, "a conversation lists at most max sends");
    }
}
