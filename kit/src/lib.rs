//! The imesh service kit: what every service is built from.
//!
//! # Layout
//! - [`config`]: one typed tree per binary, defaults → optional file → `IMESH__…` env vars.
//! - [`telemetry`]: tracing always, OpenTelemetry OTLP export when an endpoint is configured.
//! - [`grpc`]: the shared [`grpc::Server`] (health, reflection, tower stack, graceful shutdown)
//!   and channels to other services.
//! - [`identity`]: the internal credential and the caller (`x-imesh-actor`) of every call.
//! - [`error`]: the pieces each service's error → `Status` mapping is made of.
//! - [`ids`]: snowflake ids, on node ids each process leases ([`ids::lease`]).
//! - `sql`, `redis` (features of the same names, on by default): store connections; `seq`
//!   (both): the seqsvr-style sequence allocator; `outbox` (`sql`): the transactional
//!   outbox and its relay. The gateway builds without either, notify-svc with Redis only.
//! - [`files`]: signed links to the embedded file store's objects.
//! - [`tls`]: the server side of TLS (client listeners, and mutual TLS between services).
//! - `testing` (feature `testing`, for tests and benches): the real stores tests run on.
//!
//! The kit picks no allocator: each program sets its own (mimalloc, in its `main.rs`).

#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(unused_crate_dependencies))]

pub mod cli;
pub mod config;
pub mod error;
pub mod files;
pub mod grpc;
pub mod hooks;
pub mod identity;
pub mod ids;
pub mod metrics;
#[cfg(feature = "sql")]
pub mod outbox;
#[cfg(feature = "redis")]
pub mod redis;
pub mod runs;
#[cfg(all(feature = "sql", feature = "redis"))]
pub mod seq;
#[cfg(feature = "sql")]
pub mod sql;
pub mod telemetry;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod tls;
pub mod token;

/// A page size from a request: 0 asks for `default`; above `max` is refused with the reason
/// (callers name the field).
pub fn page_limit(limit: u32, default: u32, max: u32) -> Result<u32, String> {
    match limit {
        0 => Ok(default),
        l if l <= max => Ok(l),
        _ => Err(format!("must be at most {max}")),
    }
}
