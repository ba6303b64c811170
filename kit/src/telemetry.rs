//! Telemetry: a tracing subscriber for every process, plus OpenTelemetry OTLP span export
//! and W3C trace-context propagation when `telemetry.otlp_endpoint` is set.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::{Resource, propagation::TraceContextPropagator, trace::SdkTracerProvider};
use tracing_subscriber::{EnvFilter, Layer as _, layer::SubscriberExt, util::SubscriberInitExt};

use crate::config::TelemetryConfig;

/// Whether spans leave the process (set once by [`init`]): store and Redis clients only
/// trace their calls then.
static EXPORTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn exporting() -> bool {
    EXPORTING.load(std::sync::atomic::Ordering::Relaxed)
}

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

impl TelemetryGuard {
    /// Exports the spans that ended so far now rather than at the next batch.
    pub fn flush(&self) {
        if let Some(provider) = &self.0
            && let Err(e) = provider.force_flush()
        {
            eprintln!("telemetry: flushing spans failed: {e}");
        }
    }
}

/// Installs the process-wide subscriber. Call once, first thing in `main`, inside the tokio
/// runtime (spans are exported from it).
pub fn init(service: &'static str, config: &TelemetryConfig) -> anyhow::Result<TelemetryGuard> {
    let mut filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&config.log))
        .map_err(|e| {
            anyhow::anyhow!("telemetry.log {:?} is not a valid filter: {e}", config.log)
        })?;
    // The SQL and Redis clients' per-call spans are for traces, not log lines; a filter
    // that names them explicitly still gets them.
    let named = std::env::var("RUST_LOG").unwrap_or_else(|_| config.log.clone());
    for client in ["sea_orm", "fred"] {
        if !named.contains(client) {
            filter = filter.add_directive(format!("{client}=warn").parse()?);
        }
    }
    let provider = if config.otlp_endpoint.is_empty() {
        None
    } else {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(&config.otlp_endpoint)
            .build()?;
        // The batch processor runs on the process's tokio runtime: tonic's exporter needs
        // its reactor, which the SDK's default processor thread does not have.
        let processor =
            opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
                exporter,
                opentelemetry_sdk::runtime::Tokio,
            )
            .build();
        Some(
            SdkTracerProvider::builder()
                .with_span_processor(processor)
                .with_resource(Resource::builder().with_service_name(service).build())
                .build(),
        )
    };
    // The log filter is the logs' only: spans reach the exporter at info whatever it says.
    EXPORTING.store(provider.is_some(), std::sync::atomic::Ordering::Relaxed);
    let otel = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer(service))
            .with_filter(tracing_subscriber::filter::LevelFilter::INFO)
    });
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let (plain, json) = if config.json {
        // Each line carries the fields of its request's span, the trace id among them.
        let json = tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(false);
        (None, Some(json))
    } else {
        (Some(tracing_subscriber::fmt::layer()), None)
    };
    tracing_subscriber::registry()
        .with(otel)
        .with(plain.with_filter(filter.clone()))
        .with(json.with_filter(filter))
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

/// The span of one incoming gRPC request to `service`, named after its method and parented
/// to the caller's trace when it sent one.
pub fn request_span(
    service: &'static str,
    uri: &http::Uri,
    headers: &http::HeaderMap,
) -> tracing::Span {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let path = uri.path();
    // Without an exporter the span only gives log lines context: at debug level, so the
    // default filter spares every request its bookkeeping.
    macro_rules! request_span {
        ($level:expr) => {
            tracing::span!(
                $level,
                "grpc",
                otel.name = path.trim_start_matches('/'),
                otel.kind = "server",
                rpc.service = service,
                trace_id = tracing::field::Empty,
            )
        };
    }
    let span = if exporting() {
        request_span!(tracing::Level::INFO)
    } else {
        request_span!(tracing::Level::DEBUG)
    };
    if headers.contains_key("traceparent") {
        let parent = opentelemetry::global::get_text_map_propagator(|p| {
            p.extract(&HeaderExtractor(headers))
        });
        let _ = span.set_parent(parent);
    }
    record_trace_id(&span);
    span
}

/// Fills `span`'s `trace_id` field (declared `Empty`) when traces are exported, so log
/// lines written under it name their trace.
pub fn record_trace_id(span: &tracing::Span) {
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let trace_id = span.context().span().span_context().trace_id();
    if trace_id != opentelemetry::trace::TraceId::INVALID {
        span.record("trace_id", tracing::field::display(trace_id));
    }
}
