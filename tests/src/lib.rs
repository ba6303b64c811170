//! The end-to-end harness: a real [`Cluster`] on port 0 over real stores, and real clients
//! (WebSocket for devices, gRPC for services and tools).
//!
//! # Layout
//! - [`TestCluster`]: starts every service on the chosen [`Stores`]; registers users.
//! - [`Device`]: a WebSocket client speaking the protobuf client protocol.
//! - [`eventually`]: polls a condition until a deadline (never a fixed sleep).

#![forbid(unsafe_code)]

pub mod device;
pub mod processes;
pub mod up;

use std::time::Duration;

pub use device::Device;
use imesh::cluster::{Cluster, ClusterSpec, Ports};
use imesh_kit::grpc::Channel;
use imesh_kit::{
    config::{AuthConfig, RedisConfig, Secret},
    identity::{Actor, Caller},
    testing::{self, Backend},
};
use imesh_protos::{
    group::{CreateGroupRequest, group_service_client::GroupServiceClient},
    message::{
        Content, SendRequest, SendResponse, Text, content,
        message_service_client::MessageServiceClient, send_request,
    },
    relation::{
        CreateUserRequest, IssueTokenRequest, LoginRequest, RegisterRequest,
        relation_service_client::RelationServiceClient,
    },
};

/// Which real stores a cluster runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stores {
    /// SQLite files and in-process adapters: what `imesh up` runs.
    Embedded,
    PostgresRedis,
    MySqlRedis,
}

impl Stores {
    /// The embedded default always; the server-backed sets when their servers are configured.
    pub fn available() -> Vec<Stores> {
        let backends = testing::sql_backends();
        let redis = testing::redis().is_some();
        let mut out = vec![Stores::Embedded];
        if redis && backends.contains(&Backend::Postgres) {
            out.push(Stores::PostgresRedis);
        }
        if redis && backends.contains(&Backend::MySql) {
            out.push(Stores::MySqlRedis);
        }
        out
    }
}

pub struct TestCluster {
    pub cluster: Cluster,
    /// Where uploads go: a folder under the test's temporary directory on the embedded
    /// default, a fresh bucket of the test S3 server otherwise (when there is one).
    pub files: message_svc::FilesConfig,
    pub auth: AuthConfig,
    pub caller: Caller,
}

pub const PASSWORD: &str = "correct horse";

pub const INTERNAL_SECRET: &str = "test-internal-secret-0123456789";
pub const JWT_SECRET: &str = "test-jwt-secret-0123456789abcdef";

impl TestCluster {
    pub async fn start(stores: Stores) -> Self {
        Self::start_with(stores, |_| {}).await
    }

    /// Starts a cluster on `stores` with `adjust` applied to its spec first.
    pub async fn start_with(stores: Stores, adjust: impl FnOnce(&mut ClusterSpec)) -> Self {
        testing::log_to_test_output();
        let auth = AuthConfig {
            internal_secret: Secret::new(INTERNAL_SECRET),
            jwt_secret: Secret::new(JWT_SECRET),
            ..AuthConfig::default()
        };
        let backend = match stores {
            Stores::Embedded => Backend::Sqlite,
            Stores::PostgresRedis => Backend::Postgres,
            Stores::MySqlRedis => Backend::MySql,
        };
        let db = || async {
            testing::fresh_sql(backend)
                .await
                .expect("a fresh test database")
        };
        let mut spec = ClusterSpec::embedded(std::path::Path::new("unused"), auth.clone());
        spec.ports = Ports::ANY;
        spec.relation.database = db().await;
        spec.group.database = db().await;
        spec.message.database = db().await;
        spec.sync.database = db().await;
        spec.use_redis(&match stores {
            Stores::Embedded => RedisConfig::default(),
            _ => private_redis().expect("redis for this store set"),
        });
        spec.message.files = test_files(stores).await;
        // Test devices ack only in the tests about acks: give the others' pushes time.
        spec.gateway.ack_timeout_ms = 60_000;
        // Test devices name a platform of their own (`Device::auth`), so one user's devices
        // never replace each other; the known set is tested on its own.
        spec.gateway.admission.platforms = Vec::new();
        adjust(&mut spec);
        let files = spec.message.files.clone();
        let cluster = Cluster::start(spec).await.expect("cluster starts");
        let caller = Caller::new(&auth.internal_secret).unwrap();
        Self {
            cluster,
            files,
            auth,
            caller,
        }
    }

    pub fn channel(&self, addr: std::net::SocketAddr) -> Channel {
        imesh_kit::grpc::channel(&addr.to_string()).unwrap()
    }

    pub fn relation(&self) -> RelationServiceClient<Channel> {
        RelationServiceClient::new(self.channel(self.cluster.addrs.relation))
    }

    /// Registers `username` (password "correct horse") and logs in: `(user_id, token)`.
    pub async fn user(&self, username: &str) -> (i64, String) {
        let register = RegisterRequest {
            username: username.into(),
            password: PASSWORD.into(),
            nickname: String::new(),
        };
        self.relation()
            .register(self.caller.request(Actor::System, register))
            .await
            .expect("register");
        self.login(username).await
    }

    /// Creates `username` through the admin path (no password hashing: quick for many
    /// users) and mints a token: `(user_id, token)`.
    pub async fn admin_user(&self, username: &str) -> (i64, String) {
        let create = CreateUserRequest {
            username: username.into(),
            nickname: String::new(),
        };
        let mut relation = self.relation();
        let user = relation
            .create_user(self.caller.request(Actor::System, create))
            .await
            .expect("user created")
            .into_inner()
            .user
            .expect("the user")
            .user_id;
        let token = relation
            .issue_token(
                self.caller
                    .request(Actor::System, IssueTokenRequest { user_id: user }),
            )
            .await
            .expect("token issued")
            .into_inner()
            .token;
        (user, token)
    }

    /// Logs a registered user in again: `(user_id, token)`.
    pub async fn login(&self, username: &str) -> (i64, String) {
        let login = LoginRequest {
            username: username.into(),
            password: PASSWORD.into(),
        };
        let login = self
            .relation()
            .login(self.caller.request(Actor::System, login))
            .await
            .expect("login")
            .into_inner();
        (login.user.expect("user").user_id, login.token)
    }

    /// Creates the group `create` describes as `owner`; its id.
    pub async fn create_group(&self, owner: i64, create: CreateGroupRequest) -> i64 {
        GroupServiceClient::new(self.channel(self.cluster.addrs.group))
            .create_group(self.caller.request(Actor::User(owner), create))
            .await
            .expect("group created")
            .into_inner()
            .group
            .expect("the created group")
            .group_id
    }

    /// Sends a text from `from` to user `to` over gRPC, as a service would.
    pub async fn send_text(
        &self,
        from: i64,
        to: i64,
        client_msg_id: &str,
        text: &str,
    ) -> SendResponse {
        let send = SendRequest {
            client_msg_id: client_msg_id.into(),
            to: Some(send_request::To::UserId(to)),
            content: Some(Content {
                kind: Some(content::Kind::Text(Text { text: text.into() })),
            }),
            ..SendRequest::default()
        };
        MessageServiceClient::new(self.channel(self.cluster.addrs.message))
            .send(self.caller.request(Actor::User(from), send))
            .await
            .expect("sent")
            .into_inner()
    }

    /// A device connected to the gateway, not yet authenticated.
    pub async fn device(&self) -> Device {
        Device::connect(self.cluster.addrs.gateway).await
    }

    /// A device connected to the gateway's TCP port, not yet authenticated.
    pub async fn tcp_device(&self) -> Device {
        Device::connect_tcp(self.cluster.addrs.gateway_tcp).await
    }

    /// A device connected and authenticated as `token`.
    pub async fn signed_in(&self, token: &str, device_id: &str) -> Device {
        let mut device = self.device().await;
        device.auth(token, device_id).await.expect("auth accepted");
        device
    }
}

/// The file store of a test cluster on `stores` (see [`TestCluster::files`]).
async fn test_files(stores: Stores) -> message_svc::FilesConfig {
    use message_svc::store::blobs::{Backend, S3Blobs, S3Config};
    let mut files = message_svc::FilesConfig::default();
    files.local.dir = testing::scratch_dir("files").display().to_string();
    let server = match stores {
        Stores::Embedded => None,
        Stores::PostgresRedis | Stores::MySqlRedis => testing::s3(),
    };
    if let Some(server) = server {
        files.store = Backend::S3;
        files.s3 = S3Config {
            endpoint: server.endpoint,
            bucket: format!("imesh-{}", testing::random_id()),
            access_key: Secret::new(server.access_key),
            secret_key: Secret::new(server.secret_key),
            ..S3Config::default()
        };
        let blobs = S3Blobs::new(&files.s3).expect("the test S3 settings");
        blobs.create_bucket().await.expect("a fresh test bucket");
    }
    files
}

/// Polls `check` until it returns `Some`, failing the test after `timeout`. `check` may
/// borrow mutably what it polls through (`async || { device.pull(…).await … }`).
pub async fn eventually<T>(
    what: &str,
    timeout: Duration,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The test Redis on a database (1–15) of the caller's own, taken in turn: clusters and
/// deployments side by side lease the same nodes from their own fresh SQL databases, so
/// their ids (users, groups, conversations) may coincide, and must not meet in Redis.
pub fn private_redis() -> Option<RedisConfig> {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let mut config = testing::redis()?;
    let url = config.url()?.to_owned();
    let base = url.rsplit_once('/').map_or(url.as_str(), |(base, _)| base);
    let db = 1 + NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 15;
    config.url = Secret::new(format!("{base}/{db}"));
    Some(config)
}

/// What Prometheus scrapes: `/metrics` over HTTP/1.1 on a service's gRPC port.
pub async fn scrape(addr: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: imesh\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    response
}

/// How long a test waits for something that should take milliseconds.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// The Chromium the browser tests drive (`IMESH_TEST_CHROMIUM`, set by `scripts/test`),
/// when there is one; under `IMESH_TEST_ALL_BACKENDS=1` there must be.
pub fn chromium() -> Option<String> {
    testing::configured("IMESH_TEST_CHROMIUM")
}
