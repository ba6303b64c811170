#[tokio::main]
async fn main() -> anyhow::Result<()> {
    group_svc::run_binary().await
}
