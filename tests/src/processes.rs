//! Every service as a process of its own (the tests' builds of the real programs), each on
//! its own SQLite file under one temporary folder, on free loopback ports, killed when
//! dropped: the deployment shape, without Kubernetes.

use std::{net::SocketAddr, path::PathBuf, process::Stdio};

use tokio::process::{Child, Command};

use crate::{INTERNAL_SECRET, JWT_SECRET, PATIENCE, eventually, up::free_port};

/// The services' gRPC addresses and the gateway's client ports.
#[derive(Debug, Clone, Copy)]
pub struct Addrs {
    pub relation: SocketAddr,
    pub group: SocketAddr,
    pub message: SocketAddr,
    pub sync: SocketAddr,
    pub notify: SocketAddr,
    pub gateway_grpc: SocketAddr,
    pub gateway: SocketAddr,
    pub gateway_tcp: SocketAddr,
}

pub struct Deployment {
    pub addrs: Addrs,
    /// The SQLite files and configuration (removed when dropped).
    pub data: PathBuf,
    _children: Vec<Child>,
}

impl Drop for Deployment {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

/// The processes, in start order.
const PROCESSES: [&str; 6] = ["relation", "group", "message", "sync", "notify", "gateway"];

/// The tests' programs: `test-service` runs any of the five services, `test-gateway` the
/// gateway (a test names them with `env!("CARGO_BIN_EXE_…")`).
pub struct Programs {
    pub service: &'static str,
    pub gateway: &'static str,
}

impl Deployment {
    /// Starts the six processes with the test credentials and `env` (for every process);
    /// returns once each listens.
    pub async fn start(programs: Programs, env: &[(&str, String)]) -> Self {
        let local = |port| SocketAddr::from(([127, 0, 0, 1], port));
        let addrs = Addrs {
            relation: local(free_port()),
            group: local(free_port()),
            message: local(free_port()),
            sync: local(free_port()),
            notify: local(free_port()),
            gateway_grpc: local(free_port()),
            gateway: local(free_port()),
            gateway_tcp: local(free_port()),
        };
        let data = std::env::temp_dir().join(format!("imesh-deployment-{}", free_port()));
        std::fs::create_dir_all(&data).expect("data folder");
        // Test devices name platforms of their own; a list is set in a file, not a variable.
        let gateway_config = data.join("gateway.toml");
        std::fs::write(&gateway_config, "[admission]\nplatforms = []\n").expect("config written");
        let mut children = Vec::new();
        for (node, name) in PROCESSES.into_iter().enumerate() {
            let mut command = if name == "gateway" {
                Command::new(programs.gateway)
            } else {
                let mut command = Command::new(programs.service);
                command.arg(name);
                command
            };
            command
                .env("IMESH__AUTH__INTERNAL_SECRET", INTERNAL_SECRET)
                .env("IMESH__AUTH__JWT_SECRET", JWT_SECRET)
                .env("IMESH__TELEMETRY__LOG", "warn")
                .env("IMESH__NODE_ID", (node + 1).to_string())
                .env(
                    "IMESH__DATABASE__URL",
                    format!("sqlite://{}/{name}.db?mode=rwc", data.display()),
                )
                .env("IMESH__RELATION_ADDR", addrs.relation.to_string())
                .env("IMESH__GROUP_ADDR", addrs.group.to_string())
                .env("IMESH__MESSAGE_ADDR", addrs.message.to_string())
                .env("IMESH__SYNC_ADDR", addrs.sync.to_string())
                .env("IMESH__NOTIFY_ADDR", addrs.notify.to_string())
                .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .kill_on_drop(true);
            let listen = match name {
                "relation" => addrs.relation,
                "group" => addrs.group,
                "message" => addrs.message,
                "sync" => addrs.sync,
                "notify" => addrs.notify,
                _ => {
                    command
                        .env("IMESH_CONFIG", &gateway_config)
                        .env("IMESH__LISTEN", addrs.gateway.to_string())
                        .env("IMESH__TCP_LISTEN", addrs.gateway_tcp.to_string());
                    addrs.gateway_grpc
                }
            };
            command.env("IMESH__GRPC__LISTEN", listen.to_string());
            children.push(command.spawn().expect("a service process starts"));
            eventually(&format!("{name} listening"), PATIENCE, || async {
                tokio::net::TcpStream::connect(listen).await.ok().map(drop)
            })
            .await;
        }
        Self {
            addrs,
            data,
            _children: children,
        }
    }
}
