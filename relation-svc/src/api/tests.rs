//! Handler tests: the real handlers over SQLite, with the in-process cache and (under
//! scripts/test) a real Redis as the shared relation cache.

use std::{sync::Arc, time::Duration};

use imesh_kit::{
    config::{AuthConfig, Secret},
    testing,
};
use tonic::Code;

use super::*;
use crate::{
    Config,
    domain::Attempts,
    domain::EdgeCache,
    store::{
        memory::{MemoryAttempts, MemoryEdgeCache},
        redis::{RedisAttempts, RedisEdgeCache},
    },
};

async fn apis() -> Vec<(&'static str, RelationApi)> {
    type Shared = (Arc<dyn EdgeCache>, Arc<dyn Attempts>);
    let mut shared: Vec<(&'static str, Shared)> = vec![(
        "memory",
        (
            Arc::new(MemoryEdgeCache::new(Duration::from_secs(60))),
            Arc::new(MemoryAttempts::default()),
        ),
    )];
    if let Some(redis) = testing::redis() {
        let pool = imesh_kit::redis::connect(&redis, redis.url().unwrap())
            .await
            .unwrap();
        shared.push((
            "redis",
            (
                Arc::new(RedisEdgeCache::new(pool.clone(), Duration::from_secs(60))),
                Arc::new(RedisAttempts::new(pool)),
            ),
        ));
    }
    let auth = AuthConfig {
        internal_secret: Secret::new("internal-secret-0123456789"),
        jwt_secret: Secret::new("jwt-secret-0123456789abcdef"),
        ..AuthConfig::default()
    };
    let mut out = Vec::new();
    for (name, cache) in shared {
        let db_config = testing::fresh_sql(testing::Backend::Sqlite).await.unwrap();
        let db = imesh_kit::sql::connect_and_migrate::<crate::store::sql::Migrator>(&db_config)
            .await
            .unwrap();
        // A node of its own: tests run in parallel and share the Redis cache, so their user
        // ids must never coincide.
        static NEXT_NODE: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(1);
        let node = NEXT_NODE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let ids = Arc::new(imesh_kit::ids::Snowflake::new(node));
        let (api, _relay) = crate::wire(&Config::default(), &auth, (ids, None), db, cache).unwrap();
        out.push((name, api));
    }
    out
}

fn as_actor<T>(actor: Actor, message: T) -> Request<T> {
    let mut request = Request::new(message);
    request.extensions_mut().insert(actor);
    request
}

fn as_user<T>(id: i64, message: T) -> Request<T> {
    as_actor(Actor::User(id), message)
}

async fn user(api: &RelationApi, name: &str) -> i64 {
    let request = as_actor(
        Actor::System,
        pb::CreateUserRequest {
            username: name.into(),
            nickname: String::new(),
        },
    );
    api.create_user(request)
        .await
        .unwrap()
        .into_inner()
        .user
        .unwrap()
        .user_id
}

async fn relation(api: &RelationApi, me: i64, peer: i64) -> pb::PeerRelation {
    let request = as_user(
        me,
        pb::CheckRelationsRequest {
            user_id: 0,
            peer_ids: vec![peer],
        },
    );
    api.check_relations(request)
        .await
        .unwrap()
        .into_inner()
        .relations
        .remove(0)
}

async fn ask(
    api: &RelationApi,
    from: i64,
    to: i64,
) -> Result<pb::SendFriendRequestResponse, Status> {
    let body = pb::SendFriendRequestRequest {
        to_user_id: to,
        message: "hi".into(),
        add_source: "search".into(),
    };
    api.send_friend_request(as_user(from, body))
        .await
        .map(Response::into_inner)
}

async fn answer(
    api: &RelationApi,
    me: i64,
    request_id: i64,
    accept: bool,
) -> Result<pb::FriendRequest, Status> {
    let body = pb::RespondFriendRequestRequest { request_id, accept };
    api.respond_friend_request(as_user(me, body))
        .await
        .map(|r| r.into_inner().request.unwrap())
}

#[tokio::test]
async fn a_request_accepted_once_makes_friends_both_ways_and_only_its_receiver_may_answer() {
    for (cache, api) in apis().await {
        let (ann, bob, cat) = (
            user(&api, "ann").await,
            user(&api, "bob").await,
            user(&api, "cat").await,
        );
        assert_eq!(
            relation(&api, ann, bob).await.relation(),
            pb::Relation::None,
            "{cache}"
        );
        let first = ask(&api, ann, bob).await.unwrap().request.unwrap();
        let again = ask(&api, ann, bob).await.unwrap().request.unwrap();
        assert_eq!(
            (again.request_id, again.state()),
            (first.request_id, pb::RequestState::Pending),
            "{cache}: one request"
        );
        let list = pb::ListFriendRequestsRequest {
            direction: pb::Direction::Received as i32,
            cursor: 0,
            limit: 0,
        };
        let received = api
            .list_friend_requests(as_user(bob, list))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(received.requests.len(), 1, "{cache}");

        assert_eq!(
            answer(&api, ann, first.request_id, true)
                .await
                .unwrap_err()
                .code(),
            Code::PermissionDenied,
            "{cache}"
        );
        assert_eq!(
            answer(&api, cat, first.request_id, true)
                .await
                .unwrap_err()
                .code(),
            Code::NotFound,
            "{cache}"
        );
        let accepted = answer(&api, bob, first.request_id, true).await.unwrap();
        assert_eq!(accepted.state(), pb::RequestState::Accepted, "{cache}");
        assert_eq!(
            answer(&api, bob, first.request_id, true)
                .await
                .unwrap()
                .state(),
            pb::RequestState::Accepted
        );
        assert_eq!(
            relation(&api, ann, bob).await.relation(),
            pb::Relation::Both,
            "{cache}: the cache forgot the pair"
        );

        // One-sided delete: bob still lists ann.
        api.delete_friend(as_user(ann, pb::DeleteFriendRequest { peer_id: bob }))
            .await
            .unwrap();
        assert_eq!(
            relation(&api, bob, ann).await.relation(),
            pb::Relation::MineOnly,
            "{cache}"
        );
        let changes = api
            .list_friends(as_user(
                ann,
                pb::ListFriendsRequest {
                    after_sequence: 0,
                    limit: 0,
                },
            ))
            .await
            .unwrap();
        let rows = changes.into_inner().friendships;
        assert_eq!(
            rows.iter()
                .map(|r| (r.peer_id, r.status()))
                .collect::<Vec<_>>(),
            vec![(bob, pb::FriendStatus::Deleted)]
        );
        // Asking again comes back at once: bob still lists ann.
        assert!(ask(&api, ann, bob).await.unwrap().friends, "{cache}");
    }
}

#[tokio::test]
async fn blocking_needs_no_friendship_refuses_requests_and_shows_in_checks_at_once() {
    for (cache, api) in apis().await {
        let (bob, cat) = (user(&api, "bob").await, user(&api, "cat").await);
        assert!(!relation(&api, cat, bob).await.blocked_me, "{cache}");
        let blocked = api
            .block(as_user(bob, pb::BlockRequest { peer_id: cat }))
            .await
            .unwrap()
            .into_inner();
        assert!(blocked.friendship.unwrap().blocked);
        let seen = relation(&api, cat, bob).await;
        assert!(
            seen.blocked_me && !seen.blocked_by_me && seen.exists,
            "{cache}: {seen:?}"
        );
        assert_eq!(
            ask(&api, cat, bob).await.unwrap_err().code(),
            Code::PermissionDenied,
            "{cache}"
        );
        api.unblock(as_user(bob, pb::UnblockRequest { peer_id: cat }))
            .await
            .unwrap();
        assert!(!relation(&api, cat, bob).await.blocked_me, "{cache}");
    }
}

#[tokio::test]
async fn a_disabled_user_gets_no_tokens_and_counts_as_absent_at_once() {
    for (cache, api) in apis().await {
        let (ann, bob) = (user(&api, "ann").await, user(&api, "bob").await);
        assert!(relation(&api, ann, bob).await.exists);
        let disable = pb::SetDisabledRequest {
            user_id: bob,
            disabled: true,
        };
        let bob_now = api
            .set_disabled(as_actor(Actor::System, disable))
            .await
            .unwrap()
            .into_inner()
            .user
            .unwrap();
        assert_eq!(
            (bob_now.disabled, bob_now.token_version),
            (true, 1),
            "{cache}"
        );
        assert!(
            !relation(&api, ann, bob).await.exists,
            "{cache}: the cache forgot bob"
        );
        let token = api
            .issue_token(as_actor(
                Actor::System,
                pb::IssueTokenRequest { user_id: bob },
            ))
            .await;
        assert_eq!(
            token.unwrap_err().code(),
            Code::FailedPrecondition,
            "{cache}"
        );
        let token = api
            .issue_token(as_actor(
                Actor::System,
                pb::IssueTokenRequest { user_id: ann },
            ))
            .await;
        assert!(token.unwrap().into_inner().token.len() > 20);
    }
}

#[tokio::test]
async fn bad_input_and_wrong_callers_get_precise_errors() {
    let (_, api) = apis().await.remove(0);
    let (ann, bob) = (user(&api, "ann").await, user(&api, "bob").await);
    let field = |s: Status| {
        (
            s.code(),
            s.message().split(':').next().unwrap_or_default().to_owned(),
        )
    };
    let invalid = |f: &str| (Code::InvalidArgument, f.to_owned());
    assert_eq!(
        field(ask(&api, ann, ann).await.unwrap_err()),
        invalid("to_user_id")
    );
    assert_eq!(
        ask(&api, ann, 424_242).await.unwrap_err().code(),
        Code::NotFound
    );
    let remark = pb::SetRemarkRequest {
        peer_id: bob,
        remark: "r".repeat(65),
    };
    assert_eq!(
        field(api.set_remark(as_user(ann, remark)).await.unwrap_err()),
        invalid("remark")
    );
    for bad in [
        "[1,2]",
        "{not json",
        &format!("{{\"k\":\"{}\"}}", "x".repeat(5000)),
    ] {
        let update = pb::UpdateProfileRequest {
            extra_json: Some(bad.into()),
            ..Default::default()
        };
        assert_eq!(
            field(api.update_profile(as_user(ann, update)).await.unwrap_err()),
            invalid("extra_json"),
            "{bad}"
        );
    }
    let avatar = pb::UpdateProfileRequest {
        avatar_url: Some("javascript:alert(1)".into()),
        ..Default::default()
    };
    assert_eq!(
        field(api.update_profile(as_user(ann, avatar)).await.unwrap_err()),
        invalid("avatar_url")
    );
    let many = pb::CheckRelationsRequest {
        user_id: 0,
        peer_ids: (1..=501).collect(),
    };
    assert_eq!(
        field(api.check_relations(as_user(ann, many)).await.unwrap_err()),
        invalid("peer_ids")
    );
    // Identity comes from metadata: the system actor cannot act as a user, a user cannot act as admin.
    let as_system = pb::SendFriendRequestRequest {
        to_user_id: bob,
        ..Default::default()
    };
    assert_eq!(
        api.send_friend_request(as_actor(Actor::System, as_system))
            .await
            .unwrap_err()
            .code(),
        Code::PermissionDenied
    );
    let admin = pb::CreateUserRequest {
        username: "eve".into(),
        nickname: String::new(),
    };
    assert_eq!(
        api.create_user(as_user(ann, admin))
            .await
            .unwrap_err()
            .code(),
        Code::PermissionDenied
    );
    let nobody = pb::CheckRelationsRequest {
        user_id: 0,
        peer_ids: vec![bob],
    };
    assert_eq!(
        field(
            api.check_relations(as_actor(Actor::System, nobody))
                .await
                .unwrap_err()
        ),
        invalid("user_id")
    );
    let profile = pb::UpdateProfileRequest {
        nickname: Some("Ann A.".into()),
        ..Default::default()
    };
    let updated = api
        .update_profile(as_user(ann, profile))
        .await
        .unwrap()
        .into_inner()
        .user
        .unwrap();
    assert_eq!(updated.nickname, "Ann A.");
}

async fn pairs(
    api: &RelationApi,
    asker: Actor,
    pairs: &[(i64, i64)],
) -> Result<Vec<pb::PeerRelation>, Status> {
    let request = pb::CheckPairsRequest {
        pairs: pairs
            .iter()
            .map(|&(user_id, peer_id)| pb::UserPair { user_id, peer_id })
            .collect(),
    };
    api.check_pairs(as_actor(asker, request))
        .await
        .map(|r| r.into_inner().relations)
}

#[tokio::test]
async fn pairs_of_many_users_are_checked_in_one_call_in_the_order_asked() {
    for (cache, api) in apis().await {
        let (ann, bob, cat) = (
            user(&api, "ann").await,
            user(&api, "bob").await,
            user(&api, "cat").await,
        );
        api.block(as_user(bob, pb::BlockRequest { peer_id: cat }))
            .await
            .unwrap();
        let found = pairs(
            &api,
            Actor::System,
            &[(cat, bob), (ann, bob), (bob, cat), (ann, 999_999)],
        )
        .await
        .unwrap();
        let seen: Vec<(i64, bool, bool, bool)> = found
            .iter()
            .map(|r| (r.peer_id, r.exists, r.blocked_me, r.blocked_by_me))
            .collect();
        assert_eq!(
            seen,
            vec![
                (bob, true, true, false),
                (bob, true, false, false),
                (cat, true, false, true),
                (999_999, false, false, false),
            ],
            "{cache}"
        );
        let refused = pairs(&api, Actor::User(ann), &[(ann, bob)])
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::PermissionDenied, "{cache}");
        let too_many: Vec<(i64, i64)> = (1..=501).map(|p| (ann, p)).collect();
        let refused = pairs(&api, Actor::System, &too_many).await.unwrap_err();
        assert_eq!(refused.code(), Code::InvalidArgument, "{cache}");
        assert!(
            refused.message().starts_with("pairs: "),
            "{cache}: {refused:?}"
        );
        let refused = pairs(&api, Actor::System, &[(ann, 0)]).await.unwrap_err();
        assert_eq!(refused.code(), Code::InvalidArgument, "{cache}");
        assert!(
            refused.message().starts_with("pairs: "),
            "{cache}: {refused:?}"
        );
    }
}

fn from_addr<T>(addr: &str, message: T) -> Request<T> {
    let mut request = as_actor(Actor::System, message);
    request.metadata_mut().insert(
        imesh_kit::identity::CLIENT_ADDR_HEADER,
        addr.parse().unwrap(),
    );
    request
}

/// An address of its own: registrations are counted per address, in Redis across runs.
fn unique_addr() -> String {
    let n = testing::random_id();
    format!("10.{}.{}.{}", n % 250, (n / 250) % 250, (n / 62_500) % 250)
}

fn unique_name(prefix: &str) -> String {
    format!("{prefix}{}", testing::random_id() % 1_000_000_000)
}

async fn register(api: &RelationApi, name: &str, addr: &str) -> Result<(), Status> {
    let body = pb::RegisterRequest {
        username: name.into(),
        password: "correct horse".into(),
        nickname: String::new(),
    };
    api.register(from_addr(addr, body)).await.map(drop)
}

async fn login(api: &RelationApi, name: &str, password: &str) -> Result<(), Status> {
    let body = pb::LoginRequest {
        username: name.into(),
        password: password.into(),
    };
    api.login(as_actor(Actor::System, body)).await.map(drop)
}

async fn login_from(api: &RelationApi, addr: &str, name: &str) -> Result<(), Status> {
    let body = pb::LoginRequest {
        username: name.into(),
        password: "wrong horse".into(),
    };
    api.login(from_addr(addr, body)).await.map(drop)
}

fn retry_after_ms(status: &Status) -> u64 {
    status
        .metadata()
        .get(imesh_kit::error::RETRY_AFTER_HEADER)
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or_else(|| panic!("no retry hint on {status:?}"))
}

#[tokio::test]
async fn failed_logins_past_the_free_ones_hold_the_account_even_from_the_right_password() {
    for (name, api) in apis().await {
        let (user, addr) = (unique_name("held"), unique_addr());
        register(&api, &user, &addr).await.unwrap();
        let free = Config::default().login.free_failures;
        for _ in 0..=free {
            let refused = login(&api, &user, "wrong horse").await.unwrap_err();
            assert_eq!(refused.code(), Code::Unauthenticated, "{name}");
        }
        let held = login(&api, &user, "correct horse").await.unwrap_err();
        assert_eq!(held.code(), Code::ResourceExhausted, "{name}: {held:?}");
        assert!(
            held.message()
                .starts_with("login: too many failed attempts"),
            "{name}"
        );
        let wait = retry_after_ms(&held);
        assert!((1..=1_000).contains(&wait), "{name}: {wait} ms");
        // Another account is not held by this one's failures.
        let other = unique_name("free");
        register(&api, &other, &addr).await.unwrap();
        login(&api, &other, "correct horse").await.unwrap();
        testing::until_async("the hold to end", || async {
            login(&api, &user, "correct horse").await.is_ok()
        })
        .await;
        // The login forgot the failures: one more wrong password is free again.
        let refused = login(&api, &user, "wrong horse").await.unwrap_err();
        assert_eq!(refused.code(), Code::Unauthenticated, "{name}");
    }
}

#[tokio::test]
async fn an_unknown_username_fails_like_a_wrong_password_and_is_held_the_same_way() {
    for (name, api) in apis().await {
        let ghost = unique_name("ghost");
        let free = Config::default().login.free_failures;
        for _ in 0..=free {
            let refused = login(&api, &ghost, "any password").await.unwrap_err();
            assert_eq!(refused.code(), Code::Unauthenticated, "{name}");
            assert_eq!(refused.message(), "username or password is wrong", "{name}");
        }
        let held = login(&api, &ghost, "any password").await.unwrap_err();
        assert_eq!(held.code(), Code::ResourceExhausted, "{name}");
    }
}

#[tokio::test]
async fn failures_from_one_address_over_many_accounts_hold_that_address_only() {
    for (name, api) in apis().await {
        let addr = unique_addr();
        let free = Config::default().login.free_failures_per_source;
        // Each account stays within its own free failures; the address does not.
        for _ in 0..=free {
            let refused = login_from(&api, &addr, &unique_name("spray"))
                .await
                .unwrap_err();
            assert_eq!(refused.code(), Code::Unauthenticated, "{name}");
        }
        let held = login_from(&api, &addr, &unique_name("spray"))
            .await
            .unwrap_err();
        assert_eq!(held.code(), Code::ResourceExhausted, "{name}: {held:?}");
        let elsewhere = login_from(&api, &unique_addr(), &unique_name("spray")).await;
        assert_eq!(
            elsewhere.unwrap_err().code(),
            Code::Unauthenticated,
            "{name}"
        );
    }
}

#[tokio::test]
async fn registrations_from_one_address_are_limited_per_window() {
    for (name, api) in apis().await {
        let addr = unique_addr();
        let limit = Config::default().login.registrations_per_source;
        for _ in 0..limit {
            register(&api, &unique_name("reg"), &addr).await.unwrap();
        }
        let refused = register(&api, &unique_name("reg"), &addr)
            .await
            .unwrap_err();
        assert_eq!(
            refused.code(),
            Code::ResourceExhausted,
            "{name}: {refused:?}"
        );
        assert!(retry_after_ms(&refused) > 0, "{name}");
        // Another address, and a caller that names none, still register.
        register(&api, &unique_name("reg"), &unique_addr())
            .await
            .unwrap();
        let body = pb::RegisterRequest {
            username: unique_name("reg"),
            password: "correct horse".into(),
            nickname: String::new(),
        };
        api.register(as_actor(Actor::System, body)).await.unwrap();
    }
}

#[tokio::test]
async fn a_client_address_that_is_not_an_ip_is_refused_naming_the_header() {
    for (name, api) in apis().await {
        let body = pb::LoginRequest {
            username: "someone".into(),
            password: "whatever1".into(),
        };
        let refused = api
            .login(from_addr("10.0.0.1:443", body))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::InvalidArgument, "{name}");
        assert!(
            refused.message().starts_with("x-imesh-client-addr:"),
            "{name}"
        );
    }
}
