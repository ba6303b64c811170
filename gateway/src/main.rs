use imesh_kit::{cli, grpc};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (settings, _telemetry) = cli::start::<gateway::Config>("gateway");
    let clients = tokio::net::TcpListener::bind(settings.service.listen).await?;
    let tcp_clients = tokio::net::TcpListener::bind(settings.service.tcp_listen).await?;
    let internal = tokio::net::TcpListener::bind(settings.service.grpc.listen).await?;
    tracing::info!(
        websocket = %clients.local_addr()?,
        tcp = %tcp_clients.local_addr()?,
        grpc = %internal.local_addr()?,
        "gateway listening"
    );
    gateway::Service::build(settings.service, &settings.auth)
        .serve((clients, tcp_clients), internal, grpc::shutdown_signal())
        .await
}
