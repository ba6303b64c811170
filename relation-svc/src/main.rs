use imesh_kit::{cli, grpc};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (settings, _telemetry) = cli::start::<relation_svc::Config>("relation-svc");
    if cli::migrate_only() {
        return cli::migrate::<relation_svc::store::sql::Migrator>(
            "relation-svc",
            &settings.service.database,
        )
        .await;
    }
    let listener = tokio::net::TcpListener::bind(settings.service.grpc.listen).await?;
    tracing::info!(addr = %listener.local_addr()?, "relation-svc listening");
    relation_svc::Service::build(settings.service, &settings.auth, settings.node_id)
        .await?
        .serve(listener, grpc::shutdown_signal())
        .await
}
