//! Every imesh service in one process: the same libraries the per-service binaries mount,
//! wired by address. Their calls to each other stay in the process (`imesh_kit::grpc`
//! finds a server of this process by its listen address); the listeners still serve
//! outside callers.

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::Path,
};

use imesh_kit::config::{AuthConfig, RedisConfig, Secret, SqlConfig};
use tokio::{net::TcpListener, task::JoinHandle};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// Ports to listen on; 0 picks a free one.
#[derive(Debug, Clone, Copy, serde::Deserialize, serde::Serialize)]
#[serde(default)]
pub struct Ports {
    pub gateway: u16,
    pub gateway_tcp: u16,
    pub gateway_grpc: u16,
    pub relation: u16,
    pub group: u16,
    pub message: u16,
    pub sync: u16,
    pub notify: u16,
}

impl Ports {
    /// Free ports chosen by the kernel (tests).
    pub const ANY: Ports = Ports {
        gateway: 0,
        gateway_tcp: 0,
        gateway_grpc: 0,
        relation: 0,
        group: 0,
        message: 0,
        sync: 0,
        notify: 0,
    };

    /// The documented defaults.
    pub const STANDARD: Ports = Ports {
        gateway: 8080,
        gateway_tcp: 8081,
        gateway_grpc: 50056,
        relation: 50051,
        group: 50052,
        message: 50053,
        sync: 50054,
        notify: 50055,
    };
}

impl Default for Ports {
    fn default() -> Self {
        Self::STANDARD
    }
}

/// What to start: where to listen, the credentials, and each service's whole `Config`,
/// the one its own program reads ([`Cluster::start`] fills in only the listen and peer
/// addresses: every peer is in this process). As `imesh up`'s settings each service is a
/// section: `[message.rate_limits]`, `IMESH__GATEWAY__FRAMES_PER_SEC`.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(default)]
pub struct ClusterSpec {
    /// Shared by every service (`imesh up` keeps it in the data folder).
    #[serde(skip)]
    pub auth: AuthConfig,
    pub host: IpAddr,
    pub ports: Ports,
    pub relation: relation_svc::Config,
    pub group: group_svc::Config,
    pub message: message_svc::Config,
    pub sync: sync_svc::Config,
    pub notify: notify_svc::Config,
    pub gateway: gateway::Config,
}

impl Default for ClusterSpec {
    /// Loopback on the standard ports, every service's defaults, and 2 s for a service
    /// to finish its calls when it stops.
    fn default() -> Self {
        let mut spec = Self {
            auth: AuthConfig::default(),
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            ports: Ports::STANDARD,
            relation: Default::default(),
            group: Default::default(),
            message: Default::default(),
            sync: Default::default(),
            notify: Default::default(),
            gateway: Default::default(),
        };
        for grpc in [
            &mut spec.relation.grpc,
            &mut spec.group.grpc,
            &mut spec.message.grpc,
            &mut spec.sync.grpc,
            &mut spec.notify.grpc,
            &mut spec.gateway.grpc,
        ] {
            grpc.grace_ms = 2_000;
        }
        spec
    }
}

impl ClusterSpec {
    /// The embedded default: one SQLite file per service under `data_dir`, no Redis.
    pub fn embedded(data_dir: &Path, auth: AuthConfig) -> Self {
        let mut spec = Self {
            auth,
            ..Self::default()
        };
        spec.store_under(data_dir);
        spec
    }

    /// Gives each service whose database is still the default one a SQLite file of its own
    /// under `data_dir`.
    pub fn store_under(&mut self, data_dir: &Path) {
        let default = SqlConfig::default().url;
        for (name, database) in [
            ("relation", &mut self.relation.database),
            ("group", &mut self.group.database),
            ("message", &mut self.message.database),
            ("sync", &mut self.sync.database),
        ] {
            if database.url.expose() == default.expose() {
                database.url = Secret::new(format!(
                    "sqlite://{}/{name}.db?mode=rwc",
                    data_dir.display()
                ));
                database.max_connections = 1;
            }
        }
        let files = &mut self.message.files.local;
        if files.dir == message_svc::store::blobs::LocalConfig::default().dir {
            files.dir = data_dir.join("files").display().to_string();
        }
    }

    /// Points every service that has one at `redis` (empty: in-process adapters).
    pub fn use_redis(&mut self, redis: &RedisConfig) {
        for config in [
            &mut self.relation.redis,
            &mut self.group.redis,
            &mut self.message.redis,
            &mut self.sync.redis,
            &mut self.notify.redis,
        ] {
            *config = redis.clone();
        }
    }
}

/// message-svc's file settings, with the embedded store's links pointing at this
/// process's gateway unless they were set.
fn local_files(spec: &ClusterSpec, gateway: SocketAddr) -> message_svc::FilesConfig {
    let mut files = spec.message.files.clone();
    let default = message_svc::store::blobs::LocalConfig::default().public_url;
    if files.local.public_url == default {
        let host = match gateway.ip().is_unspecified() {
            true => IpAddr::V4(Ipv4Addr::LOCALHOST),
            false => gateway.ip(),
        };
        let scheme = match spec.gateway.tls.enabled() {
            true => "https",
            false => "http",
        };
        let origin = SocketAddr::new(host, gateway.port());
        files.local.public_url = format!("{scheme}://{origin}/files");
    }
    files
}

/// The addresses a started cluster listens on.
#[derive(Debug, Clone, Copy)]
pub struct Addrs {
    pub gateway: SocketAddr,
    pub gateway_tcp: SocketAddr,
    pub gateway_grpc: SocketAddr,
    pub relation: SocketAddr,
    pub group: SocketAddr,
    pub message: SocketAddr,
    pub sync: SocketAddr,
    pub notify: SocketAddr,
}

/// A running cluster; [`Cluster::stop`] shuts every service down in order.
pub struct Cluster {
    pub addrs: Addrs,
    /// Every service's task and its stop, in the order they stop.
    services: Vec<Running>,
}

struct Running {
    name: &'static str,
    stop: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Running {
    /// Spawns `serve`, which runs until the future it is given completes.
    fn spawn<F>(name: &'static str, serve: impl FnOnce(WaitForCancellationFutureOwned) -> F) -> Self
    where
        F: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let stop = CancellationToken::new();
        let task = tokio::spawn(serve(stop.clone().cancelled_owned()));
        Self { name, stop, task }
    }

    /// Stops the service and waits until it has.
    async fn stop(self) -> anyhow::Result<()> {
        self.stop.cancel();
        match self.task.await {
            Ok(result) => result.map_err(|e| e.context(format!("{} failed", self.name))),
            Err(e) => Err(anyhow::Error::new(e).context(format!("{} panicked", self.name))),
        }
    }
}

impl Cluster {
    pub async fn start(spec: ClusterSpec) -> anyhow::Result<Self> {
        let bind = |port: u16| TcpListener::bind(SocketAddr::new(spec.host, port));
        let p = spec.ports;
        let (relation_l, group_l, message_l, sync_l, notify_l, gateway_l, gateway_grpc_l) = (
            bind(p.relation).await?,
            bind(p.group).await?,
            bind(p.message).await?,
            bind(p.sync).await?,
            bind(p.notify).await?,
            bind(p.gateway).await?,
            bind(p.gateway_grpc).await?,
        );
        let gateway_tcp_l = bind(p.gateway_tcp).await?;
        let addrs = Addrs {
            gateway: gateway_l.local_addr()?,
            gateway_tcp: gateway_tcp_l.local_addr()?,
            gateway_grpc: gateway_grpc_l.local_addr()?,
            relation: relation_l.local_addr()?,
            group: group_l.local_addr()?,
            message: message_l.local_addr()?,
            sync: sync_l.local_addr()?,
            notify: notify_l.local_addr()?,
        };
        let auth = &spec.auth;
        let listen = |grpc: &imesh_kit::config::GrpcConfig, addr: SocketAddr| {
            imesh_kit::config::GrpcConfig {
                listen: addr,
                ..grpc.clone()
            }
        };
        let relation = relation_svc::Service::build(
            relation_svc::Config {
                grpc: listen(&spec.relation.grpc, addrs.relation),
                sync_addr: addrs.sync.to_string(),
                group_addr: addrs.group.to_string(),
                notify_addr: addrs.notify.to_string(),
                ..spec.relation.clone()
            },
            auth,
            None,
        )
        .await?;
        let group = group_svc::Service::build(
            group_svc::Config {
                grpc: listen(&spec.group.grpc, addrs.group),
                message_addr: addrs.message.to_string(),
                relation_addr: addrs.relation.to_string(),
                sync_addr: addrs.sync.to_string(),
                ..spec.group.clone()
            },
            auth,
            None,
        )
        .await?;
        let files = local_files(&spec, addrs.gateway);
        let message = message_svc::Service::build(
            message_svc::Config {
                grpc: listen(&spec.message.grpc, addrs.message),
                relation_addr: addrs.relation.to_string(),
                group_addr: addrs.group.to_string(),
                sync_addr: addrs.sync.to_string(),
                files: files.clone(),
                ..spec.message.clone()
            },
            auth,
            None,
        )
        .await?;
        let sync = sync_svc::Service::build(
            sync_svc::Config {
                grpc: listen(&spec.sync.grpc, addrs.sync),
                notify_addr: addrs.notify.to_string(),
                group_addr: addrs.group.to_string(),
                ..spec.sync.clone()
            },
            auth,
            None,
        )
        .await?;
        let notify = notify_svc::Service::build(
            notify_svc::Config {
                grpc: listen(&spec.notify.grpc, addrs.notify),
                sync_addr: addrs.sync.to_string(),
                group_addr: addrs.group.to_string(),
                relation_addr: addrs.relation.to_string(),
                ..spec.notify.clone()
            },
            auth,
        )
        .await?;
        let gateway = gateway::Service::build(
            gateway::Config {
                listen: addrs.gateway,
                tcp_listen: addrs.gateway_tcp,
                grpc: listen(&spec.gateway.grpc, addrs.gateway_grpc),
                relation_addr: addrs.relation.to_string(),
                group_addr: addrs.group.to_string(),
                message_addr: addrs.message.to_string(),
                sync_addr: addrs.sync.to_string(),
                notify_addr: addrs.notify.to_string(),
                files_dir: match (files.store, spec.gateway.files_dir.as_str()) {
                    (message_svc::store::blobs::Backend::Local, "") => files.local.dir,
                    (_, dir) => dir.to_owned(),
                },
                ..spec.gateway.clone()
            },
            auth,
        );

        // Callers before callees: the gateway first (clients are told to reconnect and
        // its sends finish), then message-svc (its relay hands what it stored to sync-svc),
        // sync-svc (its deliveries reach notify-svc), notify-svc, and the services every
        // other one asks, group-svc and relation-svc, last.
        let services = vec![
            Running::spawn("gateway", |stop| {
                gateway.serve((gateway_l, gateway_tcp_l), gateway_grpc_l, stop)
            }),
            Running::spawn("message-svc", |stop| message.serve(message_l, stop)),
            Running::spawn("sync-svc", |stop| sync.serve(sync_l, stop)),
            Running::spawn("notify-svc", |stop| notify.serve(notify_l, stop)),
            Running::spawn("group-svc", |stop| group.serve(group_l, stop)),
            Running::spawn("relation-svc", |stop| relation.serve(relation_l, stop)),
        ];
        Ok(Self { addrs, services })
    }

    /// Runs until `signal` completes or a service exits on its own, then stops them all.
    pub async fn run_until(mut self, signal: impl Future<Output = ()>) -> anyhow::Result<()> {
        let finished = futures::future::select_all(self.services.iter_mut().map(|s| &mut s.task));
        tokio::select! {
            () = signal => {}
            (result, index, _) = finished => {
                let name = self.services[index].name;
                let error = match result {
                    Ok(Ok(())) => anyhow::anyhow!("{name} stopped unexpectedly"),
                    Ok(Err(e)) => e.context(format!("{name} failed")),
                    Err(e) => anyhow::Error::new(e).context(format!("{name} panicked")),
                };
                self.services.remove(index);
                let _ = self.stop().await;
                return Err(error);
            }
        }
        self.stop().await
    }

    /// Shuts the services down one at a time, each after the ones that call it.
    pub async fn stop(self) -> anyhow::Result<()> {
        let mut first_error = None;
        for service in self.services {
            if let Err(e) = service.stop().await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
