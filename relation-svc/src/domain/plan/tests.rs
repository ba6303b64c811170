use super::*;

const CLOCK: Clock = Clock {
    now_ms: 1_000_000,
    request_ttl_ms: 1_000,
};

fn pair() -> PairState {
    PairState {
        a: 1,
        b: 2,
        ..Default::default()
    }
}

fn draft(id: i64) -> Draft {
    parse_draft(id, "hi", "search").unwrap()
}

fn request(id: i64, from: i64, to: i64, state: RequestState, created_at_ms: i64) -> FriendRequest {
    FriendRequest {
        id,
        from,
        to,
        message: String::new(),
        add_source: "qr".into(),
        state,
        created_at_ms,
        updated_at_ms: created_at_ms,
    }
}

fn row(owner: i64, peer: i64, status: FriendStatus) -> Friendship {
    Friendship {
        owner,
        peer,
        status,
        ..Default::default()
    }
}

#[test]
fn a_first_request_is_pending_and_a_repeat_changes_nothing() {
    let change = send(&pair(), draft(10), CLOCK).unwrap();
    assert_eq!(change.requests.len(), 1);
    assert_eq!(change.requests[0].state, RequestState::Pending);
    assert!(change.rows.is_empty());
    let state = PairState {
        forward: Some(change.requests[0].clone()),
        ..pair()
    };
    assert_eq!(
        send(&state, draft(11), CLOCK).unwrap(),
        PairChange::default()
    );
}

#[test]
fn asking_someone_who_asked_you_makes_you_friends() {
    let state = PairState {
        reverse: Some(request(5, 2, 1, RequestState::Pending, CLOCK.now_ms)),
        ..pair()
    };
    let change = send(&state, draft(10), CLOCK).unwrap();
    assert_eq!(change.requests[0].state, RequestState::Accepted);
    assert_eq!(change.requests[0].id, 5);
    let owners: Vec<(i64, FriendStatus)> =
        change.rows.iter().map(|r| (r.owner, r.status)).collect();
    assert_eq!(
        owners,
        vec![(1, FriendStatus::Friend), (2, FriendStatus::Friend)]
    );
}

#[test]
fn an_expired_request_is_not_answerable_and_can_be_sent_again() {
    let old = request(5, 1, 2, RequestState::Pending, CLOCK.now_ms - 5_000);
    let state = PairState {
        forward: Some(old),
        ..pair()
    };
    assert!(matches!(
        respond(&state, 5, true, CLOCK),
        Err(Error::Precondition(m)) if m.contains("expired")
    ));
    let again = send(&state, draft(10), CLOCK).unwrap();
    assert_eq!(
        (again.requests[0].id, again.requests[0].state),
        (10, RequestState::Pending)
    );
}

#[test]
fn accepting_twice_is_one_friendship_and_rejecting_after_accepting_is_refused() {
    let state = PairState {
        forward: Some(request(5, 1, 2, RequestState::Pending, CLOCK.now_ms)),
        ..pair()
    };
    let first = respond(&state, 5, true, CLOCK).unwrap();
    assert_eq!(first.rows.len(), 2);
    let after = PairState {
        forward: Some(first.requests[0].clone()),
        mine: Some(row(1, 2, FriendStatus::Friend)),
        theirs: Some(row(2, 1, FriendStatus::Friend)),
        ..pair()
    };
    assert_eq!(
        respond(&after, 5, true, CLOCK).unwrap(),
        PairChange::default()
    );
    assert!(matches!(
        respond(&after, 5, false, CLOCK),
        Err(Error::Precondition(_))
    ));
    assert!(matches!(
        respond(&after, 6, true, CLOCK),
        Err(Error::UnknownRequest)
    ));
}

#[test]
fn a_blocked_requester_is_refused_and_a_deleted_friend_comes_back_without_asking() {
    let blocked = PairState {
        theirs: Some(Friendship {
            blocked: true,
            ..row(2, 1, FriendStatus::None)
        }),
        ..pair()
    };
    assert!(matches!(
        send(&blocked, draft(10), CLOCK),
        Err(Error::Forbidden(_))
    ));
    let deleted_by_me = PairState {
        mine: Some(row(1, 2, FriendStatus::Deleted)),
        theirs: Some(row(2, 1, FriendStatus::Friend)),
        ..pair()
    };
    let change = send(&deleted_by_me, draft(10), CLOCK).unwrap();
    assert!(change.requests.is_empty());
    assert_eq!(
        change.rows,
        vec![Friendship {
            add_source: "search".into(),
            ..row(1, 2, FriendStatus::Friend)
        }]
    );
}

#[test]
fn delete_is_one_sided_and_blocking_needs_no_friendship() {
    let friends = PairState {
        mine: Some(row(1, 2, FriendStatus::Friend)),
        theirs: Some(row(2, 1, FriendStatus::Friend)),
        ..pair()
    };
    let deleted = delete(&friends);
    assert_eq!(deleted.rows, vec![row(1, 2, FriendStatus::Deleted)]);
    assert_eq!(delete(&pair()), PairChange::default());
    let block = set_blocked(&pair(), true);
    assert_eq!(
        block.rows,
        vec![Friendship {
            blocked: true,
            ..row(1, 2, FriendStatus::None)
        }]
    );
    assert!(matches!(
        set_remark(&pair(), "x".into()),
        Err(Error::Precondition(_))
    ));
}
