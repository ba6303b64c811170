/// mimalloc: a message is many small allocations (frames, protobuf, HTTP/2), and glibc's
/// malloc was a sixth of the server's CPU under load.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    sync_svc::run_binary().await
}
