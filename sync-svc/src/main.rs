use imesh_kit::{cli, grpc};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (settings, _telemetry) = cli::start::<sync_svc::Config>("sync-svc");
    if cli::migrate_only() {
        return cli::migrate::<sync_svc::store::sql::Migrator>(
            "sync-svc",
            &settings.service.database,
        )
        .await;
    }
    let listener = tokio::net::TcpListener::bind(settings.service.grpc.listen).await?;
    tracing::info!(addr = %listener.local_addr()?, "sync-svc listening");
    sync_svc::Service::build(settings.service, &settings.auth, settings.node_id)
        .await?
        .serve(listener, grpc::shutdown_signal())
        .await
}
