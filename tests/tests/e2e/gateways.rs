//! Delivery across gateways and under faults: 200 devices on two gateways — the cluster's
//! own and a second gateway process — with presence in Redis get their messages through
//! the right gateway; when the second process is killed its devices reconnect to the first
//! and catch up from their cursors with nothing lost and nothing twice. A device that stops
//! reading is disconnected while a neighbour on the same gateway keeps being served, and
//! finds every message in its inbox when it comes back.

use std::{collections::HashMap, net::SocketAddr, process::Stdio};

use imesh_protos::{
    gateway::server_frame::Body,
    message::content,
    sync::{InboxEntry, sync_event::Kind},
};
use imesh_tests::up::free_port;
use imesh_tests::{
    Device, INTERNAL_SECRET, JWT_SECRET, PATIENCE, Stores, TestCluster, eventually, scrape,
};
use tokio::process::{Child, Command};

const PAIRS: usize = 100;

/// A gateway running as a process of its own, killed when dropped.
struct GatewayProcess {
    child: Child,
    ws: SocketAddr,
}

async fn spawn_gateway(env: &TestCluster) -> GatewayProcess {
    let a = env.cluster.addrs;
    let ws = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let local = |port: u16| format!("127.0.0.1:{port}");
    // Test devices name platforms of their own; a list is set in a file, not a variable.
    let config = std::env::temp_dir().join(format!("imesh-gateway-{}.toml", ws.port()));
    std::fs::write(&config, "[admission]\nplatforms = []\n").expect("config written");
    let child = Command::new(env!("CARGO_BIN_EXE_test-gateway"))
        .env("IMESH_CONFIG", &config)
        .env("IMESH__LISTEN", ws.to_string())
        .env("IMESH__TCP_LISTEN", local(free_port()))
        .env("IMESH__GRPC__LISTEN", local(free_port()))
        .env("IMESH__RELATION_ADDR", a.relation.to_string())
        .env("IMESH__GROUP_ADDR", a.group.to_string())
        .env("IMESH__MESSAGE_ADDR", a.message.to_string())
        .env("IMESH__SYNC_ADDR", a.sync.to_string())
        .env("IMESH__NOTIFY_ADDR", a.notify.to_string())
        .env("IMESH__AUTH__INTERNAL_SECRET", INTERNAL_SECRET)
        .env("IMESH__AUTH__JWT_SECRET", JWT_SECRET)
        .env("IMESH__ACK_TIMEOUT_MS", "60000")
        .env("IMESH__TELEMETRY__LOG", "warn")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the test gateway starts");
    eventually("the gateway process listening", PATIENCE, || async {
        tokio::net::TcpStream::connect(ws).await.ok().map(drop)
    })
    .await;
    GatewayProcess { child, ws }
}

/// One user's device and every inbox entry it has seen, by sync_seq.
struct Seen {
    device: Device,
    device_id: String,
    token: String,
    entries: HashMap<i64, InboxEntry>,
}

impl Seen {
    async fn on(gateway: SocketAddr, token: String, device_id: String) -> Self {
        let mut device = Device::connect(gateway).await;
        device
            .auth(&token, &device_id)
            .await
            .expect("auth accepted");
        Self {
            device,
            device_id,
            token,
            entries: HashMap::new(),
        }
    }

    fn cursor(&self) -> i64 {
        self.entries.keys().copied().max().unwrap_or(0)
    }

    /// Client message ids of the messages from `sender` seen, once per inbox entry.
    fn from(&self, sender: i64) -> Vec<String> {
        let mut ids: Vec<String> = self
            .entries
            .values()
            .filter_map(|e| match e.event.as_ref()?.kind.as_ref()? {
                Kind::Message(m) if m.sender_id == sender => Some(m.client_msg_id.clone()),
                _ => None,
            })
            .collect();
        ids.sort();
        ids
    }

    /// Reads pushes until the message `client_msg_id` from `sender` came.
    async fn pushed(&mut self, sender: i64, client_msg_id: &str) {
        while !self.from(sender).iter().any(|id| id == client_msg_id) {
            let entry = self.device.next_push().await;
            self.entries.insert(entry.sync_seq, entry);
        }
    }

    /// Pulls after the cursor until the message `client_msg_id` from `sender` is there.
    async fn caught_up(&mut self, sender: i64, client_msg_id: &str) {
        eventually(client_msg_id, PATIENCE, async || {
            let page = self.device.pull(self.cursor()).await;
            for entry in page.entries {
                self.entries.insert(entry.sync_seq, entry);
            }
            self.from(sender)
                .iter()
                .any(|id| id == client_msg_id)
                .then_some(())
        })
        .await;
    }
}

async fn send(device: &mut Device, to: i64, client_msg_id: &str) {
    let reply = device.send_text(to, client_msg_id, client_msg_id).await;
    assert!(matches!(reply, Body::SendAck(_)), "{reply:?}");
}

#[tokio::test]
async fn two_hundred_devices_on_two_gateways_keep_every_message_when_one_gateway_dies() {
    // The richest store set: presence in Redis when the test servers are there.
    let stores = *Stores::available().last().expect("a store set");
    let env = TestCluster::start_with(stores, |spec| {
        spec.message.rate_limits = message_svc::RateLimitConfig {
            user_per_sec: 0,
            group_per_sec: 0,
            ..Default::default()
        };
    })
    .await;
    let mut other = spawn_gateway(&env).await;
    let home = env.cluster.addrs.gateway;

    let mut left = Vec::new();
    let mut right = Vec::new();
    for i in 0..PAIRS {
        let (l, l_token) = env.admin_user(&format!("left{i}")).await;
        let (r, r_token) = env.admin_user(&format!("right{i}")).await;
        left.push((l, Seen::on(home, l_token, format!("left{i}")).await));
        right.push((r, Seen::on(other.ws, r_token, format!("right{i}")).await));
    }

    // Every pair talks across the two gateways.
    for i in 0..PAIRS {
        let (l, r) = (left[i].0, right[i].0);
        send(&mut left[i].1.device, r, &format!("l{i}-1")).await;
        send(&mut right[i].1.device, l, &format!("r{i}-1")).await;
    }
    for i in 0..PAIRS {
        let (l, r) = (left[i].0, right[i].0);
        left[i].1.pushed(r, &format!("r{i}-1")).await;
        right[i].1.pushed(l, &format!("l{i}-1")).await;
    }

    // The second gateway dies; its devices lose their connections.
    other.child.kill().await.expect("killed");
    for (_, seen) in &mut right {
        while let Some(frame) = seen.device.read().await {
            if let Some(Body::Push(push)) = frame.body {
                for entry in push.entries {
                    seen.entries.insert(entry.sync_seq, entry);
                }
            }
        }
    }
    // Meanwhile their partners write again.
    for i in 0..PAIRS {
        send(&mut left[i].1.device, right[i].0, &format!("l{i}-2")).await;
    }
    // They come back on the surviving gateway, catch up from their cursors and answer.
    for i in 0..PAIRS {
        let l = left[i].0;
        let seen = &mut right[i].1;
        let mut back = Seen::on(home, seen.token.clone(), seen.device_id.clone()).await;
        back.entries = std::mem::take(&mut seen.entries);
        back.caught_up(l, &format!("l{i}-2")).await;
        assert_eq!(
            back.from(l),
            vec![format!("l{i}-1"), format!("l{i}-2")],
            "each message once"
        );
        send(&mut back.device, l, &format!("r{i}-2")).await;
        *seen = back;
    }
    for i in 0..PAIRS {
        let r = right[i].0;
        left[i].1.pushed(r, &format!("r{i}-2")).await;
        assert_eq!(
            left[i].1.from(r),
            vec![format!("r{i}-1"), format!("r{i}-2")]
        );
    }
}

#[tokio::test]
async fn a_slow_reader_is_disconnected_while_its_neighbour_keeps_being_served() {
    let env = TestCluster::start_with(Stores::Embedded, |spec| {
        spec.gateway.send_queue = 16;
        spec.gateway.unacked_window = 1_000_000;
        spec.message.rate_limits = message_svc::RateLimitConfig {
            user_per_sec: 0,
            group_per_sec: 0,
            ..Default::default()
        };
    })
    .await;
    let gateway = env.cluster.addrs.gateway;
    let (sender, _) = env.admin_user("sender").await;
    let (slow_id, slow_token) = env.admin_user("slow").await;
    let (fast_id, fast_token) = env.admin_user("fast").await;
    let mut slow = Device::connect_with_receive_buffer(gateway, 4096).await;
    slow.auth(&slow_token, "slow-1").await.unwrap();
    let mut fast = env.signed_in(&fast_token, "fast-1").await;

    let slow_closed = || async {
        let text = scrape(env.cluster.addrs.gateway_grpc).await;
        text.lines()
            .find(|l| l.starts_with("imesh_slow_connections_closed_total"))
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .is_some_and(|n| n >= 1)
    };
    let bulky = "x".repeat(8_000);
    let mut flooded = 0;
    while !slow_closed().await {
        assert!(flooded < 2_000, "the slow reader was never disconnected");
        for _ in 0..10 {
            env.send_text(sender, slow_id, &format!("flood{flooded}"), &bulky)
                .await;
            flooded += 1;
        }
        // The neighbour is served all along.
        let id = format!("fast{flooded}");
        env.send_text(sender, fast_id, &id, "hi").await;
        let entry = fast.next_push().await;
        match entry.event.and_then(|e| e.kind) {
            Some(Kind::Message(m)) => assert_eq!(m.client_msg_id, id),
            other => panic!("unexpected push: {other:?}"),
        }
    }
    assert!(matches!(fast.ping().await, Body::Pong(_)));

    // The slow reader finds its connection closed after what was written...
    while slow.read().await.is_some() {}
    // ...and every message in its inbox when it comes back (the last ones may still be on
    // their way through the outbox relay).
    let mut back = env.signed_in(&slow_token, "slow-1").await;
    let mut texts = 0;
    let mut cursor = 0;
    eventually("every flooded text in the inbox", PATIENCE, async || {
        let page = back.pull(cursor).await;
        cursor = page.entries.last().map_or(cursor, |e| e.sync_seq);
        texts += page.entries.iter().filter(|e| is_text(e)).count();
        (texts >= flooded).then_some(())
    })
    .await;
    assert_eq!(texts, flooded, "nothing more, nothing twice");
}

fn is_text(entry: &InboxEntry) -> bool {
    let Some(Kind::Message(m)) = entry.event.as_ref().and_then(|e| e.kind.as_ref()) else {
        return false;
    };
    matches!(
        m.content.as_ref().and_then(|c| c.kind.as_ref()),
        Some(content::Kind::Text(_))
    )
}
