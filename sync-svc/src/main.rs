#[tokio::main]
async fn main() -> anyhow::Result<()> {
    sync_svc::run_binary().await
}
