//! Telemetry: a tracing subscriber for every process, plus OpenTelemetry OTLP span export
//! and W3C trace-context propagation when `telemetry.otlp_endpoint` is set.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::{Resource, propagation::TraceContextPropagator, trace::SdkTracerProvider};
use tracing_subscriber::{EnvFilter, layer::SubscriberExt, util::SubscriberInitExt};

use crate::config::TelemetryConfig;

/// Flushes pending spans when dropped; keep it alive for the life of the process.
#[must_use = "spans are only exported while the guard lives"]
pub struct TelemetryGuard(Option<SdkTracerProvider>);

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.0.take()
            && let Err(e) = provider.shutdown()
        {
            eprintln!("telemetry: flushing spans failed: {e}");
        }
    }
}

/// Installs the process-wide subscriber. Call once, first thing in `main`.
pub fn init(service: &'static str, config: &TelemetryConfig) -> anyhow::Result<TelemetryGuard> {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&config.log))
        .map_err(|e| {
            anyhow::anyhow!("telemetry.log {:?} is not a valid filter: {e}", config.log)
        })?;
    let provider = if config.otlp_endpoint.is_empty() {
        None
    } else {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(&config.otlp_endpoint)
            .build()?;
        Some(
            SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(Resource::builder().with_service_name(service).build())
                .build(),
        )
    };
    let otel = provider
        .as_ref()
        .map(|p| tracing_opentelemetry::layer().with_tracer(p.tracer(service)));
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let (plain, json) = if config.json {
        (None, Some(tracing_subscriber::fmt::layer().json()))
    } else {
        (Some(tracing_subscriber::fmt::layer()), None)
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(otel)
        .with(plain)
        .with(json)
        .try_init()?;
    Ok(TelemetryGuard(provider))
}

struct MetadataInjector<'a>(&'a mut tonic::metadata::MetadataMap);

impl opentelemetry::propagation::Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(key), Ok(value)) = (
            tonic::metadata::MetadataKey::from_bytes(key.as_bytes()),
            tonic::metadata::MetadataValue::try_from(value.as_str()),
        ) {
            self.0.insert(key, value);
        }
    }
}

struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl opentelemetry::propagation::Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// Writes the current span's W3C trace context into outgoing gRPC metadata.
pub fn inject_context(metadata: &mut tonic::metadata::MetadataMap) {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let context = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|p| {
        p.inject_context(&context, &mut MetadataInjector(metadata))
    });
}

/// The span of one incoming gRPC request, parented to the caller's trace when it sent one.
pub fn request_span(request: &http::Request<()>) -> tracing::Span {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let span = tracing::info_span!("grpc", path = %request.uri().path());
    if request.headers().contains_key("traceparent") {
        let parent = opentelemetry::global::get_text_map_propagator(|p| {
            p.extract(&HeaderExtractor(request.headers()))
        });
        let _ = span.set_parent(parent);
    }
    span
}
