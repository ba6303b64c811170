#[tokio::main]
async fn main() -> anyhow::Result<()> {
    message_svc::run_binary().await
}
