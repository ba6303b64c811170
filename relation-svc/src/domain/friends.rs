//! Friendships and friend requests: each operation plans its change with [`super::plan`]
//! under the store's lock on the pair, then tells the relation cache to forget the pair.

use std::sync::Arc;

use imesh_kit::{error::StoreError, ids::Snowflake};

use super::{
    Checker, Error, FriendRequest, Friendship, RequestState, invalid, parse_peer, parse_text,
    plan::{self, Clock, PairChange, PairState},
};
use crate::domain::{Direction, FriendStore};

/// Limits of one page of friends or requests.
pub const MAX_FRIENDS_PAGE: u32 = 500;
pub const MAX_REQUESTS_PAGE: u32 = 100;

pub struct Friends {
    store: Arc<dyn FriendStore>,
    ids: Arc<Snowflake>,
    checker: Arc<Checker>,
    request_ttl_ms: i64,
}

/// The answer to a friend request sent.
pub struct Sent {
    pub request: Option<FriendRequest>,
    pub friends: bool,
}

impl Friends {
    pub fn new(
        store: Arc<dyn FriendStore>,
        ids: Arc<Snowflake>,
        checker: Arc<Checker>,
        request_ttl_ms: i64,
    ) -> Self {
        Self {
            store,
            ids,
            checker,
            request_ttl_ms,
        }
    }

    fn clock(&self) -> Clock {
        Clock {
            now_ms: imesh_kit::ids::unix_ms(),
            request_ttl_ms: self.request_ttl_ms,
        }
    }

    pub async fn send_request(
        &self,
        me: i64,
        to: i64,
        message: &str,
        add_source: &str,
    ) -> Result<Sent, Error> {
        let to = parse_peer("to_user_id", me, to)?;
        let draft = plan::parse_draft(self.ids.next_id()?, message, add_source)?;
        let clock = self.clock();
        let after = self
            .change("to_user_id", me, to, &move |state: &PairState| {
                plan::send(state, draft.clone(), clock)
            })
            .await?;
        let friends = after.mine.as_ref().is_some_and(Friendship::is_friend)
            && after.theirs.as_ref().is_some_and(Friendship::is_friend);
        let request = if friends {
            after
                .reverse
                .filter(|r| r.state == RequestState::Accepted)
                .or(after.forward)
        } else {
            after.forward
        };
        Ok(Sent { request, friends })
    }

    /// `me` answers request `id` addressed to them.
    pub async fn respond(&self, me: i64, id: i64, accept: bool) -> Result<FriendRequest, Error> {
        let request = self.store.request(id).await?.ok_or(Error::UnknownRequest)?;
        if request.to != me {
            return Err(if request.from == me {
                Error::Forbidden("request_id: you sent this request; only its receiver answers it")
            } else {
                Error::UnknownRequest
            });
        }
        let clock = self.clock();
        let after = self
            .change("request_id", request.from, me, &move |state: &PairState| {
                plan::respond(state, id, accept, clock)
            })
            .await?;
        after.forward.ok_or(Error::UnknownRequest)
    }

    pub async fn requests(
        &self,
        me: i64,
        direction: Direction,
        cursor: i64,
        limit: u32,
    ) -> Result<(Vec<FriendRequest>, i64), Error> {
        let limit = page_limit(limit, 20, MAX_REQUESTS_PAGE)?;
        let before = if cursor <= 0 { i64::MAX } else { cursor };
        let clock = self.clock();
        let mut page = self
            .store
            .requests(me, direction, before, limit + 1)
            .await?;
        let next = if page.len() > limit as usize {
            page.truncate(limit as usize);
            page.last().map_or(0, |r| r.id)
        } else {
            0
        };
        for request in &mut page {
            request.state = clock.state_of(request);
        }
        Ok((page, next))
    }

    pub async fn delete(&self, me: i64, peer: i64) -> Result<Friendship, Error> {
        let peer = parse_peer("peer_id", me, peer)?;
        let after = self
            .change("peer_id", me, peer, &|state: &PairState| {
                Ok(plan::delete(state))
            })
            .await?;
        Ok(after.mine_or_default())
    }

    pub async fn set_remark(&self, me: i64, peer: i64, remark: &str) -> Result<Friendship, Error> {
        let peer = parse_peer("peer_id", me, peer)?;
        let remark = parse_text("remark", remark, 64)?;
        let after = self
            .change("peer_id", me, peer, &move |state: &PairState| {
                plan::set_remark(state, remark.clone())
            })
            .await?;
        Ok(after.mine_or_default())
    }

    pub async fn set_blocked(
        &self,
        me: i64,
        peer: i64,
        blocked: bool,
    ) -> Result<Friendship, Error> {
        let peer = parse_peer("peer_id", me, peer)?;
        let after = self
            .change("peer_id", me, peer, &move |state: &PairState| {
                Ok(plan::set_blocked(state, blocked))
            })
            .await?;
        Ok(after.mine_or_default())
    }

    /// `me`'s rows changed after `after_sequence`, oldest first, and whether more follow.
    pub async fn changes(
        &self,
        me: i64,
        after_sequence: i64,
        limit: u32,
    ) -> Result<(Vec<Friendship>, bool), Error> {
        let limit = page_limit(limit, 100, MAX_FRIENDS_PAGE)?;
        let mut rows = self
            .store
            .changes(me, after_sequence.max(0), limit + 1)
            .await?;
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        Ok((rows, more))
    }

    /// Applies a planned change to the pair `(a, b)` and forgets their cached relations.
    /// `field` names the peer in the NOT_FOUND answer when a user does not exist.
    async fn change(
        &self,
        field: &'static str,
        a: i64,
        b: i64,
        plan: &(dyn Fn(&PairState) -> Result<PairChange, Error> + Send + Sync),
    ) -> Result<PairState, Error> {
        let after = match self.store.change_pair(a, b, plan).await {
            Err(Error::Store(StoreError::NotFound)) => return Err(Error::UnknownUser(field)),
            other => other?,
        };
        self.checker.forget(&[a, b]).await;
        Ok(after)
    }
}

fn page_limit(limit: u32, default: u32, max: u32) -> Result<u32, Error> {
    imesh_kit::page_limit(limit, default, max).map_err(|reason| invalid("limit", reason))
}
