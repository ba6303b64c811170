//! The decisions of the friend-request state machine and of the relation rows, as pure
//! functions of a pair's state (read under a lock on both users by the store, see
//! [`crate::domain::FriendStore::change_pair`]). No I/O here, so every rule is unit-tested.

use super::{Error, FriendRequest, FriendStatus, Friendship, RequestState, invalid};

/// Everything stored about users `a` and `b`, oriented from `a`.
#[derive(Debug, Clone, Default)]
pub struct PairState {
    pub a: i64,
    pub b: i64,
    /// The request a → b, if one was ever made.
    pub forward: Option<FriendRequest>,
    /// The request b → a.
    pub reverse: Option<FriendRequest>,
    /// a's row about b.
    pub mine: Option<Friendship>,
    /// b's row about a.
    pub theirs: Option<Friendship>,
}

impl PairState {
    pub fn mine_or_default(&self) -> Friendship {
        self.mine.clone().unwrap_or(Friendship {
            owner: self.a,
            peer: self.b,
            ..Default::default()
        })
    }

    fn theirs_or_default(&self) -> Friendship {
        self.theirs.clone().unwrap_or(Friendship {
            owner: self.b,
            peer: self.a,
            ..Default::default()
        })
    }
}

/// What to write: requests (upserted by `(from, to)`) and rows (upserted by `(owner, peer)`;
/// the store fills in `sequence` and `updated_at_ms`). Empty writes change nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PairChange {
    pub requests: Vec<FriendRequest>,
    pub rows: Vec<Friendship>,
}

/// How long a pending request stays answerable.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    pub now_ms: i64,
    pub request_ttl_ms: i64,
}

impl Clock {
    /// The request's state as of now: a pending request past its TTL has expired.
    pub fn state_of(&self, request: &FriendRequest) -> RequestState {
        match request.state {
            RequestState::Pending if self.now_ms - request.created_at_ms > self.request_ttl_ms => {
                RequestState::Expired
            }
            state => state,
        }
    }
}

/// A new request a → b as drafted by a.
#[derive(Debug, Clone)]
pub struct Draft {
    pub id: i64,
    pub message: String,
    pub add_source: String,
}

/// a asks b. Already friends → nothing; b asked a (pending) → accepted, friends; b still lists
/// a (a had deleted b) → a lists b again; a pending request a → b → the same request;
/// otherwise a new pending request (reusing the pair's row under a new id).
pub fn send(state: &PairState, draft: Draft, clock: Clock) -> Result<PairChange, Error> {
    let mine = state.mine_or_default();
    let theirs = state.theirs_or_default();
    if theirs.blocked {
        return Err(Error::Forbidden(
            "to_user_id: this user does not accept your requests",
        ));
    }
    if mine.is_friend() && theirs.is_friend() {
        return Ok(PairChange::default());
    }
    if let Some(reverse) = &state.reverse
        && clock.state_of(reverse) == RequestState::Pending
    {
        let accepted = decided(reverse, RequestState::Accepted, clock);
        return Ok(PairChange {
            rows: befriend(state, &reverse.add_source),
            requests: vec![accepted],
        });
    }
    if theirs.is_friend() {
        return Ok(PairChange {
            rows: vec![as_friend(mine, &draft.add_source)],
            requests: Vec::new(),
        });
    }
    if let Some(forward) = &state.forward
        && clock.state_of(forward) == RequestState::Pending
    {
        return Ok(PairChange::default());
    }
    Ok(PairChange {
        requests: vec![FriendRequest {
            id: draft.id,
            from: state.a,
            to: state.b,
            message: draft.message,
            add_source: draft.add_source,
            state: RequestState::Pending,
            created_at_ms: clock.now_ms,
            updated_at_ms: clock.now_ms,
        }],
        rows: Vec::new(),
    })
}

/// b answers request `id` (a → b); `state` is oriented from a, the requester. Answering
/// the same way twice changes nothing; an expired request is marked so and refused.
pub fn respond(
    state: &PairState,
    id: i64,
    accept: bool,
    clock: Clock,
) -> Result<PairChange, Error> {
    let Some(request) = state.forward.as_ref().filter(|r| r.id == id) else {
        return Err(Error::UnknownRequest);
    };
    let wanted = if accept {
        RequestState::Accepted
    } else {
        RequestState::Rejected
    };
    match clock.state_of(request) {
        RequestState::Pending => Ok(PairChange {
            requests: vec![decided(request, wanted, clock)],
            rows: if accept {
                befriend(state, &request.add_source)
            } else {
                Vec::new()
            },
        }),
        current if current == wanted => Ok(PairChange::default()),
        RequestState::Expired if request.state == RequestState::Pending => {
            Err(Error::Precondition("request_id: the request has expired"))
        }
        _ => Err(Error::Precondition(
            "request_id: the request was already answered",
        )),
    }
}

/// a removes b from a's list; b's row stays (one-sided, soft).
pub fn delete(state: &PairState) -> PairChange {
    let mine = state.mine_or_default();
    if !mine.is_friend() {
        return PairChange::default();
    }
    PairChange {
        rows: vec![Friendship {
            status: FriendStatus::Deleted,
            ..mine
        }],
        requests: Vec::new(),
    }
}

pub fn set_remark(state: &PairState, remark: String) -> Result<PairChange, Error> {
    let mine = state.mine_or_default();
    if !mine.is_friend() {
        return Err(Error::Precondition("peer_id: not in your friend list"));
    }
    if mine.remark == remark {
        return Ok(PairChange::default());
    }
    Ok(PairChange {
        rows: vec![Friendship { remark, ..mine }],
        requests: Vec::new(),
    })
}

/// Blocks or unblocks b in a's row (a row is created when a and b were never related).
pub fn set_blocked(state: &PairState, blocked: bool) -> PairChange {
    let mine = state.mine_or_default();
    if mine.blocked == blocked {
        return PairChange::default();
    }
    PairChange {
        rows: vec![Friendship { blocked, ..mine }],
        requests: Vec::new(),
    }
}

fn decided(request: &FriendRequest, state: RequestState, clock: Clock) -> FriendRequest {
    FriendRequest {
        state,
        updated_at_ms: clock.now_ms,
        ..request.clone()
    }
}

fn befriend(state: &PairState, add_source: &str) -> Vec<Friendship> {
    [state.mine_or_default(), state.theirs_or_default()]
        .into_iter()
        .filter(|row| !row.is_friend())
        .map(|row| as_friend(row, add_source))
        .collect()
}

fn as_friend(row: Friendship, add_source: &str) -> Friendship {
    Friendship {
        status: FriendStatus::Friend,
        add_source: add_source.to_owned(),
        ..row
    }
}

/// Checks a request's free text and its source tag.
pub fn parse_draft(id: i64, message: &str, add_source: &str) -> Result<Draft, Error> {
    if message.chars().count() > 256 {
        return Err(invalid("message", "must be at most 256 characters"));
    }
    if add_source.len() > 16 {
        return Err(invalid("add_source", "must be at most 16 bytes"));
    }
    Ok(Draft {
        id,
        message: message.to_owned(),
        add_source: add_source.to_owned(),
    })
}

#[cfg(test)]
mod tests;
