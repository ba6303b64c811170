//! Typing indicators: never stored, pushed live (sync_seq 0) to the other participants'
//! online devices of a direct conversation or a small group, at most one per user and
//! conversation per interval.

use std::{num::NonZeroU32, sync::Arc, time::Duration};

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use super::{
    Error, Router,
    ports::{EncodeTyping, GroupMembers, Members},
};

/// Past this many keys the limiter forgets those whose interval has passed.
const LIMITER_KEYS: usize = 100_000;

/// What became of a typing notice.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Pushed to this many devices.
    Sent(u32),
    /// Within the interval of the user's last notice there: nothing was sent.
    Throttled,
}

pub struct Typing {
    router: Arc<Router>,
    groups: Arc<dyn GroupMembers>,
    encode: EncodeTyping,
    max_members: usize,
    limiter: DefaultKeyedRateLimiter<(i64, String)>,
}

impl Typing {
    /// Typing in groups of up to `max_members`, one notice per user and conversation per
    /// `interval`.
    pub fn new(
        router: Arc<Router>,
        groups: Arc<dyn GroupMembers>,
        encode: EncodeTyping,
        max_members: usize,
        interval: Duration,
    ) -> Self {
        let quota = Quota::with_period(interval.max(Duration::from_millis(1)))
            .expect("a positive period")
            .allow_burst(NonZeroU32::MIN);
        Self {
            router,
            groups,
            encode,
            max_members,
            limiter: RateLimiter::keyed(quota),
        }
    }

    /// `user` is typing in `conversation_id`: tells the other participants' live devices.
    pub async fn typing(&self, user: i64, conversation_id: &str) -> Result<Outcome, Error> {
        let recipients = self.recipients(user, conversation_id).await?;
        if self.limiter.len() > LIMITER_KEYS {
            self.limiter.retain_recent();
        }
        if self
            .limiter
            .check_key(&(user, conversation_id.to_owned()))
            .is_err()
        {
            return Ok(Outcome::Throttled);
        }
        let event = (self.encode)(conversation_id, user);
        Ok(Outcome::Sent(
            self.router.deliver_live(recipients, event).await?,
        ))
    }

    /// The participants of the conversation other than `user`, who must be one of them.
    async fn recipients(&self, user: i64, conversation_id: &str) -> Result<Vec<i64>, Error> {
        let not_yours = || Error::NotFound("conversation_id: not one of your conversations");
        if let Some(pair) = conversation_id.strip_prefix("d:") {
            let (a, b) = pair
                .split_once(':')
                .and_then(|(a, b)| Some((a.parse::<i64>().ok()?, b.parse::<i64>().ok()?)))
                .ok_or_else(|| invalid_id(conversation_id))?;
            return match (a == user, b == user) {
                (true, false) => Ok(vec![b]),
                (false, true) => Ok(vec![a]),
                _ => Err(not_yours()),
            };
        }
        let group = conversation_id
            .strip_prefix("g:")
            .and_then(|g| g.parse::<i64>().ok())
            .filter(|g| *g > 0)
            .ok_or_else(|| invalid_id(conversation_id))?;
        let members = match self.groups.members(group).await.map_err(Error::Peer)? {
            Members::List(members) => members,
            Members::Unknown => return Err(not_yours()),
            Members::Unlisted => return Err(self.too_large()),
        };
        if !members.contains(&user) {
            return Err(not_yours());
        }
        if members.len() > self.max_members {
            return Err(self.too_large());
        }
        Ok(members.into_iter().filter(|m| *m != user).collect())
    }

    fn too_large(&self) -> Error {
        Error::Precondition(format!(
            "typing: only in direct conversations and groups of up to {} members",
            self.max_members
        ))
    }
}

fn invalid_id(conversation_id: &str) -> Error {
    Error::Invalid {
        field: "conversation_id",
        reason: format!("{conversation_id:?} is not a conversation id (d:<a>:<b> or g:<id>)"),
    }
}

#[cfg(test)]
mod tests;
