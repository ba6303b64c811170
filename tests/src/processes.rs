//! Every service as a process of its own (the tests' builds of the real programs), on free
//! loopback ports, killed when dropped: the deployment shape, without Kubernetes. Each
//! service on its own SQLite file under one temporary folder, or ([`Shape::replicated`])
//! several replicas of each on fresh PostgreSQL databases and the test Redis.

use std::{collections::HashMap, net::SocketAddr, path::PathBuf, process::Stdio};

use imesh_kit::testing::{self, Backend};
use tokio::process::{Child, Command};

use crate::{INTERNAL_SECRET, JWT_SECRET, PATIENCE, eventually, up::free_port};

/// The services' gRPC addresses (their first replica's) and the gateway's client ports.
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

/// One process: what starts it, and where it listens.
struct Process {
    name: &'static str,
    /// Where its output goes (kept while the test runs, for a failure's post-mortem).
    log: PathBuf,
    listen: SocketAddr,
    command: Vec<String>,
    env: Vec<(String, String)>,
    child: Option<Child>,
}

impl Process {
    async fn start(&mut self) {
        let mut command = Command::new(&self.command[0]);
        command
            .args(&self.command[1..])
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("a log file");
        command
            .stdout(log.try_clone().expect("a log file"))
            .stderr(log);
        self.child = Some(command.spawn().expect("a service process starts"));
        let listen = self.listen;
        eventually(&format!("{} listening", self.name), PATIENCE, || async {
            tokio::net::TcpStream::connect(listen).await.ok().map(drop)
        })
        .await;
    }
}

pub struct Deployment {
    pub addrs: Addrs,
    /// Every replica's gRPC address, by service.
    pub replicas: HashMap<&'static str, Vec<SocketAddr>>,
    /// The SQLite files and configuration (removed when dropped).
    pub data: PathBuf,
    processes: Vec<Process>,
}

impl Drop for Deployment {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

/// The services, in start order (the gateway last).
const SERVICES: [&str; 5] = ["relation", "group", "message", "sync", "notify"];

/// The tests' programs: `test-service` runs any of the five services, `test-gateway` the
/// gateway (a test names them with `env!("CARGO_BIN_EXE_…")`).
pub struct Programs {
    pub service: &'static str,
    pub gateway: &'static str,
}

/// How a deployment is laid out.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Processes per service (the gateway is one).
    pub replicas: usize,
    /// PostgreSQL and Redis instead of SQLite files and in-process state.
    pub servers: bool,
}

impl Shape {
    /// One process per service on SQLite files.
    pub const SINGLE: Shape = Shape {
        replicas: 1,
        servers: false,
    };

    /// `replicas` processes per service on PostgreSQL and Redis, leasing their nodes.
    pub fn replicated(replicas: usize) -> Self {
        Self {
            replicas,
            servers: true,
        }
    }
}

impl Deployment {
    /// Starts one process per service and the gateway with the test credentials and `env`
    /// (for every process); returns once each listens.
    pub async fn start(programs: Programs, env: &[(&str, String)]) -> Self {
        Self::start_shaped(programs, Shape::SINGLE, env).await
    }

    /// [`Self::start`] laid out as `shape` says.
    pub async fn start_shaped(programs: Programs, shape: Shape, env: &[(&str, String)]) -> Self {
        let local = |port| SocketAddr::from(([127, 0, 0, 1], port));
        let mut replicas: HashMap<&'static str, Vec<SocketAddr>> = HashMap::new();
        for name in SERVICES {
            let ports = (0..shape.replicas).map(|_| local(free_port())).collect();
            replicas.insert(name, ports);
        }
        let listed = |name: &str| -> String {
            let addrs: Vec<String> = replicas[name].iter().map(ToString::to_string).collect();
            addrs.join(",")
        };
        let addrs = Addrs {
            relation: replicas["relation"][0],
            group: replicas["group"][0],
            message: replicas["message"][0],
            sync: replicas["sync"][0],
            notify: replicas["notify"][0],
            gateway_grpc: local(free_port()),
            gateway: local(free_port()),
            gateway_tcp: local(free_port()),
        };
        let data = std::env::temp_dir().join(format!("imesh-deployment-{}", free_port()));
        std::fs::create_dir_all(&data).expect("data folder");
        // Test devices name platforms of their own; a list is set in a file, not a variable.
        let gateway_config = data.join("gateway.toml");
        std::fs::write(&gateway_config, "[admission]\nplatforms = []\n").expect("config written");
        let common: Vec<(String, String)> = [
            ("IMESH__AUTH__INTERNAL_SECRET", INTERNAL_SECRET.to_owned()),
            ("IMESH__AUTH__JWT_SECRET", JWT_SECRET.to_owned()),
            ("IMESH__TELEMETRY__LOG", "warn".to_owned()),
            ("IMESH__RELATION_ADDR", listed("relation")),
            ("IMESH__GROUP_ADDR", listed("group")),
            ("IMESH__MESSAGE_ADDR", listed("message")),
            ("IMESH__SYNC_ADDR", listed("sync")),
            ("IMESH__NOTIFY_ADDR", listed("notify")),
            ("IMESH__REPLICAS", shape.replicas.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .chain(shape.servers.then(redis).flatten())
        .chain(env.iter().map(|(k, v)| ((*k).to_owned(), v.clone())))
        .collect();
        let mut processes = Vec::new();
        for (node, name) in SERVICES.into_iter().enumerate() {
            let database = if shape.servers {
                let config = testing::fresh_sql(Backend::Postgres)
                    .await
                    .expect("a fresh PostgreSQL database");
                config.url.expose().to_owned()
            } else {
                format!("sqlite://{}/{name}.db?mode=rwc", data.display())
            };
            for (replica, listen) in replicas[name].iter().enumerate() {
                let mut own = vec![
                    ("IMESH_TEST_SERVICE".to_owned(), name.to_owned()),
                    ("IMESH__DATABASE__URL".to_owned(), database.clone()),
                    ("IMESH__GRPC__LISTEN".to_owned(), listen.to_string()),
                ];
                if shape.replicas == 1 {
                    own.push(("IMESH__NODE_ID".to_owned(), (node + 1).to_string()));
                }
                processes.push(Process {
                    name,
                    log: data.join(format!("{name}-{replica}.log")),
                    listen: *listen,
                    command: vec![programs.service.to_owned()],
                    env: common.iter().cloned().chain(own).collect(),
                    child: None,
                });
            }
        }
        let gateway_env = [
            ("IMESH_CONFIG", gateway_config.display().to_string()),
            ("IMESH__LISTEN", addrs.gateway.to_string()),
            ("IMESH__TCP_LISTEN", addrs.gateway_tcp.to_string()),
            ("IMESH__GRPC__LISTEN", addrs.gateway_grpc.to_string()),
            ("IMESH__NODE_ID", "6".to_owned()),
            // Test devices ack only in the tests about acks.
            ("IMESH__ACK_TIMEOUT_MS", "120000".to_owned()),
        ];
        processes.push(Process {
            name: "gateway",
            log: data.join("gateway.log"),
            listen: addrs.gateway_grpc,
            command: vec![programs.gateway.to_owned()],
            env: common
                .iter()
                .cloned()
                .chain(gateway_env.map(|(k, v)| (k.to_owned(), v)))
                .collect(),
            child: None,
        });
        for process in &mut processes {
            process.start().await;
        }
        Self {
            addrs,
            replicas,
            data,
            processes,
        }
    }

    /// SIGKILLs replica `replica` of service `name` (no clean stop, no lease released).
    pub async fn kill(&mut self, name: &str, replica: usize) {
        let process = self.process(name, replica);
        if let Some(mut child) = process.child.take() {
            child.kill().await.expect("the process is killed");
        }
    }

    /// Starts replica `replica` of service `name` again, as it was first started.
    pub async fn restart(&mut self, name: &str, replica: usize) {
        self.process(name, replica).start().await;
    }

    fn process(&mut self, name: &str, replica: usize) -> &mut Process {
        self.processes
            .iter_mut()
            .filter(|p| p.name == name)
            .nth(replica)
            .unwrap_or_else(|| panic!("no replica {replica} of {name}"))
    }
}

/// The test Redis as a setting, on a database of this deployment's own.
fn redis() -> Option<(String, String)> {
    let config = crate::private_redis().expect("the test Redis (scripts/test starts one)");
    Some(("IMESH__REDIS__URL".to_owned(), config.url()?.to_owned()))
}
