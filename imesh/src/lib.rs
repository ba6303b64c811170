//! The `imesh` binary's library: [`cluster`] mounts every service's library in one process
//! (what `imesh up` runs, and what the end-to-end tests start on port 0).
//!
//! # Layout
//! - [`cluster`]: [`cluster::ClusterSpec`] → [`cluster::Cluster`]: bind, build, serve, stop.
//! - [`bench`]: `imesh bench`, the load tool: scenarios through a real gateway, a report.
//! - [`cli`]: the command line (`imesh up`, `imesh bench`); `main.rs` only calls it.

#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(unused_crate_dependencies))]

// The program's allocator, set in main.rs.
use mimalloc as _;

pub mod bench;
pub mod cli;
pub mod cluster;
