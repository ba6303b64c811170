//! Several processes of one service, as the real programs: each leases its own snowflake
//! node from the shared database with nothing configured, a stopped one hands its node to
//! the next, and a service told it runs as several replicas refuses to start without Redis.

use std::{net::SocketAddr, path::Path, process::Stdio, time::Duration};

use imesh_kit::{
    config::Secret,
    identity::{Actor, Caller},
};
use imesh_protos::relation::{CreateUserRequest, relation_service_client::RelationServiceClient};
use imesh_tests::{INTERNAL_SECRET, JWT_SECRET, PATIENCE, eventually, up::free_port};
use tokio::process::{Child, Command};

const SERVICE: &str = env!("CARGO_BIN_EXE_test-service");

fn service(name: &str) -> Command {
    let mut command = Command::new(SERVICE);
    command
        .env("IMESH_TEST_SERVICE", name)
        .env("IMESH__AUTH__INTERNAL_SECRET", INTERNAL_SECRET)
        .env("IMESH__AUTH__JWT_SECRET", JWT_SECRET)
        .env("IMESH__TELEMETRY__LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true);
    command
}

/// relation-svc on the SQLite file `db`, listening once this returns.
async fn relation(db: &Path) -> (Child, SocketAddr) {
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let child = service("relation")
        .env("IMESH__GRPC__LISTEN", addr.to_string())
        .env(
            "IMESH__DATABASE__URL",
            format!("sqlite://{}?mode=rwc", db.display()),
        )
        .spawn()
        .expect("relation-svc starts");
    eventually("relation-svc listening", PATIENCE, || async {
        tokio::net::TcpStream::connect(addr).await.ok().map(drop)
    })
    .await;
    (child, addr)
}

/// The snowflake node of the id of a user created through `addr`.
async fn node_minting_at(addr: SocketAddr, username: &str) -> i64 {
    let caller = Caller::new(&Secret::new(INTERNAL_SECRET)).unwrap();
    let channel = imesh_kit::grpc::channel(&addr.to_string()).unwrap();
    let create = CreateUserRequest {
        username: username.into(),
        nickname: String::new(),
    };
    let user = RelationServiceClient::new(channel)
        .create_user(caller.request(Actor::System, create))
        .await
        .expect("user created")
        .into_inner()
        .user
        .unwrap();
    (user.user_id >> 12) & 1023
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_lease_distinct_nodes_and_a_stopped_one_hands_its_node_on() {
    let dir = std::env::temp_dir().join(format!("imesh-replicas-{}", free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("relation.db");
    let (mut first, first_addr) = relation(&db).await;
    let (_second, second_addr) = relation(&db).await;
    let first_node = node_minting_at(first_addr, "ann").await;
    let second_node = node_minting_at(second_addr, "bob").await;
    let mut nodes = [first_node, second_node];
    nodes.sort_unstable();
    assert_eq!(
        nodes,
        [0, 1],
        "each process leases the lowest free node of relation-svc's block"
    );

    // SIGTERM: the process releases its node as it stops; the next process takes it.
    let pid = first.id().expect("running").to_string();
    let sent = Command::new("kill").args(["-TERM", &pid]).status().await;
    assert!(sent.unwrap().success(), "SIGTERM sent");
    let status = tokio::time::timeout(PATIENCE, first.wait())
        .await
        .expect("relation-svc stops on SIGTERM")
        .unwrap();
    assert!(status.success(), "{status}");
    let (_third, third_addr) = relation(&db).await;
    assert_eq!(node_minting_at(third_addr, "cid").await, first_node);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_service_told_it_has_replicas_refuses_to_start_without_redis() {
    for name in ["relation", "group", "message", "sync", "notify"] {
        let dir = std::env::temp_dir().join(format!("imesh-replicas-{}", free_port()));
        std::fs::create_dir_all(&dir).unwrap();
        let output = service(name)
            .env("IMESH__REPLICAS", "2")
            .env("IMESH__GRPC__LISTEN", format!("127.0.0.1:{}", free_port()))
            .env(
                "IMESH__DATABASE__URL",
                format!("sqlite://{}/db?mode=rwc", dir.display()),
            )
            .stderr(Stdio::piped())
            .output();
        let output = tokio::time::timeout(Duration::from_secs(30), output)
            .await
            .unwrap_or_else(|_| panic!("{name}-svc kept running"))
            .unwrap();
        let said = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{name}: {said}");
        assert!(
            said.contains("redis.url") && said.contains("replicas is 2"),
            "{name}: {said}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
