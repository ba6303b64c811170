#[tokio::main]
async fn main() -> anyhow::Result<()> {
    relation_svc::run_binary().await
}
