//! Faults on the send path: with sync-svc down, sends are still acknowledged and stored
//! (message and outbox row in one transaction); when sync-svc comes up the relay catches up
//! and every message reaches the inbox once, in order. With Redis flushed mid-run, seqs keep
//! rising and none is handed out twice.

use std::net::SocketAddr;

use imesh_kit::{
    config::{AuthConfig, GrpcConfig, RedisConfig, Secret},
    identity::{Actor, Caller},
    testing,
};
use imesh_protos::{
    message::{
        Content, SendRequest, Text, content, message_service_client::MessageServiceClient,
        send_request::To,
    },
    relation::{CreateUserRequest, relation_service_client::RelationServiceClient},
    sync::{PullRequest, sync_event::Kind, sync_service_client::SyncServiceClient},
};
use imesh_tests::{INTERNAL_SECRET, JWT_SECRET, PATIENCE, eventually};
use tokio::{net::TcpListener, sync::oneshot};

/// A listener on a free loopback port.
async fn listener() -> (TcpListener, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    (l, addr)
}

/// Serves `service` on `l` until the returned sender fires or drops.
fn spawn<F>(serve: impl FnOnce(oneshot::Receiver<()>) -> F) -> oneshot::Sender<()>
where
    F: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let (stop, stopped) = oneshot::channel();
    tokio::spawn(serve(stopped));
    stop
}

/// relation-svc and message-svc on SQLite (message-svc's counters in `redis`, if set),
/// message-svc relaying to `sync_addr`, and one user to send to.
struct Senders {
    auth: AuthConfig,
    caller: Caller,
    message_addr: SocketAddr,
    user: i64,
    _stops: [oneshot::Sender<()>; 2],
}

impl Senders {
    async fn start(redis: RedisConfig, sync_addr: SocketAddr, node: u16) -> Self {
        let auth = AuthConfig {
            internal_secret: Secret::new(INTERNAL_SECRET),
            jwt_secret: Secret::new(JWT_SECRET),
            ..AuthConfig::default()
        };
        let caller = Caller::new(&auth.internal_secret).unwrap();
        let db = || async { testing::fresh_sql(testing::Backend::Sqlite).await.unwrap() };
        let (relation_l, relation_addr) = listener().await;
        let (message_l, message_addr) = listener().await;
        let relation = relation_svc::Service::build(
            relation_svc::Config {
                grpc: GrpcConfig::on(relation_addr),
                database: db().await,
                sync_addr: sync_addr.to_string(),
                ..Default::default()
            },
            &auth,
            Some(node),
        )
        .await
        .unwrap();
        let message = message_svc::Service::build(
            message_svc::Config {
                grpc: GrpcConfig::on(message_addr),
                database: db().await,
                redis,
                relation_addr: relation_addr.to_string(),
                sync_addr: sync_addr.to_string(),
                seq_step: 10,
                ..Default::default()
            },
            &auth,
            Some(node + 1),
        )
        .await
        .unwrap();
        let stops = [
            spawn(|stop| {
                relation.serve(relation_l, async {
                    stop.await.ok();
                })
            }),
            spawn(|stop| {
                message.serve(message_l, async {
                    stop.await.ok();
                })
            }),
        ];
        let user = RelationServiceClient::new(channel(relation_addr))
            .create_user(caller.request(
                Actor::System,
                CreateUserRequest {
                    username: format!("u{}", testing::random_id()),
                    nickname: "Dana".into(),
                },
            ))
            .await
            .unwrap()
            .into_inner()
            .user
            .unwrap()
            .user_id;
        Self {
            auth,
            caller,
            message_addr,
            user,
            _stops: stops,
        }
    }

    fn messages(&self) -> MessageServiceClient<imesh_kit::grpc::Channel> {
        MessageServiceClient::new(channel(self.message_addr))
    }
}

fn channel(addr: SocketAddr) -> imesh_kit::grpc::Channel {
    imesh_kit::grpc::channel(&addr.to_string()).unwrap()
}

/// One system notice to `user`; its seq.
async fn notify(
    messages: &mut MessageServiceClient<imesh_kit::grpc::Channel>,
    caller: &Caller,
    user: i64,
    key: &str,
) -> i64 {
    let send = SendRequest {
        client_msg_id: key.into(),
        to: Some(To::UserId(user)),
        content: Some(Content {
            kind: Some(content::Kind::Text(Text {
                text: format!("notice {key}"),
            })),
        }),
        ..SendRequest::default()
    };
    messages
        .send(caller.request(Actor::System, send))
        .await
        .expect("a send is acknowledged")
        .into_inner()
        .seq
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seqs_keep_rising_without_reuse_when_redis_is_flushed_mid_run() {
    // A database of its own on the test Redis, so flushing it touches no other test.
    let Some(redis) = imesh_tests::private_redis() else {
        return; // the embedded default has no Redis to flush
    };
    let (_, nowhere) = listener().await;
    let senders = Senders::start(redis.clone(), nowhere, 14).await;
    let caller = senders.caller.clone();
    let user = senders.user;
    let mut messages = senders.messages();
    let mut seqs = Vec::new();
    for i in 0..15 {
        seqs.push(notify(&mut messages, &caller, user, &format!("before-{i}")).await);
    }
    let pool = imesh_kit::redis::connect(&redis, redis.url().unwrap())
        .await
        .unwrap();
    let _: () =
        fred::interfaces::ClientLike::custom(&pool, fred::cmd!("FLUSHDB"), Vec::<String>::new())
            .await
            .unwrap();
    for i in 0..15 {
        seqs.push(notify(&mut messages, &caller, user, &format!("after-{i}")).await);
    }
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "strictly increasing across the flush, so none reused: {seqs:?}"
    );
    assert!(
        seqs[15] > seqs[14] + 1,
        "the counter was lost and resumed above its persisted ceiling: {seqs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_made_while_sync_svc_is_down_reach_the_inbox_once_it_is_back() {
    // Reserve sync-svc's address, then leave it dark.
    let (sync_l, sync_addr) = listener().await;
    drop(sync_l);
    let senders = Senders::start(RedisConfig::default(), sync_addr, 11).await;
    let (auth, caller, user) = (senders.auth.clone(), senders.caller.clone(), senders.user);
    let mut messages = senders.messages();
    for i in 1..=100 {
        assert_eq!(
            notify(&mut messages, &caller, user, &format!("while-down-{i}")).await,
            i
        );
    }

    // sync-svc comes up where message-svc's relay has been knocking.
    let sync_l = TcpListener::bind(sync_addr).await.unwrap();
    let sync = sync_svc::Service::build(
        sync_svc::Config {
            grpc: GrpcConfig::on(sync_addr),
            database: testing::fresh_sql(testing::Backend::Sqlite).await.unwrap(),
            ..Default::default()
        },
        &auth,
        Some(13),
    )
    .await
    .unwrap();
    let _sync = spawn(|stop| {
        sync.serve(sync_l, async {
            stop.await.ok();
        })
    });
    let mut inbox = SyncServiceClient::new(channel(sync_addr));
    let seqs = eventually("the relay catching up", PATIENCE, async || {
        let pulled = inbox
            .pull(caller.request(
                Actor::User(user),
                PullRequest {
                    after_sync_seq: 0,
                    limit: 500,
                },
            ))
            .await
            .map(|r| r.into_inner().entries)
            .unwrap_or_default();
        let seqs: Vec<i64> = pulled
            .iter()
            .filter_map(|e| match e.event.as_ref()?.kind.as_ref()? {
                Kind::Message(m) => Some(m.seq),
                _ => None,
            })
            .collect();
        (seqs.len() >= 100).then_some(seqs)
    })
    .await;
    assert_eq!(
        seqs,
        (1..=100).collect::<Vec<i64>>(),
        "each message once, in order"
    );
}
