//! One client request is one trace: a message sent through the gateway produces spans in
//! the gateway, in every service the send calls and around their SQL and Redis calls, each
//! parented to its caller, exported over OTLP to a collector (here an in-process OTLP/gRPC
//! receiver). Runs on Redis and a SQL server when they are configured.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use imesh_kit::{config::TelemetryConfig, telemetry};
use imesh_tests::{Stores, TestCluster, eventually};
use opentelemetry_proto::tonic::{
    collector::trace::v1::{
        ExportTraceServiceRequest, ExportTraceServiceResponse,
        trace_service_server::{TraceService, TraceServiceServer},
    },
    common::v1::any_value::Value,
    trace::v1::Span,
};
use tokio::sync::Mutex;

/// Keeps every span it is sent.
#[derive(Clone, Default)]
struct Collector(Arc<Mutex<Vec<Span>>>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let spans = request
            .into_inner()
            .resource_spans
            .into_iter()
            .flat_map(|r| r.scope_spans)
            .flat_map(|s| s.spans);
        self.0.lock().await.extend(spans);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

fn service_of(span: &Span) -> Option<String> {
    attribute(span, "rpc.service")
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref()?.value.as_ref())
        .and_then(|v| match v {
            Value::StringValue(s) => Some(s.clone()),
            _ => None,
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_through_the_gateway_is_one_trace_across_the_services_it_calls() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let collector = Collector::default();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(collector.clone()))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    // Quiet logs: the filter is the logs' own, spans are exported regardless.
    let config = TelemetryConfig {
        otlp_endpoint: endpoint,
        log: "warn".into(),
        json: true,
    };
    let guard = Arc::new(telemetry::init("imesh-tests", &config).unwrap());

    let stores = *Stores::available().last().unwrap();
    let env = TestCluster::start(stores).await;
    let (_, alice) = env.user("alice").await;
    let (bob_id, _) = env.user("bob").await;
    let mut device = env.signed_in(&alice, "phone").await;
    device.send_text(bob_id, "traced-1", "hello").await;

    let spans = eventually("the send's spans", Duration::from_secs(20), || {
        let (collector, guard) = (collector.clone(), guard.clone());
        async move {
            // Flushing blocks until the export task answers: not on a runtime worker.
            tokio::task::spawn_blocking(move || guard.flush())
                .await
                .unwrap();
            let spans = collector.0.lock().await.clone();
            let root = spans.iter().find(|s| s.name == "gateway/send")?;
            let trace: Vec<Span> = spans
                .iter()
                .filter(|s| s.trace_id == root.trace_id)
                .cloned()
                .collect();
            let send = trace
                .iter()
                .any(|s| s.name == "imesh.message.v1.MessageService/SendBatch");
            let beyond = trace.iter().any(|s| {
                s.name.starts_with("imesh.relation.v1.") || s.name.starts_with("imesh.group.v1.")
            });
            (send && beyond).then_some(trace)
        }
    })
    .await;

    let root = spans.iter().find(|s| s.name == "gateway/send").unwrap();
    assert!(
        root.parent_span_id.is_empty(),
        "the client request is the root"
    );
    // The gateway carries sends in batches: a lone send's batch continues its trace.
    let send = spans
        .iter()
        .find(|s| s.name == "imesh.message.v1.MessageService/SendBatch")
        .unwrap();
    assert_eq!(
        send.parent_span_id, root.span_id,
        "message-svc continues the gateway's span"
    );
    let ids: BTreeSet<&[u8]> = spans.iter().map(|s| s.span_id.as_slice()).collect();
    for span in &spans {
        assert!(
            span.parent_span_id.is_empty() && span.span_id == root.span_id
                || ids.contains(span.parent_span_id.as_slice()),
            "{} hangs off a span outside the trace",
            span.name
        );
    }
    assert!(
        spans.iter().any(|s| s.name.starts_with("sea_orm.")),
        "SQL calls have spans: {:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    if stores != Stores::Embedded {
        assert!(
            spans.iter().any(|s| s.name == "fred.command"),
            "Redis calls have spans: {:?}",
            spans.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
    }
    // Log lines written under a request's span carry its trace id in the `trace_id` field.
    let hex: String = root.trace_id.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(attribute(root, "trace_id").as_deref(), Some(hex.as_str()));
    assert_eq!(attribute(send, "trace_id").as_deref(), Some(hex.as_str()));
    let services: BTreeSet<String> = spans.iter().filter_map(service_of).collect();
    assert!(services.len() >= 3, "one trace across {services:?}");
    assert!(services.contains("gateway"), "{services:?}");
}
