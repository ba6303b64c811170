//! The gateway binary, built with the end-to-end tests so they can run gateways as
//! processes of their own (and kill them).

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    gateway::run_binary().await
}
