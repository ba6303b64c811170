//! Calls to a server of this process go straight into its router: no socket, no HTTP/2.
//!
//! While [`super::Server::serve`] runs, it registers its services (behind the same
//! concurrency limit, metrics, request span and timeout as its TCP listener) under the
//! address it listens on. A [`Channel`] to an IP address looks there on every call and
//! goes over TCP only when no server of this process listens on that address. Inside
//! `imesh up` every service calls the others this way; separate processes always talk
//! over TCP. Requests and replies are still encoded protobuf, and interceptors still see
//! the metadata.

use std::{
    collections::HashMap,
    convert::Infallible,
    net::SocketAddr,
    sync::LazyLock,
    task::{Context, Poll},
    time::Duration,
};

use futures::future::BoxFuture;
use parking_lot::RwLock;
use tonic::body::Body;
use tower::{Service, ServiceExt, util::BoxCloneSyncService};
use tracing::Instrument;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A server's services as one in-process service.
pub(super) type LocalServer =
    BoxCloneSyncService<http::Request<Body>, http::Response<Body>, Infallible>;

static SERVERS: LazyLock<RwLock<HashMap<SocketAddr, LocalServer>>> =
    LazyLock::new(Default::default);

/// Keeps a server reachable in-process until dropped.
pub(super) struct Registration(SocketAddr);

impl Registration {
    pub(super) fn new(addr: SocketAddr, server: LocalServer) -> Self {
        SERVERS.write().insert(addr, server);
        Self(addr)
    }
}

/// Whether a server of this process serves `addr` now.
#[cfg(test)]
pub(super) fn serves(addr: SocketAddr) -> bool {
    SERVERS.read().contains_key(&addr)
}

impl Drop for Registration {
    fn drop(&mut self) {
        SERVERS.write().remove(&self.0);
    }
}

/// `router` (already behind the concurrency limit and metrics) with what tonic's server
/// adds over TCP: a span continuing the caller's trace, and `timeout` or the caller's
/// shorter `grpc-timeout` (answered CANCELLED, as tonic's server does).
pub(super) fn server<S>(service: &'static str, router: S, timeout: Duration) -> LocalServer
where
    S: Service<
            http::Request<Body>,
            Response = http::Response<axum::body::Body>,
            Error = Infallible,
        > + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    BoxCloneSyncService::new(tower::service_fn(move |request: http::Request<Body>| {
        let span = crate::telemetry::request_span(service, request.uri(), request.headers());
        let timeout = caller_timeout(request.headers()).map_or(timeout, |t| t.min(timeout));
        let call = router.clone().oneshot(request);
        async move {
            let response = match tokio::time::timeout(timeout, call).instrument(span).await {
                Ok(Ok(response)) => response.map(Body::new),
                Ok(Err(never)) => match never {},
                Err(_) => tonic::Status::cancelled("Timeout expired").into_http(),
            };
            Ok(response)
        }
    }))
}

/// The deadline a caller set (`grpc-timeout`: at most 8 digits and a unit).
fn caller_timeout(headers: &http::HeaderMap) -> Option<Duration> {
    let value = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok().filter(|_| digits.len() <= 8)?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// A channel to another service: into its router when it runs in this process, else the
/// HTTP/2 channel.
#[derive(Clone, Debug)]
pub struct Channel {
    remote: tonic::transport::Channel,
    /// The address to look for among this process's servers (IP addresses only).
    local: Option<SocketAddr>,
}

impl Channel {
    pub(super) fn new(remote: tonic::transport::Channel, local: Option<SocketAddr>) -> Self {
        Self { remote, local }
    }
}

impl Service<http::Request<Body>> for Channel {
    type Response = http::Response<Body>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Each call readies its own route below.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let local = self
            .local
            .and_then(|addr| SERVERS.read().get(&addr).cloned());
        match local {
            Some(server) => Box::pin(async move {
                let Ok(response) = server.oneshot(request).await;
                Ok(response)
            }),
            None => {
                let remote = self.remote.clone();
                Box::pin(async move { Ok(remote.oneshot(request).await?) })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callers_grpc_timeout_is_read_in_every_unit() {
        let timeout = |value: &str| {
            let mut headers = http::HeaderMap::new();
            headers.insert("grpc-timeout", value.parse().unwrap());
            caller_timeout(&headers)
        };
        assert_eq!(timeout("5000m"), Some(Duration::from_secs(5)));
        assert_eq!(timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(timeout("3M"), Some(Duration::from_secs(180)));
        assert_eq!(timeout("7u"), Some(Duration::from_micros(7)));
        assert_eq!(timeout("9n"), Some(Duration::from_nanos(9)));
        assert_eq!(timeout("123456789S"), None, "more than 8 digits");
        assert_eq!(timeout("5x"), None);
        assert_eq!(timeout("S"), None);
        assert_eq!(caller_timeout(&http::HeaderMap::new()), None);
    }
}
