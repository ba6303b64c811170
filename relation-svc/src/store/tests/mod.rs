//! The store contracts, run against every SQL backend (SQLite always; PostgreSQL and MySQL
//! under scripts/test).

use std::sync::Arc;

use imesh_kit::{error::StoreError, ids::Snowflake, outbox::SqlOutbox, testing};
use prost::Message as _;
use tokio::sync::Notify;

mod attempts;
mod edges;

use super::*;
use crate::domain::{
    Direction, Error, FriendStatus, FriendStore, NewUser, ProfileUpdate, RequestState, User,
    UserStore,
    plan::{self, Clock},
};

struct Stores {
    backend: testing::Backend,
    db: sea_orm::DatabaseConnection,
    users: Arc<dyn UserStore>,
    friends: Arc<dyn FriendStore>,
    outbox: SqlOutbox,
}

async fn stores() -> Vec<Stores> {
    let mut out = Vec::new();
    for backend in testing::sql_backends() {
        let config = testing::fresh_sql(backend).await.unwrap();
        let db = imesh_kit::sql::connect_and_migrate::<sql::Migrator>(&config)
            .await
            .unwrap();
        let ids = Arc::new(Snowflake::new(9));
        out.push(Stores {
            backend,
            users: Arc::new(sql::SqlUserStore::new(
                db.clone(),
                ids.clone(),
                Arc::new(Notify::new()),
            )),
            friends: Arc::new(sql::SqlFriendStore::new(
                db.clone(),
                ids,
                crate::events::encode,
                Arc::new(Notify::new()),
            )),
            outbox: SqlOutbox::new(db.clone(), OUTBOX_TABLE),
            db,
        });
    }
    out
}

fn new_user(id: i64, username: &str) -> NewUser {
    NewUser {
        user: User {
            id,
            username: username.into(),
            nickname: format!("{username}!"),
            created_at_ms: 1_700_000_000_000,
            avatar_url: String::new(),
            extra_json: String::new(),
            disabled: false,
            token_version: 0,
        },
        password_hash: "$argon2id$fake".into(),
    }
}

async fn with_users(s: &Stores, ids: &[i64]) {
    for &id in ids {
        s.users
            .insert(&new_user(id, &format!("user{id}")))
            .await
            .unwrap();
    }
}

const CLOCK: Clock = Clock {
    now_ms: 1_800_000_000_000,
    request_ttl_ms: 86_400_000,
};

#[tokio::test]
async fn users_insert_find_update_and_a_taken_username_changes_nothing() {
    for s in stores().await {
        let b = s.backend;
        s.users.insert(&new_user(1, "ann")).await.unwrap();
        s.users.insert(&new_user(2, "bob")).await.unwrap();
        let ann = s
            .users
            .by_username("ann")
            .await
            .unwrap()
            .expect("ann stored");
        assert_eq!(
            (ann.user, ann.password_hash.as_str()),
            (new_user(1, "ann").user, "$argon2id$fake"),
            "{b:?}"
        );
        assert!(s.users.by_username("nobody").await.unwrap().is_none());
        let mut found: Vec<i64> = s
            .users
            .by_ids(&[1, 2, 3])
            .await
            .unwrap()
            .iter()
            .map(|u| u.id)
            .collect();
        found.sort();
        assert_eq!(found, vec![1, 2], "{b:?}");
        let err = s.users.insert(&new_user(3, "ann")).await.unwrap_err();
        assert!(matches!(err, StoreError::Conflict(_)), "{b:?}: {err:?}");
        assert!(s.users.by_ids(&[3]).await.unwrap().is_empty(), "{b:?}");

        let update = ProfileUpdate {
            avatar_url: Some("https://a/b.png".into()),
            extra_json: Some("{\"k\":1}".into()),
            ..Default::default()
        };
        let updated = s.users.update_profile(1, &update).await.unwrap().unwrap();
        assert_eq!(
            (
                updated.nickname.as_str(),
                updated.avatar_url.as_str(),
                updated.extra_json.as_str()
            ),
            ("ann!", "https://a/b.png", "{\"k\":1}"),
            "{b:?}"
        );
        assert!(s.users.update_profile(99, &update).await.unwrap().is_none());
        let renames = SqlOutbox::new(s.db.clone(), crate::events::RENAME_OUTBOX_TABLE);
        assert!(
            renames.pending(10).await.unwrap().is_empty(),
            "{b:?}: no rename yet"
        );

        // A nickname change leaves a rename for group-svc in the same transaction.
        let rename = ProfileUpdate {
            nickname: Some("Ann B".into()),
            ..Default::default()
        };
        s.users.update_profile(1, &rename).await.unwrap().unwrap();
        s.users.update_profile(99, &rename).await.unwrap();
        let rows = renames.pending(10).await.unwrap();
        assert_eq!(rows.len(), 1, "{b:?}: one rename, none for a missing user");
        let name = imesh_protos::group::MemberName::decode(rows[0].payload.as_slice()).unwrap();
        assert_eq!(
            (name.user_id, name.nickname.as_str()),
            (1, "Ann B"),
            "{b:?}"
        );
        assert_eq!(name.version, rows[0].id, "{b:?}: versioned by the row id");
    }
}

#[tokio::test]
async fn disabling_moves_the_token_version_on_and_enabling_keeps_it() {
    for s in stores().await {
        with_users(&s, &[1]).await;
        let disabled = s.users.set_disabled(1, true).await.unwrap().unwrap();
        assert_eq!(
            (disabled.disabled, disabled.token_version),
            (true, 1),
            "{:?}",
            s.backend
        );
        let enabled = s.users.set_disabled(1, false).await.unwrap().unwrap();
        assert_eq!(
            (enabled.disabled, enabled.token_version),
            (false, 1),
            "{:?}",
            s.backend
        );
        assert!(s.users.set_disabled(2, true).await.unwrap().is_none());
    }
}

#[tokio::test]
async fn a_pair_change_writes_rows_with_their_owners_sequences_and_one_event_each() {
    for s in stores().await {
        let b = s.backend;
        with_users(&s, &[1, 2, 3]).await;
        let draft = plan::parse_draft(50, "hi", "qr").unwrap();
        let sent = s
            .friends
            .change_pair(1, 2, &|st| plan::send(st, draft.clone(), CLOCK))
            .await
            .unwrap();
        assert_eq!(
            sent.forward.as_ref().map(|r| r.state),
            Some(RequestState::Pending),
            "{b:?}"
        );
        let accepted = s
            .friends
            .change_pair(1, 2, &|st| plan::respond(st, 50, true, CLOCK))
            .await
            .unwrap();
        assert_eq!(
            accepted.forward.as_ref().map(|r| r.state),
            Some(RequestState::Accepted),
            "{b:?}"
        );
        let (mine, theirs) = (accepted.mine.unwrap(), accepted.theirs.unwrap());
        assert!(mine.is_friend() && theirs.is_friend(), "{b:?}");
        assert_eq!(
            (mine.add_source.as_str(), mine.sequence, theirs.sequence),
            ("qr", 2, 2),
            "{b:?}: each change bumps both"
        );
        s.friends
            .change_pair(1, 3, &|st| Ok(plan::set_blocked(st, true)))
            .await
            .unwrap();

        let changes = s.friends.changes(1, 0, 10).await.unwrap();
        let seen: Vec<(i64, i64, FriendStatus, bool)> = changes
            .iter()
            .map(|r| (r.peer, r.sequence, r.status, r.blocked))
            .collect();
        assert_eq!(
            seen,
            vec![
                (2, 2, FriendStatus::Friend, false),
                (3, 3, FriendStatus::None, true)
            ],
            "{b:?}"
        );
        assert_eq!(
            s.friends.changes(1, 2, 10).await.unwrap().len(),
            1,
            "{b:?}: only after the cursor"
        );
        let mut owners: Vec<i64> = s
            .friends
            .rows_of(&[1, 2])
            .await
            .unwrap()
            .iter()
            .map(|r| r.owner * 10 + r.peer)
            .collect();
        owners.sort();
        assert_eq!(owners, vec![12, 13, 21], "{b:?}");
        // Events: request created, request accepted, two rows, the block row.
        assert_eq!(s.outbox.pending(100).await.unwrap().len(), 5, "{b:?}");
        let received = s
            .friends
            .requests(2, Direction::Received, i64::MAX, 10)
            .await
            .unwrap();
        assert_eq!(
            received.iter().map(|r| r.id).collect::<Vec<_>>(),
            vec![50],
            "{b:?}"
        );
        assert!(
            s.friends
                .requests(2, Direction::Sent, i64::MAX, 10)
                .await
                .unwrap()
                .is_empty()
        );
    }
}

#[tokio::test]
async fn a_refused_plan_or_an_unknown_user_changes_nothing() {
    for s in stores().await {
        let b = s.backend;
        with_users(&s, &[1, 2]).await;
        let refused = s
            .friends
            .change_pair(1, 2, &|st| plan::set_remark(st, "x".into()))
            .await
            .unwrap_err();
        assert!(
            matches!(refused, Error::Precondition(_)),
            "{b:?}: {refused:?}"
        );
        let unknown = s
            .friends
            .change_pair(1, 77, &|st| Ok(plan::set_blocked(st, true)))
            .await
            .unwrap_err();
        assert!(
            matches!(unknown, Error::Store(StoreError::NotFound)),
            "{b:?}: {unknown:?}"
        );
        assert!(
            s.friends.rows_of(&[1, 2, 77]).await.unwrap().is_empty(),
            "{b:?}"
        );
        assert!(s.outbox.pending(10).await.unwrap().is_empty(), "{b:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_accepts_and_crossed_requests_make_one_friendship() {
    for s in stores().await {
        let b = s.backend;
        with_users(&s, &[1, 2, 3, 4]).await;
        let draft = plan::parse_draft(60, "", "").unwrap();
        s.friends
            .change_pair(1, 2, &|st| plan::send(st, draft.clone(), CLOCK))
            .await
            .unwrap();
        let accepts = (0..8).map(|_| {
            let friends = s.friends.clone();
            tokio::spawn(async move {
                friends
                    .change_pair(1, 2, &|st| plan::respond(st, 60, true, CLOCK))
                    .await
            })
        });
        for accept in futures::future::join_all(accepts).await {
            accept.unwrap().unwrap();
        }
        let rows = s.friends.rows_of(&[1, 2]).await.unwrap();
        assert_eq!(rows.len(), 2, "{b:?}");
        // Created, accepted once, two rows: the other seven accepts wrote nothing.
        assert_eq!(s.outbox.pending(100).await.unwrap().len(), 4, "{b:?}");

        let crossed = [(3, 4, 70), (4, 3, 71)].map(|(a, peer, id)| {
            let friends = s.friends.clone();
            tokio::spawn(async move {
                let draft = plan::parse_draft(id, "", "").unwrap();
                friends
                    .change_pair(a, peer, &|st| plan::send(st, draft.clone(), CLOCK))
                    .await
            })
        });
        for sent in futures::future::join_all(crossed).await {
            sent.unwrap().unwrap();
        }
        let rows = s.friends.rows_of(&[3, 4]).await.unwrap();
        assert!(
            rows.len() == 2 && rows.iter().all(|r| r.is_friend()),
            "{b:?}: {rows:?}"
        );
    }
}
