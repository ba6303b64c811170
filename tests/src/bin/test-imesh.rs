//! The `imesh` program, built with the end-to-end tests so they can run `imesh up` as a
//! process of its own.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    imesh::cli::main().await
}
