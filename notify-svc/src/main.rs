#[tokio::main]
async fn main() -> anyhow::Result<()> {
    notify_svc::run_binary().await
}
