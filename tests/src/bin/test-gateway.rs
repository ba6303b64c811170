//! The gateway binary, built with the end-to-end tests so they can run gateways as
//! processes of their own (and kill them).

/// mimalloc: a message is many small allocations (frames, protobuf, HTTP/2), and glibc's
/// malloc was a sixth of the server's CPU under load.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    gateway::run_binary().await
}
