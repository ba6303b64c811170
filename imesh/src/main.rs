#[tokio::main]
async fn main() -> anyhow::Result<()> {
    imesh::cli::main().await
}
