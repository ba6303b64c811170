//! Two replicas of every service, each a process of its own, on PostgreSQL and Redis,
//! behind a gateway that lists them: every device's pipelined messages reach their
//! recipient once and in the order sent while both message-svc replicas take sends (each
//! sender is owned by one, whose writer and relay keep its order); and when one
//! message-svc replica is SIGKILLed mid-run, its senders move to the other, no
//! acknowledged message is lost or delivered twice (what it stored and had not relayed is
//! taken over once its node lease lapses), and it serves again after a restart; and under
//! steady sends one replica of each service in turn is SIGKILLed, sends keep being acked
//! while it is down, it restarts, and no acknowledged message is lost or repeated. Runs
//! when the test PostgreSQL and Redis are configured (scripts/test starts them).

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

/// Senders, each writing to a recipient of their own: enough that both replicas own some
/// (all 16 on one: a chance of 2 in 65,536).
const PAIRS: usize = 16;
/// Messages each sender sends.
const MESSAGES: usize = 30;
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

fn text(to: To, i: usize) -> client_frame::Body {
    client_frame::Body::Send(SendRequest {
        client_msg_id: format!("m{i}"),
        to: Some(to),
        content: Some(Content {
            kind: Some(content::Kind::Text(Text {
                text: i.to_string(),
            })),
        }),
        ..Default::default()
    })
}

/// Sends `MESSAGES` texts "0", "1", … to `to`, up to `WINDOW` unanswered; every one acked.
async fn pipeline(device: &mut Device, to: To) {
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

/// The texts `device` receives from `sender` until it has `count` different ones (any
/// repeats included), acking as it reads.
async fn received(device: &mut Device, sender: i64, count: usize) -> Vec<String> {
    let mut texts: Vec<String> = Vec::new();
    let mut distinct = std::collections::HashSet::new();
    while distinct.len() < count {
        let entry = device.next_push().await;
        device.ack(entry.sync_seq).await;
        if let Some(Kind::Message(m)) = entry.event.and_then(|e| e.kind)
            && m.sender_id == sender
            && let Some(content::Kind::Text(t)) = m.content.and_then(|c| c.kind)
        {
            distinct.insert(t.text.clone());
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

fn servers_configured() -> bool {
    testing::redis().is_some() && testing::sql_backends().contains(&Backend::Postgres)
}

async fn replicated() -> Deployment {
    Deployment::start_shaped(
        Programs {
            service: env!("CARGO_BIN_EXE_test-service"),
            gateway: env!("CARGO_BIN_EXE_test-gateway"),
        },
        Shape::replicated(2),
        &[
            ("IMESH__RATE_LIMITS__USER_PER_SEC", "0".to_owned()),
            ("IMESH__RATE_LIMITS__GROUP_PER_SEC", "0".to_owned()),
        ],
    )
    .await
}

/// `PAIRS` senders and recipients, each signed in on a device of their own.
async fn pairs(deployment: &Deployment) -> Vec<(i64, i64, Device, Device)> {
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
    pairs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_of_every_service_deliver_each_devices_messages_once_in_order() {
    if !servers_configured() {
        return;
    }
    let deployment = replicated().await;
    let tasks =
        pairs(&deployment)
            .await
            .into_iter()
            .map(|(sender, recipient, mut from, mut to)| {
                tokio::spawn(async move {
                    let receiving =
                        tokio::spawn(async move { received(&mut to, sender, MESSAGES).await });
                    pipeline(&mut from, To::UserId(recipient)).await;
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

/// Sends `texts` to `to` one at a time, each again (same client_msg_id) until acked.
async fn send_until_acked(device: &mut Device, to: i64, texts: std::ops::Range<usize>) {
    for i in texts {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let id = device.send_frame(text(To::UserId(to), i)).await;
            match device.reply(id).await {
                Body::SendAck(_) => break,
                other => assert!(
                    tokio::time::Instant::now() < deadline,
                    "send {i} never acked: {other:?}"
                ),
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// The texts of `sender`'s messages in `device`'s inbox, once it holds `count` different
/// ones (repeats included), polling for up to a minute: what the killed replica stored and
/// had not relayed waits for its node lease to lapse (30 s).
async fn inbox_texts(device: &mut Device, sender: i64, count: usize) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let texts: Vec<String> = device
            .pull(0)
            .await
            .entries
            .into_iter()
            .filter_map(|entry| match entry.event?.kind? {
                Kind::Message(m) if m.sender_id == sender => match m.content?.kind? {
                    content::Kind::Text(t) => Some(t.text),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        let distinct: std::collections::HashSet<&String> = texts.iter().collect();
        if distinct.len() >= count {
            return texts;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{count} messages of {sender} never reached the inbox: {texts:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Senders sending steadily, one message at a time until each is acked, and their
/// recipients' devices.
struct Steady {
    /// Messages acked so far, over all senders.
    acked: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// Each sender's task, handing its device back once all `MESSAGES` are acked.
    senders: Vec<tokio::task::JoinHandle<Device>>,
    /// (sender, recipient, the recipient's device).
    recipients: Vec<(i64, i64, Device)>,
}

async fn steady(deployment: &Deployment) -> Steady {
    let acked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut senders = Vec::new();
    let mut recipients = Vec::new();
    for (sender, recipient, mut from, to) in pairs(deployment).await {
        let acked = acked.clone();
        senders.push(tokio::spawn(async move {
            for i in 0..MESSAGES {
                send_until_acked(&mut from, recipient, i..i + 1).await;
                acked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            from
        }));
        recipients.push((sender, recipient, to));
    }
    Steady {
        acked,
        senders,
        recipients,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_message_replica_loses_no_acknowledged_message_and_serves_again() {
    if !servers_configured() {
        return;
    }
    let mut deployment = replicated().await;
    let Steady {
        acked,
        senders,
        mut recipients,
    } = steady(&deployment).await;
    imesh_tests::eventually(
        "a third of the messages acked",
        imesh_tests::PATIENCE,
        || {
            let acked = acked.load(std::sync::atomic::Ordering::Relaxed);
            async move { (acked >= PAIRS * MESSAGES / 3).then_some(()) }
        },
    )
    .await;
    deployment.kill("message", 0).await;
    let mut devices = Vec::new();
    for sending in senders {
        devices.push(sending.await.expect("every send acked despite the kill"));
    }
    let sent: Vec<String> = (0..MESSAGES).map(|i| i.to_string()).collect();
    for (sender, _, to) in &mut recipients {
        let mut texts = inbox_texts(to, *sender, MESSAGES).await;
        texts.sort_by_key(|t| t.parse::<usize>().unwrap());
        assert_eq!(
            texts, sent,
            "sender {sender}: each acked message exactly once"
        );
    }

    deployment.restart("message", 0).await;
    for (mut from, (sender, recipient, mut to)) in devices.into_iter().zip(recipients) {
        send_until_acked(&mut from, recipient, MESSAGES..MESSAGES + 1).await;
        let texts = inbox_texts(&mut to, sender, MESSAGES + 1).await;
        assert_eq!(
            texts.len(),
            MESSAGES + 1,
            "sender {sender} after the restart"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_service_loses_a_replica_in_turn_under_load_and_no_acknowledged_message_is_lost() {
    if !servers_configured() {
        return;
    }
    let mut deployment = replicated().await;
    let Steady {
        acked,
        senders,
        mut recipients,
    } = steady(&deployment).await;
    let progress = || acked.load(std::sync::atomic::Ordering::Relaxed);
    // Each service in turn: one replica killed, sends go on, the replica comes back.
    for name in ["relation", "group", "message", "sync", "notify"] {
        deployment.kill(name, 0).await;
        let before = progress();
        let what = format!("sends acked while a {name} replica is down");
        let wanted = (before + PAIRS).min(PAIRS * MESSAGES);
        imesh_tests::eventually(&what, imesh_tests::PATIENCE, || {
            let now = progress();
            async move { (now >= wanted).then_some(()) }
        })
        .await;
        deployment.restart(name, 0).await;
    }
    for sending in senders {
        sending.await.expect("every send acked despite the kills");
    }
    let sent: Vec<String> = (0..MESSAGES).map(|i| i.to_string()).collect();
    for (sender, _, to) in &mut recipients {
        let mut texts = inbox_texts(to, *sender, MESSAGES).await;
        texts.sort_by_key(|t| t.parse::<usize>().unwrap());
        assert_eq!(
            texts, sent,
            "sender {sender}: each acked message exactly once"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_messages_from_many_senders_reach_a_member_in_seq_order_across_replicas() {
    use imesh_protos::group::{CreateGroupRequest, group_service_client::GroupServiceClient};
    if !servers_configured() {
        return;
    }
    let deployment = replicated().await;
    let mut pairs = pairs(&deployment).await;
    let (_, listener_id, _, mut listener) = pairs.remove(0);
    let owner = pairs[0].0;
    let groups: Vec<String> = deployment.replicas["group"]
        .iter()
        .map(ToString::to_string)
        .collect();
    let caller = Caller::new(&Secret::new(INTERNAL_SECRET)).unwrap();
    let create = CreateGroupRequest {
        name: "crowd".into(),
        member_ids: pairs
            .iter()
            .skip(1)
            .map(|p| p.0)
            .chain([listener_id])
            .collect(),
        ..Default::default()
    };
    let group = GroupServiceClient::new(imesh_kit::grpc::channel(&groups.join(",")).unwrap())
        .create_group(caller.request(Actor::User(owner), create))
        .await
        .expect("group created")
        .into_inner()
        .group
        .unwrap()
        .group_id;
    // The group's own events reach the listener first: from then on only the group's
    // messages are appended to its inbox, one relay batch after another.
    let created = format!("{group}");
    let deadline = tokio::time::Instant::now() + imesh_tests::PATIENCE;
    while !listener
        .pull(0)
        .await
        .entries
        .iter()
        .any(|e| format!("{:?}", e.event).contains(&created))
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the listener never heard of the group"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let senders = pairs.len();
    let sending = pairs.into_iter().map(|(_, _, mut from, _)| {
        tokio::spawn(async move { pipeline(&mut from, To::GroupId(group)).await })
    });
    for sent in futures::future::join_all(sending).await {
        sent.expect("every group send acked");
    }
    // The listener's inbox, in the order it was appended: the group's texts by seq.
    let conversation = format!("g:{group}");
    let deadline = tokio::time::Instant::now() + imesh_tests::PATIENCE;
    let mut seqs = Vec::new();
    let mut after = 0;
    while seqs.len() < senders * MESSAGES {
        let page = listener.pull(after).await;
        for entry in &page.entries {
            after = after.max(entry.sync_seq);
            if let Some(Kind::Message(m)) = entry.event.as_ref().and_then(|e| e.kind.as_ref())
                && m.conversation_id == conversation
                && m.content
                    .as_ref()
                    .and_then(|c| c.kind.as_ref())
                    .is_some_and(|k| matches!(k, content::Kind::Text(_)))
            {
                seqs.push(m.seq);
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {} group messages arrived",
            seqs.len(),
            senders * MESSAGES
        );
        if page.entries.is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
    assert_eq!(seqs.len(), senders * MESSAGES, "each message once");
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "the group's messages reach the member in seq order: {seqs:?}"
    );
}
