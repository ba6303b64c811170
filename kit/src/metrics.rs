//! Prometheus metrics of one gRPC server: requests and their latency per RPC, and errors per
//! status code, recorded by a tower layer and served as text at `/metrics` on the same port
//! (HTTP/1.1, as Prometheus scrapes). A service registers its own metrics (connections,
//! fanout sizes, cache hits, …) in the [`Registry`] from [`registry`] before it serves.

use std::{
    sync::Arc,
    task::{Context, Poll},
    time::Instant,
};

use futures::future::BoxFuture;
use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{counter::Counter, family::Family, histogram::Histogram},
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Rpc {
    method: String,
    /// The gRPC status code name, `OK` when the call succeeded.
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Method {
    method: String,
}

pub use prometheus_client::registry::Registry;

/// An empty registry whose metrics are named `imesh_…` and labelled with `service`.
pub fn registry(service: &str) -> Registry {
    Registry::with_prefix_and_labels(
        "imesh",
        [("service".into(), service.to_owned().into())].into_iter(),
    )
}

/// Buckets for counts of recipients, members or rows: 1 to 100,000.
pub fn size_buckets() -> impl Iterator<Item = f64> {
    prometheus_client::metrics::histogram::exponential_buckets(1.0, 4.0, 9)
}

/// The metrics of one server; cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    requests: Family<Rpc, Counter>,
    latency: Family<Method, Histogram>,
}

impl Metrics {
    /// Adds the per-RPC metrics to `registry` (which may already hold the service's own).
    pub fn new(mut registry: Registry) -> Self {
        let requests = Family::<Rpc, Counter>::default();
        registry.register(
            "grpc_requests",
            "gRPC requests answered, by method and status code",
            requests.clone(),
        );
        let latency = Family::<Method, Histogram>::new_with_constructor(|| {
            Histogram::new([
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
            ])
        });
        registry.register(
            "grpc_request_duration_seconds",
            "Time to the response headers, by method",
            latency.clone(),
        );
        Self {
            registry: Arc::new(registry),
            requests,
            latency,
        }
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }

    fn record(&self, method: &str, code: &str, seconds: f64) {
        let rpc = Rpc {
            method: method.to_owned(),
            code: code.to_owned(),
        };
        self.requests.get_or_create(&rpc).inc();
        self.latency
            .get_or_create(&Method {
                method: method.to_owned(),
            })
            .observe(seconds);
    }
}

/// Records every request that passes through it into [`Metrics`].
#[derive(Clone)]
pub struct MetricsLayer(pub Metrics);

impl<S> tower::Layer<S> for MetricsLayer {
    type Service = Recorded<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Recorded {
            inner,
            metrics: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Recorded<S> {
    inner: S,
    metrics: Metrics,
}

impl<S, B, R> tower::Service<http::Request<B>> for Recorded<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>> + Send,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let method = request.uri().path().to_owned();
        let metrics = self.metrics.clone();
        let started = Instant::now();
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            if method != "/metrics" {
                // Errors are trailers-only responses (grpc-status in the headers); a call
                // that streams a body ends OK in its trailers.
                let code = response
                    .headers()
                    .get("grpc-status")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<i32>().ok())
                    .map_or(tonic::Code::Ok, tonic::Code::from_i32);
                metrics.record(
                    &method,
                    &format!("{code:?}"),
                    started.elapsed().as_secs_f64(),
                );
            }
            Ok(response)
        })
    }
}
