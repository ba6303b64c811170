use imesh_kit::{cli, grpc};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (settings, _telemetry) = cli::start::<notify_svc::Config>("notify-svc");
    let listener = tokio::net::TcpListener::bind(settings.service.grpc.listen).await?;
    tracing::info!(addr = %listener.local_addr()?, "notify-svc listening");
    notify_svc::Service::build(settings.service, &settings.auth)
        .await?
        .serve(listener, grpc::shutdown_signal())
        .await
}
