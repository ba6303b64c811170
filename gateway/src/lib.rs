//! The gateway: terminates client connections, authenticates them, carries their requests
//! to the services and writes pushes from notify-svc back to them.
//!
//! # Layout
//! - [`transport`]: client connections: the WebSocket (`/ws`, one protobuf frame per
//!   binary message) and TCP (a 12-byte header before each frame) transports, the accept
//!   loop, one connection's life over either (auth, presence, requests, writes), its
//!   batched writer with the window of pushes awaiting the client's ack, and the server
//!   frames.
//! - [`session`]: authentication and request dispatch of one device, transport-agnostic.
//! - [`admission`]: who may connect and hold a session, and the bounds on both.
//! - [`holds`]: order across refusals: a conversation held after a retryable refusal.
//! - [`connections`]: the registry of open connections and the internal gRPC `Push`.
//! - [`files`]: the embedded file store's `/files` (uploads and downloads by signed link).
//! - [`peers`]: the services a device's requests go to: one-off calls, friend and group
//!   operations forwarded as the connected user, sends batched in order to message-svc,
//!   acks coalesced to sync-svc.
//! - [`web`]: the browser demo at `/`.
//! - [`Service`]: builds all of it from [`Config`] and serves both listeners.

#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(unused_crate_dependencies))]

pub mod admission;
pub mod connections;
pub mod files;
pub mod holds;
pub mod peers;
pub mod session;
pub mod transport;
pub mod web;

// The program's allocator, set in main.rs.
use mimalloc as _;
use std::{net::SocketAddr, sync::Arc, time::Duration};

use imesh_kit::{
    config::{AuthConfig, GrpcConfig},
    grpc,
    identity::Caller,
    token::Tokens,
};
use imesh_protos::gateway::gateway_service_server::GatewayServiceServer;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct Config {
    /// Where WebSocket clients connect (at `/ws`).
    pub listen: SocketAddr,
    /// Where TCP clients connect (header-framed, see [`transport::tcp`]).
    pub tcp_listen: SocketAddr,
    /// The internal gRPC server notify-svc pushes to.
    pub grpc: GrpcConfig,
    /// The address notify-svc reaches this gateway's gRPC at (in Kubernetes, the pod IP);
    /// empty means the gRPC listener's own address.
    pub advertise_addr: String,
    /// relation-svc (token versions on connect).
    pub relation_addr: String,
    /// group-svc (the super groups a connection follows live).
    pub group_addr: String,
    pub message_addr: String,
    pub sync_addr: String,
    pub notify_addr: String,
    pub auth_timeout_ms: u64,
    /// A connection with no frame (not even a ping) for this long is closed (the registry
    /// is swept every eighth of it).
    pub idle_timeout_secs: u64,
    /// How often a live connection refreshes its presence (below notify's TTL).
    pub presence_refresh_secs: u64,
    /// Frames queued per connection before it counts as a slow consumer.
    pub send_queue: usize,
    /// Pushes a connection may leave unacknowledged; one more closes it (it resyncs).
    pub unacked_window: usize,
    /// How long a push waits for its ack before it is resent once (and, after another
    /// wait, the connection is closed).
    pub ack_timeout_ms: u64,
    pub max_frame_bytes: usize,
    /// Frames a connection may send per second (bursts of twice that); 0 turns it off.
    /// Frames past it are answered with RESOURCE_EXHAUSTED and the wait, and dropped.
    pub frames_per_sec: u32,
    /// Sends one connection may have unanswered; one more is refused at once.
    pub sends_in_flight: usize,
    /// Most `SendBatch` calls to message-svc out at once (see [`peers::sends`]).
    pub send_batches_in_flight: usize,
    /// Most sends one batch carries: 1–512, what message-svc takes in one call.
    pub send_batch_max: usize,
    /// Sends the gateway holds queued for message-svc; past that a send is refused at once.
    pub send_backlog: usize,
    /// How long one batch may take before its sends are answered UNAVAILABLE.
    pub send_timeout_ms: u64,
    /// A send refused with a retryable status holds its conversation on its connection:
    /// later sends to it are refused until the refused ones come again, in the order first
    /// sent. The hold ends this long after the wait the refusal named, or after the last
    /// resend, for clients that never resend.
    pub send_hold_ms: u64,
    /// Who may connect and hold a session (see [`admission`]).
    pub admission: admission::Limits,
    /// TLS on both client listeners when a certificate is set (see [`imesh_kit::tls`]).
    pub tls: imesh_kit::tls::TlsConfig,
    /// The embedded file store's folder (message-svc's `files.local.dir`): the HTTP
    /// listener serves it at `/files` (see [`files`]). Empty: no `/files`.
    pub files_dir: String,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([0, 0, 0, 0], 8080)),
            tcp_listen: SocketAddr::from(([0, 0, 0, 0], 8081)),
            grpc: GrpcConfig::on(([0, 0, 0, 0], 50056).into()),
            advertise_addr: String::new(),
            relation_addr: "127.0.0.1:50051".into(),
            group_addr: "127.0.0.1:50052".into(),
            message_addr: "127.0.0.1:50053".into(),
            sync_addr: "127.0.0.1:50054".into(),
            notify_addr: "127.0.0.1:50055".into(),
            auth_timeout_ms: 10_000,
            idle_timeout_secs: 90,
            presence_refresh_secs: 40,
            send_queue: 256,
            unacked_window: 256,
            ack_timeout_ms: 10_000,
            max_frame_bytes: 64 * 1024,
            frames_per_sec: 100,
            sends_in_flight: 32,
            send_batches_in_flight: 4,
            send_batch_max: 256,
            send_backlog: 4096,
            send_timeout_ms: 5_000,
            send_hold_ms: 1_000,
            admission: admission::Limits::default(),
            tls: imesh_kit::tls::TlsConfig::default(),
            files_dir: String::new(),
        }
    }
}

impl Config {
    pub fn auth_timeout(&self) -> Duration {
        Duration::from_millis(self.auth_timeout_ms)
    }

    pub fn idle_timeout(&self) -> Duration {
        Duration::from_secs(self.idle_timeout_secs)
    }

    pub fn ack_timeout(&self) -> Duration {
        Duration::from_millis(self.ack_timeout_ms)
    }

    pub fn presence_refresh(&self) -> Duration {
        Duration::from_secs(self.presence_refresh_secs)
    }

    /// Refuses settings that cannot work, naming the setting.
    pub fn check(&self) -> anyhow::Result<()> {
        let most = imesh_protos::MAX_SEND_BATCH;
        anyhow::ensure!(
            (1..=most).contains(&self.send_batch_max),
            "gateway.send_batch_max: must be 1–{most} (message-svc takes at most {most} sends a call), not {}",
            self.send_batch_max
        );
        Ok(())
    }

    pub fn send_limits(&self) -> peers::sends::Limits {
        peers::sends::Limits {
            batches_in_flight: self.send_batches_in_flight,
            batch_max: self.send_batch_max,
            backlog: self.send_backlog,
            in_flight: self.sends_in_flight,
            timeout: Duration::from_millis(self.send_timeout_ms),
            hold: Duration::from_millis(self.send_hold_ms),
        }
    }
}

/// What every connection task shares.
pub struct Gateway {
    pub config: Config,
    pub tokens: Tokens,
    pub backends: Arc<peers::backends::Backends>,
    pub connections: Arc<connections::Connections>,
    pub admission: Arc<admission::Admission>,
    /// This gateway's gRPC address as notify-svc should dial it.
    pub advertise: String,
    /// Cancelled when the gateway starts shutting down.
    pub draining: CancellationToken,
}

/// The gateway, built and ready to serve.
pub struct Service {
    config: Config,
    auth: AuthConfig,
}

impl Service {
    pub fn build(config: Config, auth: &AuthConfig) -> Self {
        Self {
            config,
            auth: auth.clone(),
        }
    }

    /// Serves WebSocket clients on `clients`, TCP clients on `tcp_clients` and the
    /// internal Push on `grpc_listener` until `shutdown`; then tells every client to
    /// reconnect elsewhere and drains.
    pub async fn serve(
        self,
        (clients, tcp_clients): (TcpListener, TcpListener),
        grpc_listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> anyhow::Result<()> {
        self.config.check()?;
        let advertise = match self.config.advertise_addr.as_str() {
            "" => advertised(grpc_listener.local_addr()?),
            addr => addr.to_owned(),
        };
        let caller = Caller::new(&self.auth.internal_secret)?;
        let gateway = Arc::new(Gateway {
            tokens: Tokens::new(&self.auth, Duration::from_secs(1))?,
            backends: Arc::new(peers::backends::Backends::new(caller, &self.config)?),
            connections: Arc::new(connections::Connections::default()),
            admission: Arc::new(admission::Admission::new(self.config.admission.clone())),
            advertise,
            draining: CancellationToken::new(),
            config: self.config.clone(),
        });
        let stop_grpc = CancellationToken::new();
        let push = GatewayServiceServer::new(connections::PushApi(gateway.connections.clone()));
        let mut registry = imesh_kit::metrics::registry("gateway");
        gateway.connections.register(&mut registry);
        gateway.backends.sends.register(&mut registry);
        gateway.admission.register(&mut registry);
        let grpc_server = grpc::Server::new(&self.config.grpc)
            .internal(push, &self.auth)
            .metrics(registry)
            .readiness(capacity_probe(&gateway))
            .serve(grpc_listener, stop_grpc.clone().cancelled_owned());
        let grpc_task = tokio::spawn(grpc_server);
        let tls = imesh_kit::tls::Tls::load(&self.config.tls, None, &[])?;
        if let Some(tls) = &tls {
            tokio::spawn(tls.clone().watch(gateway.draining.clone()));
        }
        let accepting = transport::listen::Accepting {
            admission: gateway.admission.clone(),
            tls: tls.clone(),
            refusal: transport::listen::Refusal::Http,
            proxy_protocol: false,
            stop: gateway.draining.clone(),
        };
        let clients = transport::listen::Clients::serve(clients, accepting)?;
        let mut router = transport::ws::router(gateway.clone()).merge(web::router());
        if !self.config.files_dir.is_empty() {
            router = router.merge(files::router(
                &self.config.files_dir,
                &self.auth.internal_secret,
            ));
        }
        let ws = axum::serve(
            clients,
            router.into_make_service_with_connect_info::<transport::listen::Client>(),
        )
        .with_graceful_shutdown(gateway.draining.clone().cancelled_owned());
        let ws_task = tokio::spawn(ws.into_future());
        tokio::spawn(close_idle_connections(gateway.clone()));
        let tcp_task = tokio::spawn(transport::tcp::serve(tcp_clients, gateway.clone(), tls));
        shutdown.await;
        gateway.draining.cancel();
        // A connection admitted from here on is told by its own admission.
        gateway
            .connections
            .kick_all(&transport::frames::shutting_down());
        let deadline = tokio::time::Instant::now() + self.config.grpc.grace();
        while !gateway.connections.is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        gateway.connections.close_all();
        stop_grpc.cancel();
        ws_task.await??;
        tcp_task.await?;
        grpc_task.await??;
        Ok(())
    }
}

/// Closes the connections that read nothing for `idle_timeout_secs`, sweeping the registry
/// every eighth of that, until the gateway drains.
async fn close_idle_connections(gateway: Arc<Gateway>) {
    let idle = gateway.config.idle_timeout();
    let why = format!("idle: no frame for {idle:?}");
    let frame = transport::frames::error(0, tonic::Code::DeadlineExceeded, why, true);
    let mut sweeps = tokio::time::interval((idle / 8).max(Duration::from_millis(100)));
    sweeps.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = gateway.draining.cancelled() => return,
            _ = sweeps.tick() => {}
        }
        gateway.connections.close_idle(idle, &frame);
    }
}

/// Ready while the gateway has room for more clients (below 95 % of `max_connections`).
fn capacity_probe(gateway: &Arc<Gateway>) -> grpc::Readiness {
    let gateway = Arc::downgrade(gateway);
    Arc::new(move || {
        let ready = gateway
            .upgrade()
            .is_some_and(|gateway| gateway.admission.ready(gateway.connections.len()));
        Box::pin(std::future::ready(ready))
    })
}

/// The gateway binary: settings from defaults, `IMESH_CONFIG` and `IMESH__…` variables;
/// serves until SIGTERM or Ctrl-C, then drains.
pub async fn run_binary() -> anyhow::Result<()> {
    let (settings, _telemetry) = imesh_kit::cli::start::<Config>("gateway");
    let clients = TcpListener::bind(settings.service.listen).await?;
    let tcp_clients = TcpListener::bind(settings.service.tcp_listen).await?;
    let internal = TcpListener::bind(settings.service.grpc.listen).await?;
    tracing::info!(
        websocket = %clients.local_addr()?,
        tcp = %tcp_clients.local_addr()?,
        grpc = %internal.local_addr()?,
        "gateway listening"
    );
    Service::build(settings.service, &settings.auth)
        .serve((clients, tcp_clients), internal, grpc::shutdown_signal())
        .await
}

/// A listener's address as others can dial it: an unspecified IP becomes loopback.
fn advertised(addr: SocketAddr) -> String {
    if addr.ip().is_unspecified() {
        format!("127.0.0.1:{}", addr.port())
    } else {
        addr.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_size_message_svc_would_refuse_is_refused_at_start_naming_the_setting() {
        assert!(Config::default().check().is_ok());
        for size in [0, imesh_protos::MAX_SEND_BATCH + 1] {
            let config = Config {
                send_batch_max: size,
                ..Config::default()
            };
            let refused = config.check().unwrap_err().to_string();
            assert!(refused.contains("gateway.send_batch_max"), "{refused}");
        }
    }
}
