use imesh_kit::{cli, grpc};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (settings, _telemetry) = cli::start::<group_svc::Config>("group-svc");
    if cli::migrate_only() {
        return cli::migrate::<group_svc::store::sql::Migrator>(
            "group-svc",
            &settings.service.database,
        )
        .await;
    }
    let listener = tokio::net::TcpListener::bind(settings.service.grpc.listen).await?;
    tracing::info!(addr = %listener.local_addr()?, "group-svc listening");
    group_svc::Service::build(settings.service, &settings.auth, settings.node_id)
        .await?
        .serve(listener, grpc::shutdown_signal())
        .await
}
