//! `imesh bench` at tiny sizes against a real cluster: every scenario over WebSocket (and
//! `direct` over TCP) delivers every message exactly once (a super group's as live hints),
//! reports what it measured, and rides through rate limits and reconnects.

use imesh::{
    bench::{Report, Scenario, Spec},
    cluster::ClusterSpec,
};
use imesh_tests::{INTERNAL_SECRET, Stores, TestCluster};

fn spec(env: &TestCluster, gateway: String, scenario: Scenario) -> Spec {
    Spec {
        gateway,
        ca: None,
        relation: env.cluster.addrs.relation.to_string(),
        group: env.cluster.addrs.group.to_string(),
        secret: INTERNAL_SECRET.into(),
        pids: vec![std::process::id()],
        store_pids: Vec::new(),
        metrics: Vec::new(),
        max_secs: 60,
        json: None,
        latencies: None,
        connect_concurrency: 8,
        scenario,
    }
}

fn ws(env: &TestCluster) -> String {
    format!("ws://{}/ws", env.cluster.addrs.gateway)
}

/// Runs `scenario` against `env`'s gateway over WebSocket; the run must succeed.
async fn over_ws(env: &TestCluster, scenario: Scenario) -> Report {
    imesh::bench::run(spec(env, ws(env), scenario), false)
        .await
        .unwrap()
}

/// `direct` as fast as replies come, `window` sends in flight per sender.
fn direct(pairs: usize, messages: usize, window: usize, warmup: bool) -> Scenario {
    Scenario::Direct {
        pairs,
        messages,
        rate: 0,
        window,
        warmup,
    }
}

/// `group` as fast as replies come: `groups` groups of `size`, `senders` each sending
/// `messages` with `window` in flight.
fn group(size: usize, groups: usize, senders: usize, messages: usize, window: usize) -> Scenario {
    Scenario::Group {
        size,
        groups,
        senders,
        messages,
        rate: 0,
        window,
    }
}

/// Every expected delivery came once and in order, and no connection was closed.
fn assert_exact(report: &Report) {
    assert_delivered(report);
    assert_eq!(report.closed_by_server, 0, "{}", report.table());
}

/// Every expected delivery came once and in order, and the test process was measured.
fn assert_delivered(report: &Report) {
    assert!(report.expected > 0, "{}", report.table());
    assert_eq!(
        report.pushed + report.pulled,
        report.expected,
        "{}",
        report.table()
    );
    assert_eq!(
        (report.lost, report.duplicated, report.reordered),
        (0, 0, 0),
        "{}",
        report.table()
    );
    let server = report
        .server
        .as_ref()
        .expect("the test process was measured");
    assert!(
        server.cpu_secs > 0.0 && server.rss_bytes > 0,
        "{}",
        report.table()
    );
}

async fn unlimited() -> TestCluster {
    limited(0, |_| {}).await
}

/// A cluster whose users may send `user_per_sec` messages a second (0: any number), and
/// groups any number, set up further by `adjust`.
async fn limited(user_per_sec: u32, adjust: impl FnOnce(&mut ClusterSpec)) -> TestCluster {
    TestCluster::start_with(Stores::Embedded, |spec| {
        spec.message.rate_limits = message_svc::RateLimitConfig {
            user_per_sec,
            group_per_sec: 0,
            ..Default::default()
        };
        adjust(spec);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_over_websocket_and_tcp_delivers_each_message_once() {
    let env = unlimited().await;
    let report = over_ws(&env, direct(3, 5, 1, true)).await;
    assert_exact(&report);
    // Each device's first message goes before the run and is not counted in it.
    assert_eq!((report.sends, report.expected), (30, 30));
    assert_eq!(report.warmup.as_ref().map(|w| w.count), Some(6));
    assert!(report.latency.count > 0 && report.latency.p99_us >= report.latency.p50_us);
    assert_eq!(report.transport, "WebSocket");
    let tcp = format!("tcp://{}", env.cluster.addrs.gateway_tcp);
    // This process as a store too: its CPU is counted again, "with the stores".
    let mut with_store = spec(&env, tcp.clone(), direct(3, 5, 1, false));
    with_store.store_pids = vec![std::process::id()];
    // And each delivery's latency written out, in the order sent.
    let samples = std::env::temp_dir().join(format!("imesh-latencies-{}", std::process::id()));
    with_store.latencies = Some(samples.clone());
    // And the calls each method served a delivery, from the servers' metrics.
    let a = env.cluster.addrs;
    let services = [
        a.relation,
        a.group,
        a.message,
        a.sync,
        a.notify,
        a.gateway_grpc,
    ];
    with_store.metrics = services.map(|s| format!("http://{s}/metrics")).to_vec();
    let report = imesh::bench::run(with_store, false).await.unwrap();
    assert_exact(&report);
    assert!(report.warmup.is_none());
    let calls = |method: &str| {
        let call = report.calls.iter().find(|c| c.method == method);
        call.map_or(0.0, |c| c.per_delivery)
    };
    // A call carries one delivery or more: at most one call a delivery on each hop.
    for method in ["SendBatch", "Append", "Push"] {
        assert!(
            calls(method) > 0.0 && calls(method) <= 1.0,
            "{method}: {}",
            report.table()
        );
    }
    assert!(
        report.table().contains("calls a delivery  "),
        "{}",
        report.table()
    );
    let written = std::fs::read_to_string(&samples).unwrap();
    std::fs::remove_file(&samples).unwrap();
    let mut lines = written.lines();
    assert!(lines.next().unwrap().starts_with("# run started at "));
    let rows: Vec<(u64, u64, i64)> = lines
        .map(|l| {
            let mut fields = l.split(' ').map(|f| f.parse::<i64>().unwrap());
            let mut next = || fields.next().unwrap();
            (next() as u64, next() as u64, next())
        })
        .collect();
    assert_eq!(rows.len() as u64, report.latency.count, "{written}");
    assert!(
        rows.is_sorted() && rows.iter().all(|(_, took, _)| *took >= 1),
        "{written}"
    );
    // Numbered after the send and before the push, give or take a ms (the stamp is in
    // whole ms, and the system clock may be slewed against the monotonic one).
    let between =
        |(_, took, numbered): &(u64, u64, i64)| (-1_000..=*took as i64 + 1_000).contains(numbered);
    assert!(rows.iter().all(between), "{written}");
    let server = report.server.as_ref().unwrap();
    assert!(
        server.with_stores_cpu_us_per_delivery >= Some(server.cpu_us_per_delivery),
        "{}",
        report.table()
    );
    assert_eq!(report.transport, "TCP");
    // Pipelined: 4 sends in flight per sender, still each once and in order.
    let pipelined = direct(3, 12, 4, false);
    let report = imesh::bench::run(spec(&env, tcp, pipelined), false)
        .await
        .unwrap();
    assert_exact(&report);
    assert_eq!(report.sends, 72);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_receipts_and_reconnect_deliver_each_message_once() {
    let env = unlimited().await;
    let group = group(12, 2, 2, 3, 1);
    let report = over_ws(&env, group).await;
    assert_exact(&report);
    // Two senders per group, each heard by the 11 others: 2 × 3 × 11 per group.
    assert_eq!(report.expected, 2 * 2 * 3 * 11);

    let receipts = Scenario::Receipts {
        size: 6,
        messages: 3,
    };
    let report = over_ws(&env, receipts).await;
    assert_exact(&report);
    let counted = report.receipts.as_ref().unwrap();
    assert_eq!(
        (counted.reads, counted.fully_read),
        (15, 3),
        "{}",
        report.table()
    );
    assert!(counted.count_events >= 3);

    let reconnect = Scenario::Reconnect {
        pairs: 3,
        messages: 8,
    };
    let report = over_ws(&env, reconnect).await;
    assert_exact(&report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_super_group_hints_every_online_member_and_times_its_queries() {
    let env = unlimited().await;
    let super_group = Scenario::Super {
        members: 3_000,
        online: 12,
        messages: 5,
        rate: 0,
    };
    let report = over_ws(&env, super_group).await;
    assert_exact(&report);
    assert_eq!(
        (report.sends, report.expected),
        (5, 11 * 5),
        "{}",
        report.table()
    );
    let figures = report
        .super_group
        .as_ref()
        .expect("the super group's figures");
    assert_eq!((figures.members, figures.online), (3_000, 12));
    assert_eq!(figures.pages.count, 6, "3,000 members, 500 a page");
    assert_eq!((figures.search.count, figures.active.count), (50, 50));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_held_and_measured() {
    let env = unlimited().await;
    let path = std::env::temp_dir().join(format!("imesh-bench-idle-{}.json", std::process::id()));
    let mut idle = spec(
        &env,
        ws(&env),
        Scenario::Idle {
            connections: 20,
            hold_secs: 1,
        },
    );
    idle.json = Some(path.clone());
    let report = imesh::bench::run(idle, false).await.unwrap();
    assert_eq!((report.connections, report.closed_by_server), (20, 0));
    assert!(report.elapsed_secs >= 1.0, "{}", report.table());
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(json["scenario"], "idle");
    assert_eq!(json["connections"], 20);
    assert!(json["server"]["rss_bytes"].as_u64().unwrap() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn senders_wait_out_rate_limits_and_lose_nothing() {
    let env = limited(10, |_| {}).await;
    let direct = direct(1, 25, 1, false);
    let report = over_ws(&env, direct).await;
    assert_exact(&report);
    assert!(report.throttled > 0, "{}", report.table());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devices_the_server_closes_connect_again_and_lose_nothing() {
    // Past 4 unacked pushes the gateway closes a connection; the bench's devices ack once a
    // second or when 64 entries wait, so their peers' sends get them closed again and again.
    // Each connects again at once, as a client does: a sender sends on, and a member who
    // only hears goes on hearing by push.
    let env = limited(0, |spec| spec.gateway.unacked_window = 4).await;
    let direct = direct(2, 30, 1, false);
    let report = over_ws(&env, direct).await;
    assert_delivered(&report);
    assert!(report.closed_by_server > 0, "{}", report.table());
    let group = group(3, 1, 1, 30, 1);
    let report = over_ws(&env, group).await;
    assert_delivered(&report);
    assert!(report.closed_by_server > 0, "{}", report.table());
    // Past the first window each of the two hearers was closed; only connecting again
    // brings it more pushes.
    assert!(report.pushed > 2 * 4, "{}", report.table());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_ack_as_pushes_pile_up_and_keep_their_connections() {
    let env = limited(0, |spec| spec.gateway.unacked_window = 100).await;
    // Each member hears 2 × 150 messages, far more than the window, well within the
    // periodic ack's second; senders keep 4 sends in flight.
    let group = group(3, 1, 3, 150, 4);
    let report = over_ws(&env, group).await;
    assert_exact(&report);
    assert_eq!(report.expected, 3 * 150 * 2);
}

#[tokio::test]
async fn direct_over_tcp_with_tls_delivers_each_message_once() {
    let dir = std::env::temp_dir().join(format!("imesh-bench-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
    let env = TestCluster::start_with(Stores::Embedded, |spec| {
        spec.gateway.tls.cert_file = cert.display().to_string();
        spec.gateway.tls.key_file = key.display().to_string();
    })
    .await;
    let port = env.cluster.addrs.gateway_tcp.port();
    let direct = direct(2, 5, 2, true);
    let mut tls = spec(&env, format!("tls://localhost:{port}"), direct);
    tls.ca = Some(cert);
    let report = imesh::bench::run(tls, false).await.unwrap();
    assert_exact(&report);
    assert_eq!(report.transport, "TCP over TLS");
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn bad_options_are_refused_by_name_before_the_run() {
    let env = unlimited().await;
    let bad_gateway = spec(
        &env,
        format!("http://{}", env.cluster.addrs.gateway),
        Scenario::Idle {
            connections: 1,
            hold_secs: 0,
        },
    );
    let e = imesh::bench::run(bad_gateway, false)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("--gateway") && e.contains("ws://"), "{e}");
    // Past Linux's largest pid: no such process.
    let mut no_store = spec(&env, ws(&env), direct(1, 1, 1, false));
    no_store.store_pids = vec![4_194_305];
    let e = imesh::bench::run(no_store, false)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("--store-pid 4194305"), "{e}");
    // A metrics page nothing serves: refused before the run.
    let mut unscraped = spec(&env, ws(&env), direct(1, 1, 1, false));
    unscraped.metrics = vec!["http://127.0.0.1:9/metrics".into()];
    let e = imesh::bench::run(unscraped, false)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("--metrics http://127.0.0.1:9/metrics"), "{e}");
    // Files in a folder that is not there: refused before the run, not after it.
    let nowhere = std::env::temp_dir()
        .join("imesh-no-such-folder")
        .join("out");
    for flag in ["--json", "--latencies"] {
        let mut unwritable = spec(&env, ws(&env), direct(1, 1, 1, false));
        match flag {
            "--json" => unwritable.json = Some(nowhere.clone()),
            _ => unwritable.latencies = Some(nowhere.clone()),
        }
        let e = imesh::bench::run(unwritable, false)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("{flag} {}", nowhere.display())), "{e}");
    }
    let one_member = group(1, 1, 1, 1, 1);
    let e = imesh::bench::run(spec(&env, ws(&env), one_member), false)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("--size 1") && e.contains("2–2,000"), "{e}");
}
