//! The five service programs in one binary, built with the end-to-end tests so they can
//! run each service as a process of its own: `IMESH_TEST_SERVICE` names the service
//! (relation, group, message, sync or notify); the arguments are that service's own.

/// mimalloc: a message is many small allocations (frames, protobuf, HTTP/2), and glibc's
/// malloc was a sixth of the server's CPU under load.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match std::env::var("IMESH_TEST_SERVICE").ok().as_deref() {
        Some("relation") => relation_svc::run_binary().await,
        Some("group") => group_svc::run_binary().await,
        Some("message") => message_svc::run_binary().await,
        Some("sync") => sync_svc::run_binary().await,
        Some("notify") => notify_svc::run_binary().await,
        other => anyhow::bail!(
            "IMESH_TEST_SERVICE: expected relation|group|message|sync|notify, got {other:?}"
        ),
    }
}
