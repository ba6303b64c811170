//! The one gRPC server bootstrap every service uses, and channels to other services.
//!
//! [`Server`] adds `grpc.health.v1` (SERVING once listening, NOT_SERVING while a readiness
//! probe fails and from the first moment of shutdown), reflection (v1 and v1alpha, so
//! grpcurl of any age works), a request span, a per-request timeout and a global
//! concurrency limit, Prometheus metrics per RPC (scraped at `/metrics` on the same port),
//! HTTP probes (`/livez`: the process serves; `/readyz`: its stores answer), and mutual TLS
//! with the other services when `grpc.tls` names a certificate ([`Peers`] is the client
//! side).
//! Shutdown runs in a fixed order: health NOT_SERVING → stop accepting →
//! drain in-flight requests within the grace period → the service's own stop steps, in the
//! order it gave them ([`Server::then_stop`]: relays, background tasks, the node lease,
//! the database) → return.

use std::{
    convert::Infallible,
    future::Future,
    net::SocketAddr,
    path::Path,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::Context as _;
use tokio::net::TcpListener;
use tonic::{
    body::Body,
    server::NamedService,
    service::{Routes, RoutesBuilder, interceptor::InterceptedService},
    transport::{Certificate, ClientTlsConfig, Endpoint, Identity, server::TcpIncoming},
};
use tonic_health::{ServingStatus, server::HealthReporter};
use tower::Service;

use crate::{
    config::{AuthConfig, GrpcConfig},
    identity::InternalAuth,
    tls::Tls,
};

mod keyed;
mod local;
pub use keyed::{Keyed, Replica, direct_key, group_key};
pub use local::Channel;

/// A step of a service's shutdown, run once its server has drained.
type StopStep = Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>;

/// Answers whether the service's stores are reachable right now.
pub type Readiness = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = bool> + Send>> + Send + Sync>;

const READINESS_INTERVAL: Duration = Duration::from_secs(5);

pub struct Server {
    config: GrpcConfig,
    routes: RoutesBuilder,
    names: Vec<&'static str>,
    readiness: Option<Readiness>,
    registry: Option<crate::metrics::Registry>,
    stop_steps: Vec<StopStep>,
}

impl Server {
    pub fn new(config: &GrpcConfig) -> Self {
        Self {
            config: config.clone(),
            routes: Routes::builder(),
            names: Vec::new(),
            readiness: None,
            registry: None,
            stop_steps: Vec::new(),
        }
    }

    /// Serves `registry` (the service's own metrics) at `/metrics` beside the per-RPC ones.
    pub fn metrics(mut self, registry: crate::metrics::Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// Mounts a tonic service; its health status follows the server's.
    pub fn add_service<S>(mut self, svc: S) -> Self
    where
        S: Service<http::Request<Body>, Error = Infallible>
            + NamedService
            + Clone
            + Send
            + Sync
            + 'static,
        S::Response: axum::response::IntoResponse,
        S::Future: Send + 'static,
    {
        self.names.push(S::NAME);
        self.routes.add_service(svc);
        self
    }

    /// Mounts a service only other imesh services may call: every request must carry the
    /// deployment's internal credential ([`InternalAuth`]).
    pub fn internal<S>(self, svc: S, auth: &AuthConfig) -> Self
    where
        S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
            + NamedService
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
    {
        self.add_service(InterceptedService::new(
            svc,
            InternalAuth::new(&auth.internal_secret),
        ))
    }

    /// Runs `step` once the server has drained (or failed), after the steps added before
    /// it; [`Server::serve`] returns the server's error, else the first step's.
    pub fn then_stop(
        mut self,
        step: impl Future<Output = anyhow::Result<()>> + Send + 'static,
    ) -> Self {
        self.stop_steps.push(Box::pin(step));
        self
    }

    /// Polls `probe` every few seconds; while it answers false, health reports NOT_SERVING.
    pub fn readiness(mut self, probe: Readiness) -> Self {
        self.readiness = Some(probe);
        self
    }

    /// Serves on `listener` until `shutdown` completes, then drains within the grace period
    /// and runs the stop steps.
    pub async fn serve(
        mut self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> anyhow::Result<()> {
        let steps = std::mem::take(&mut self.stop_steps);
        let served = self.serve_until(listener, shutdown).await;
        let mut stopped = Ok(());
        for step in steps {
            let result = step.await;
            if stopped.is_ok() {
                stopped = result;
            }
        }
        served.and(stopped)
    }

    async fn serve_until(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> anyhow::Result<()> {
        let (health, health_service) = tonic_health::server::health_reporter();
        // Advertise what this server mounts, not every service in the shared descriptor set.
        let advertised: Vec<String> = self
            .names
            .iter()
            .map(|n| n.to_string())
            .chain(["grpc.health.v1.Health".to_owned()])
            .collect();
        let reflection = || {
            advertised.iter().fold(
                tonic_reflection::server::Builder::configure()
                    .register_encoded_file_descriptor_set(imesh_protos::FILE_DESCRIPTOR_SET)
                    .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET),
                |builder, name| builder.with_service_name(name.clone()),
            )
        };
        let reflection_v1 = reflection().build_v1()?;
        let reflection_v1alpha = reflection().build_v1alpha()?;
        let mut routes = self.routes;
        routes
            .add_service(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha);
        set_all(&health, &self.names, ServingStatus::Serving).await;
        let ready = Arc::new(AtomicBool::new(true));
        let probe_task = self.readiness.map(|probe| {
            tokio::spawn(watch_readiness(
                probe,
                health.clone(),
                self.names.clone(),
                ready.clone(),
            ))
        });

        let service = self.names.first().copied().unwrap_or("grpc");
        let metrics = crate::metrics::Metrics::new(
            self.registry
                .unwrap_or_else(|| crate::metrics::registry(service)),
        );
        let scrape = metrics.clone();
        let readyz = ready.clone();
        let router = routes
            .routes()
            .into_axum_router()
            .route(
                "/metrics",
                axum::routing::get(move || async move { scrape.render() }),
            )
            .route("/livez", axum::routing::get(|| async { "live\n" }))
            .route(
                "/readyz",
                axum::routing::get(move || {
                    let ready = readyz.load(Ordering::Relaxed);
                    async move {
                        if ready {
                            (http::StatusCode::OK, "ready\n")
                        } else {
                            (http::StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
                        }
                    }
                }),
            );
        let limit = tower::limit::GlobalConcurrencyLimitLayer::new(self.config.concurrency_limit);
        // Callers in this process skip the socket; they share the concurrency limit.
        let in_process = local::Registration::new(
            listener.local_addr()?,
            local::server(
                service,
                tower::ServiceBuilder::new()
                    .layer(limit.clone())
                    .layer(crate::metrics::MetricsLayer(metrics.clone()))
                    .service(router.clone()),
                self.config.timeout(),
            ),
        );
        let tls = if self.config.tls.enabled()? {
            Tls::load(
                &self.config.tls.listener(),
                Some(Path::new(&self.config.tls.ca_file)),
                &[b"h2", b"http/1.1"],
            )?
        } else {
            None
        };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let tcp_router = match &tls {
            Some(_) => router.layer(axum::middleware::from_fn(peers_only)),
            None => router,
        };
        let server = tonic::transport::Server::builder()
            .accept_http1(true)
            .timeout(self.config.timeout())
            .tcp_nodelay(true)
            .max_concurrent_streams(MAX_STREAMS)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .initial_stream_window_size(STREAM_WINDOW)
            .trace_fn(move |request| {
                crate::telemetry::request_span(service, request.uri(), request.headers())
            })
            .layer(limit)
            .layer(crate::metrics::MetricsLayer(metrics))
            .add_routes(Routes::from(tcp_router));
        let stopped = async {
            let _ = stop_rx.await;
        };
        let stop_watching = tokio_util::sync::CancellationToken::new();
        let server: Pin<Box<dyn Future<Output = Result<(), tonic::transport::Error>> + Send>> =
            match tls {
                Some(tls) => {
                    tokio::spawn(tls.clone().watch(stop_watching.clone()));
                    Box::pin(
                        server.serve_with_incoming_shutdown(tls_incoming(listener, tls), stopped),
                    )
                }
                // The builder's tcp_nodelay only reaches listeners tonic binds itself: without
                // it here every reply waited on Nagle's algorithm and the peer's delayed ACK.
                None => Box::pin(server.serve_with_incoming_shutdown(
                    TcpIncoming::from(listener).with_nodelay(Some(true)),
                    stopped,
                )),
            };
        let _stop_watching = stop_watching.drop_guard();
        tokio::pin!(server);
        tokio::select! {
            result = &mut server => return Ok(result?),
            () = shutdown => {}
        }
        if let Some(task) = probe_task {
            task.abort();
        }
        set_all(&health, &self.names, ServingStatus::NotServing).await;
        ready.store(false, Ordering::Relaxed);
        drop(in_process);
        let _ = stop_tx.send(());
        match tokio::time::timeout(self.config.grace(), server).await {
            Ok(result) => Ok(result?),
            Err(_) => {
                tracing::warn!(grace = ?self.config.grace(), "grace period ran out; dropping in-flight requests");
                Ok(())
            }
        }
    }
}

async fn set_all(health: &HealthReporter, names: &[&str], status: ServingStatus) {
    health.set_service_status("", status).await;
    for name in names {
        health.set_service_status(name, status).await;
    }
}

async fn watch_readiness(
    probe: Readiness,
    health: HealthReporter,
    names: Vec<&'static str>,
    shown: Arc<AtomicBool>,
) {
    let mut was_ready = true;
    loop {
        let ready = probe().await;
        shown.store(ready, Ordering::Relaxed);
        if ready != was_ready {
            tracing::warn!(ready, "store readiness changed");
            let status = if ready {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            set_all(&health, &names, status).await;
            was_ready = ready;
        }
        tokio::time::sleep(READINESS_INTERVAL).await;
    }
}

/// Paths any TLS client may call; the rest need a client certificate.
const OPEN_PATHS: &[&str] = &[
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1.ServerReflection/",
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/metrics",
    "/livez",
    "/readyz",
];

/// Lets service calls through only from a caller that presented a certificate of the CA.
async fn peers_only(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let path = request.uri().path();
    if crate::tls::peer_verified(request.extensions())
        || OPEN_PATHS.iter().any(|open| path.starts_with(open))
    {
        return next.run(request).await;
    }
    tonic::Status::unauthenticated(
        "this service's calls need a client certificate signed by the internal CA (grpc.tls)",
    )
    .into_http::<axum::body::Body>()
}

/// The TLS connections of `listener`, handshakes run side by side; one that fails or
/// stalls is closed and left out.
fn tls_incoming(
    listener: TcpListener,
    tls: Arc<Tls>,
) -> impl futures::Stream<Item = std::io::Result<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>>
{
    let (ready, incoming) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let tcp = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((tcp, _)) => tcp,
                    Err(e) => {
                        tracing::warn!(error = %e, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                () = ready.closed() => return,
            };
            let _ = tcp.set_nodelay(true);
            let (tls, ready) = (tls.clone(), ready.clone());
            tokio::spawn(async move {
                match tls.accept(tcp).await {
                    Ok(stream) => {
                        let _ = ready.send(Ok(stream)).await;
                    }
                    Err(e) => tracing::debug!(error = %e, "TLS handshake with a peer failed"),
                }
            });
        }
    });
    futures::stream::unfold(incoming, |mut incoming| async move {
        incoming.recv().await.map(|stream| (stream, incoming))
    })
}

/// Streams one HTTP/2 connection carries at once; a client queues more until one ends.
const MAX_STREAMS: u32 = 1024;
/// Flow-control windows of both ends. Besides pacing large bodies (a `SendBatch` of 256
/// sends), the connection window sets h2's budget for small DATA frames received and not
/// yet read (half the window): every call waiting for the concurrency limit holds one, and
/// past the budget h2 closes the whole connection (GoAway ENHANCE_YOUR_CALM,
/// "too_many_data_frames"). 4 MiB covers [`MAX_STREAMS`] waiting calls many times over.
const CONNECTION_WINDOW: u32 = 4 << 20;
const STREAM_WINDOW: u32 = 1 << 20;

/// How often a balanced channel looks its host name up again.
const RESOLVE_EVERY: Duration = Duration::from_secs(10);

/// The most one internal call should carry, well under the 4 MiB a server decodes: a
/// batch bigger than this goes as several calls ([`runs_within`]).
pub const MAX_CALL_BYTES: usize = 1 << 20;

/// Splits `items` (the elements of a repeated field), in order, into runs whose encoded
/// sizes add up to at most `max` bytes (an item larger than `max` makes a run of its
/// own): one call each.
pub fn runs_within<T: prost::Message>(items: Vec<T>, max: usize) -> Vec<Vec<T>> {
    // The element's tag and length prefix included.
    crate::runs::within(items, max, |item| item.encoded_len() + 8)
}

/// A plaintext channel to `addr` (tools and tests; services use [`Peers::channel`]).
pub fn channel(addr: &str) -> anyhow::Result<Channel> {
    Peers::default().channel(addr)
}

/// How this process reaches other services: plaintext, or mutual TLS per `grpc.tls`.
#[derive(Clone, Default)]
pub struct Peers {
    tls: Option<ClientTlsConfig>,
}

impl Peers {
    /// Reads the certificate files now; they are presented for the process's lifetime.
    pub fn new(config: &GrpcConfig) -> anyhow::Result<Self> {
        let tls = &config.tls;
        if !tls.enabled()? {
            return Ok(Self::default());
        }
        let read = |path: &str, key: &str| {
            std::fs::read(path).with_context(|| format!("grpc.tls.{key}: {path}"))
        };
        crate::tls::roots(Path::new(&tls.ca_file)).context("grpc.tls.ca_file")?;
        Ok(Self {
            tls: Some(
                ClientTlsConfig::new()
                    .ca_certificate(Certificate::from_pem(read(&tls.ca_file, "ca_file")?))
                    .identity(Identity::from_pem(
                        read(&tls.cert_file, "cert_file")?,
                        read(&tls.key_file, "key_file")?,
                    ))
                    .domain_name(tls.server_name.clone())
                    .timeout(Duration::from_millis(tls.handshake_timeout_ms)),
            ),
        })
    }

    /// A lazily connecting channel to another service at `host:port` (or an `http://`
    /// URI); calls to a server of this process skip the network (the `local` module).
    ///
    /// An IP address gets one connection. A host name is resolved now and every 10 s,
    /// with one connection per address and calls balanced over them:
    /// behind a Kubernetes headless Service each pod is an address, where one HTTP/2
    /// connection to a single resolved address would pin every call to one pod.
    /// A comma-separated list of `ip:port` names the replicas themselves (no DNS), with
    /// calls balanced over them.
    pub fn channel(&self, addr: &str) -> anyhow::Result<Channel> {
        if addr.contains(',') {
            let (remote, changes) = tonic::transport::Channel::balance_channel(16);
            for replica in listed(addr)? {
                let endpoint = self.endpoint(&replica.to_string())?;
                changes
                    .try_send(tonic::transport::channel::Change::Insert(replica, endpoint))
                    .map_err(|_| anyhow::anyhow!("{addr:?}: more than 16 replicas listed"))?;
            }
            return Ok(Channel::new(remote, None));
        }
        let authority = addr.split_once("://").map_or(addr, |(_, rest)| rest);
        let (host, port) = authority
            .rsplit_once(':')
            .ok_or_else(|| anyhow::anyhow!("{addr:?}: expected host:port"))?;
        let port: u16 = port
            .trim_end_matches('/')
            .parse()
            .map_err(|_| anyhow::anyhow!("{addr:?}: the port is not a number"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = host.parse::<std::net::IpAddr>() {
            let remote = self
                .endpoint(authority.trim_end_matches('/'))?
                .connect_lazy();
            return Ok(Channel::new(remote, Some(SocketAddr::new(ip, port))));
        }
        let (remote, changes) = tonic::transport::Channel::balance_channel(16);
        tokio::spawn(follow_addresses(
            format!("{host}:{port}"),
            self.clone(),
            changes,
        ));
        Ok(Channel::new(remote, None))
    }

    /// An endpoint at `authority` (`host:port`), over TLS if this process uses it.
    fn endpoint(&self, authority: &str) -> anyhow::Result<Endpoint> {
        Ok(match &self.tls {
            None => endpoint(&format!("http://{authority}"))?,
            Some(tls) => endpoint(&format!("https://{authority}"))?.tls_config(tls.clone())?,
        })
    }
}

/// The replicas of a comma-separated `ip:port` list.
fn listed(addr: &str) -> anyhow::Result<Vec<SocketAddr>> {
    addr.split(',')
        .map(|one| {
            one.trim()
                .parse()
                .map_err(|_| anyhow::anyhow!("{addr:?}: each listed replica must be ip:port"))
        })
        .collect()
}

fn endpoint(uri: &str) -> anyhow::Result<Endpoint> {
    Ok(Endpoint::from_shared(uri.to_owned())?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(3))
        .initial_connection_window_size(CONNECTION_WINDOW)
        .initial_stream_window_size(STREAM_WINDOW)
        .http2_keep_alive_interval(Duration::from_secs(30)))
}

/// The addresses `name` resolves to now; `None` (logged) when resolving fails, so callers
/// keep the addresses they had.
async fn resolved(name: &str) -> Option<std::collections::BTreeSet<SocketAddr>> {
    match tokio::net::lookup_host(name).await {
        Ok(found) => Some(found.collect()),
        Err(e) => {
            tracing::warn!(%name, error = %e, "resolving a peer failed");
            None
        }
    }
}

/// Keeps `changes` in step with the addresses `name` resolves to, until the channel is gone.
async fn follow_addresses(
    name: String,
    peers: Peers,
    changes: tokio::sync::mpsc::Sender<tonic::transport::channel::Change<SocketAddr, Endpoint>>,
) {
    use tonic::transport::channel::Change;
    let mut known = std::collections::BTreeSet::new();
    loop {
        // Keep the addresses we had when resolving fails: a hiccup must not empty the channel.
        if let Some(found) = resolved(&name).await {
            for gone in known.difference(&found) {
                if changes.send(Change::Remove(*gone)).await.is_err() {
                    return;
                }
            }
            for new in found.difference(&known) {
                let Ok(endpoint) = peers.endpoint(&new.to_string()) else {
                    continue;
                };
                if changes.send(Change::Insert(*new, endpoint)).await.is_err() {
                    return;
                }
            }
            known = found;
        }
        tokio::select! {
            () = tokio::time::sleep(RESOLVE_EVERY) => {}
            () = changes.closed() => return,
        }
    }
}

/// Resolves when the process receives SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { () = ctrl_c => {}, () = term => {} }
    tracing::info!("shutdown signal received");
}

#[cfg(test)]
mod tests {
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

    use super::*;

    #[test]
    fn runs_count_each_entry_with_its_framing() {
        use imesh_protos::sync::RawEntry;
        // An entry of `n` event bytes encodes as n + 2, plus 8 counted for its framing.
        let entry = |n: usize| RawEntry {
            sync_seq: 0,
            event: vec![n as u8; n].into(),
        };
        let sizes = |runs: Vec<Vec<RawEntry>>| -> Vec<Vec<usize>> {
            let lens = |run: Vec<RawEntry>| run.iter().map(|e| e.event.len()).collect();
            runs.into_iter().map(lens).collect()
        };
        let runs = runs_within([30, 40, 20, 90, 10, 10].map(entry).to_vec(), 65);
        assert_eq!(
            sizes(runs),
            vec![vec![30], vec![40], vec![20], vec![90], vec![10, 10]]
        );
    }

    async fn serving() -> (SocketAddr, tokio::task::JoinHandle<anyhow::Result<()>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = Server::new(&GrpcConfig::on(addr));
        (
            addr,
            tokio::spawn(server.serve(listener, std::future::pending())),
        )
    }

    async fn check(channel: Channel) -> Result<(), tonic::Status> {
        let request = HealthCheckRequest {
            service: String::new(),
        };
        HealthClient::new(channel).check(request).await.map(drop)
    }

    #[tokio::test]
    async fn a_host_name_is_resolved_and_called_through_its_addresses() {
        let (addr, server) = serving().await;
        check(channel(&format!("localhost:{}", addr.port())).unwrap())
            .await
            .unwrap();
        check(channel(&format!("http://localhost:{}", addr.port())).unwrap())
            .await
            .unwrap();
        server.abort();
    }

    #[tokio::test]
    async fn a_server_of_this_process_is_called_without_the_network_while_it_serves() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = tokio_util::sync::CancellationToken::new();
        let server = tokio::spawn(
            Server::new(&GrpcConfig::on(addr)).serve(listener, stop.clone().cancelled_owned()),
        );
        // Its TCP route leads nowhere: only the in-process route can answer.
        let closed = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap();
        let nowhere = endpoint(&format!("http://{closed}"))
            .unwrap()
            .connect_lazy();
        let through_process = Channel::new(nowhere.clone(), Some(addr));
        crate::testing::until("the server registers in-process", || local::serves(addr)).await;
        check(through_process.clone()).await.unwrap();
        stop.cancel();
        server.await.unwrap().unwrap();
        let gone = check(through_process).await.unwrap_err();
        assert_eq!(
            gone.code(),
            tonic::Code::Unavailable,
            "a stopped server is no longer reachable in-process: {gone:?}"
        );
        let e = check(Channel::new(nowhere, None)).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_connection_carries_a_burst_of_small_calls_queued_behind_the_limit() {
        // Each waiting call's small DATA frame sits in h2's buffer until its handler runs;
        // h2 closes a connection whose buffered small frames pass its budget
        // (GoAway ENHANCE_YOUR_CALM "too_many_data_frames").
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let config = GrpcConfig {
            concurrency_limit: 1,
            ..GrpcConfig::on(addr)
        };
        let server = tokio::spawn(Server::new(&config).serve(listener, std::future::pending()));
        let one_connection = endpoint(&format!("http://{addr}")).unwrap().connect_lazy();
        let calls = (0..3_000).map(|_| check(Channel::new(one_connection.clone(), None)));
        let failed: Vec<_> = futures::future::join_all(calls)
            .await
            .into_iter()
            .filter_map(Result::err)
            .collect();
        assert!(
            failed.is_empty(),
            "{} failed, first {:?}",
            failed.len(),
            failed.first()
        );
        server.abort();
    }

    /// The status line of `GET path` over plain HTTP/1.
    async fn http_status(addr: SocketAddr, path: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: imesh\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response.lines().next().unwrap_or_default().to_owned()
    }

    #[tokio::test]
    async fn livez_answers_while_serving_and_readyz_follows_the_stores() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stores_up = Arc::new(AtomicBool::new(true));
        let probe = stores_up.clone();
        let server = Server::new(&GrpcConfig::on(addr)).readiness(Arc::new(move || {
            let up = probe.load(Ordering::Relaxed);
            Box::pin(async move { up })
        }));
        let serving = tokio::spawn(server.serve(listener, std::future::pending()));
        crate::testing::until_async("ready at start", || async {
            http_status(addr, "/readyz")
                .await
                .starts_with("HTTP/1.1 200")
        })
        .await;
        stores_up.store(false, Ordering::Relaxed);
        crate::testing::until_async("not ready while the stores are down", || async {
            http_status(addr, "/readyz")
                .await
                .starts_with("HTTP/1.1 503")
        })
        .await;
        let live = http_status(addr, "/livez").await;
        assert!(
            live.starts_with("HTTP/1.1 200"),
            "alive without its stores: {live}"
        );
        stores_up.store(true, Ordering::Relaxed);
        crate::testing::until_async("ready again", || async {
            http_status(addr, "/readyz")
                .await
                .starts_with("HTTP/1.1 200")
        })
        .await;
        serving.abort();
    }

    #[tokio::test]
    async fn stop_steps_run_in_order_once_drained_and_a_failure_skips_none() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = tokio_util::sync::CancellationToken::new();
        let ran = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let step = |n: u32, fails: bool| {
            let ran = ran.clone();
            async move {
                ran.lock().push(n);
                if fails {
                    anyhow::bail!("step {n} failed");
                }
                Ok(())
            }
        };
        let server = tokio::spawn(
            Server::new(&GrpcConfig::on(addr))
                .then_stop(step(1, false))
                .then_stop(step(2, true))
                .then_stop(step(3, true))
                .serve(listener, stop.clone().cancelled_owned()),
        );
        check(channel(&addr.to_string()).unwrap()).await.unwrap();
        assert!(ran.lock().is_empty(), "no step runs while serving");
        stop.cancel();
        let e = server.await.unwrap().unwrap_err();
        assert_eq!(
            e.to_string(),
            "step 2 failed",
            "the first failure is returned"
        );
        assert_eq!(*ran.lock(), vec![1, 2, 3]);
    }

    #[tokio::test]
    async fn an_ip_address_gets_one_direct_connection() {
        let (addr, server) = serving().await;
        check(channel(&addr.to_string()).unwrap()).await.unwrap();
        server.abort();
    }

    #[tokio::test]
    async fn an_address_without_a_port_is_refused_by_name() {
        let e = channel("relation-svc").unwrap_err().to_string();
        assert!(e.contains("relation-svc") && e.contains("host:port"), "{e}");
        let e = channel("relation-svc:grpc").unwrap_err().to_string();
        assert!(e.contains("port is not a number"), "{e}");
    }
}
