use imesh_kit::{cli, grpc};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (settings, _telemetry) = cli::start::<message_svc::Config>("message-svc");
    if cli::migrate_only() {
        return cli::migrate::<message_svc::store::sql::Migrator>(
            "message-svc",
            &settings.service.database,
        )
        .await;
    }
    let listener = tokio::net::TcpListener::bind(settings.service.grpc.listen).await?;
    tracing::info!(addr = %listener.local_addr()?, "message-svc listening");
    message_svc::Service::build(settings.service, &settings.auth, settings.node_id)
        .await?
        .serve(listener, grpc::shutdown_signal())
        .await
}
