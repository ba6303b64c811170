//! Two replicas of every service, each a process of its own, on PostgreSQL and Redis,
//! behind a gateway that lists them: every device's pipelined messages reach their
//! recipient once and in the order sent while both message-svc replicas take sends (each
//! sender is owned by one, whose writer and relay keep its order). Runs when the test
//! PostgreSQL and Redis are configured (scripts/test starts them).

use std::collections::HashMap;

use imesh_kit::{
    config::Secret,
    identity::{Actor, Caller},
    testing::{self, Backend},
};
use imesh_protos::{
    gateway::{client_frame, server_frame::Body},
    message::{Content, SendRequest, Text, content, send_request::To},
    relation::{
        CreateUserRequest, IssueTokenRequest, relation_service_client::RelationServiceClient,
    },
    sync::sync_event::Kind,
};
use imesh_tests::{
    Device, INTERNAL_SECRET,
    processes::{Deployment, Programs, Shape},
    scrape,
};

/// Senders, each writing to a recipient of their own.
const PAIRS: usize = 6;
/// Messages each sender sends.
const MESSAGES: usize = 40;
/// Sends a device keeps unanswered (under the gateway's 32).
const WINDOW: usize = 16;

async fn user(
    relation: &mut RelationServiceClient<imesh_kit::grpc::Channel>,
    name: &str,
) -> (i64, String) {
    let caller = Caller::new(&Secret::new(INTERNAL_SECRET)).unwrap();
    let create = CreateUserRequest {
        username: name.into(),
        nickname: String::new(),
    };
    let user = relation
        .create_user(caller.request(Actor::System, create))
        .await
        .expect("user created")
        .into_inner()
        .user
        .unwrap();
    let issue = IssueTokenRequest {
        user_id: user.user_id,
    };
    let token = relation
        .issue_token(caller.request(Actor::System, issue))
        .await
        .expect("token issued")
        .into_inner()
        .token;
    (user.user_id, token)
}

fn text(to: i64, i: usize) -> client_frame::Body {
    client_frame::Body::Send(SendRequest {
        client_msg_id: format!("m{i}"),
        to: Some(To::UserId(to)),
        content: Some(Content {
            kind: Some(content::Kind::Text(Text {
                text: i.to_string(),
            })),
        }),
        ..Default::default()
    })
}

/// Sends `MESSAGES` texts "0", "1", … to `to`, up to `WINDOW` unanswered; every one acked.
async fn pipeline(device: &mut Device, to: i64) {
    let mut waiting = std::collections::VecDeque::new();
    for i in 0..MESSAGES {
        waiting.push_back(device.send_frame(text(to, i)).await);
        if waiting.len() == WINDOW || i + 1 == MESSAGES {
            while let Some(id) = waiting.pop_front() {
                let reply = device.reply(id).await;
                assert!(matches!(reply, Body::SendAck(_)), "send {id}: {reply:?}");
                if waiting.len() < WINDOW / 2 && i + 1 < MESSAGES {
                    break;
                }
            }
        }
    }
}

/// The texts `device` receives from `sender` until it has `MESSAGES`, acking as it reads.
async fn received(device: &mut Device, sender: i64) -> Vec<String> {
    let mut texts = Vec::new();
    while texts.len() < MESSAGES {
        let entry = device.next_push().await;
        device.ack(entry.sync_seq).await;
        if let Some(Kind::Message(m)) = entry.event.and_then(|e| e.kind)
            && m.sender_id == sender
            && let Some(content::Kind::Text(t)) = m.content.and_then(|c| c.kind)
        {
            texts.push(t.text);
        }
    }
    texts
}

/// SendBatch calls a message-svc replica answered OK, from its metrics.
async fn batches_taken(addr: std::net::SocketAddr) -> u64 {
    scrape(addr)
        .await
        .lines()
        .filter(|l| {
            l.contains("SendBatch")
                && l.contains("code=\"Ok\"")
                && l.starts_with("imesh_grpc_requests_total")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_of_every_service_deliver_each_devices_messages_once_in_order() {
    if testing::redis().is_none() || !testing::sql_backends().contains(&Backend::Postgres) {
        return;
    }
    let deployment = Deployment::start_shaped(
        Programs {
            service: env!("CARGO_BIN_EXE_test-service"),
            gateway: env!("CARGO_BIN_EXE_test-gateway"),
        },
        Shape::replicated(2),
        &[("IMESH__RATE_LIMITS__USER_PER_SEC", "0".to_owned())],
    )
    .await;
    let relation_addrs: Vec<String> = deployment.replicas["relation"]
        .iter()
        .map(ToString::to_string)
        .collect();
    let mut relation =
        RelationServiceClient::new(imesh_kit::grpc::channel(&relation_addrs.join(",")).unwrap());
    let mut pairs = Vec::new();
    for pair in 0..PAIRS {
        let (sender, sender_token) = user(&mut relation, &format!("sender{pair}")).await;
        let (recipient, recipient_token) = user(&mut relation, &format!("recipient{pair}")).await;
        let mut from = Device::connect(deployment.addrs.gateway).await;
        from.auth(&sender_token, "phone")
            .await
            .expect("sender signed in");
        let mut to = Device::connect(deployment.addrs.gateway).await;
        to.auth(&recipient_token, "phone")
            .await
            .expect("recipient signed in");
        pairs.push((sender, recipient, from, to));
    }
    let tasks = pairs
        .into_iter()
        .map(|(sender, recipient, mut from, mut to)| {
            tokio::spawn(async move {
                let receiving = tokio::spawn(async move { received(&mut to, sender).await });
                pipeline(&mut from, recipient).await;
                (sender, receiving.await.unwrap())
            })
        });
    let results: HashMap<i64, Vec<String>> = futures::future::join_all(tasks)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let sent: Vec<String> = (0..MESSAGES).map(|i| i.to_string()).collect();
    for (sender, texts) in &results {
        assert_eq!(
            texts, &sent,
            "sender {sender}: every message once, in order"
        );
    }
    for addr in &deployment.replicas["message"] {
        assert!(
            batches_taken(*addr).await > 0,
            "message-svc at {addr} took no sends: the senders did not spread"
        );
    }
}
