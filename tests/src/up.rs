//! `imesh up` as a process of its own (the tests' build of the program), on free ports,
//! killed when dropped, with the calls its tests make over gRPC.

use std::{net::SocketAddr, path::PathBuf, process::Stdio};

use imesh_kit::{
    config::Secret,
    grpc::Channel,
    identity::{Actor, CLIENT_ADDR_HEADER, Caller},
};
use imesh_protos::relation::{
    LoginRequest, RegisterRequest, relation_service_client::RelationServiceClient,
};
use tokio::process::{Child, Command};

use crate::{INTERNAL_SECRET, JWT_SECRET, PASSWORD, PATIENCE, eventually};

/// A port nothing listens on right now, never handed out before in this test process, and
/// below the kernel's ephemeral range (32768 and up on Linux): tests running side by side
/// start processes on ports they were given a moment earlier, and neither a probe's
/// closing nor some process's outgoing connection may take the port meanwhile.
pub fn free_port() -> u16 {
    use std::hash::{BuildHasher, RandomState};
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let random = RandomState::new();
    for attempt in 0u32.. {
        let port = 20_000 + (random.hash_one(attempt) % 12_000) as u16;
        let mut given = GIVEN.lock().expect("the ports given");
        if given.contains(&port) || std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
            continue;
        }
        given.push(port);
        return port;
    }
    unreachable!("a free port below the ephemeral range")
}

pub struct UpProcess {
    _child: Child,
    /// Its data folder (removed when dropped).
    pub data: PathBuf,
    pub gateway: SocketAddr,
    pub gateway_tcp: SocketAddr,
    pub relation: SocketAddr,
}

impl Drop for UpProcess {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

impl UpProcess {
    /// Runs `binary up` with `args` and the `env` settings, the test credentials and free
    /// ports; returns once its gateway and relation-svc listen.
    pub async fn start(binary: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        let data = std::env::temp_dir().join(format!("imesh-up-{}", free_port()));
        let local = |port| SocketAddr::from(([127, 0, 0, 1], port));
        let (gateway, gateway_tcp, relation) =
            (local(free_port()), local(free_port()), local(free_port()));
        let mut command = Command::new(binary);
        command
            .args(["up", "--data"])
            .arg(&data)
            .args(args)
            .env("IMESH__AUTH__INTERNAL_SECRET", INTERNAL_SECRET)
            .env("IMESH__AUTH__JWT_SECRET", JWT_SECRET)
            .env("IMESH__PORTS__GATEWAY", gateway.port().to_string())
            .env("IMESH__PORTS__GATEWAY_TCP", gateway_tcp.port().to_string())
            .env("IMESH__PORTS__RELATION", relation.port().to_string())
            .env("IMESH__TELEMETRY__LOG", "warn")
            .envs(env.iter().copied());
        for name in ["GATEWAY_GRPC", "GROUP", "MESSAGE", "SYNC", "NOTIFY"] {
            command.env(format!("IMESH__PORTS__{name}"), free_port().to_string());
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("imesh up starts");
        for addr in [gateway, gateway_tcp, relation] {
            eventually("imesh up listening", PATIENCE, || async {
                tokio::net::TcpStream::connect(addr).await.ok().map(drop)
            })
            .await;
        }
        Self {
            _child: child,
            data,
            gateway,
            gateway_tcp,
            relation,
        }
    }

    pub fn relation(&self) -> RelationServiceClient<Channel> {
        RelationServiceClient::new(imesh_kit::grpc::channel(&self.relation.to_string()).unwrap())
    }

    fn caller() -> Caller {
        Caller::new(&Secret::new(INTERNAL_SECRET)).unwrap()
    }

    /// Registers `username` with the tests' password.
    pub async fn register(&self, username: &str) {
        let register = RegisterRequest {
            username: username.into(),
            password: PASSWORD.into(),
            nickname: String::new(),
        };
        self.relation()
            .register(Self::caller().request(Actor::System, register))
            .await
            .expect("registered");
    }

    /// A login for the end user at address `from`: the token, or the refusal.
    pub async fn login(
        &self,
        username: &str,
        password: &str,
        from: &str,
    ) -> Result<String, tonic::Status> {
        let login = LoginRequest {
            username: username.into(),
            password: password.into(),
        };
        let mut request = Self::caller().request(Actor::System, login);
        request
            .metadata_mut()
            .insert(CLIENT_ADDR_HEADER, from.parse().unwrap());
        Ok(self.relation().login(request).await?.into_inner().token)
    }
}
