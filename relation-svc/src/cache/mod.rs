//! The relation caches in front of the database: the adapters of the domain's shared
//! [`EdgeCache`] port, over Redis ([`redis`], seed 001's hash per user) and in process
//! ([`memory`], the embedded default). The per-process [`LocalCache`] is the domain's own.

pub use crate::domain::{EdgeCache, LocalCache};

pub mod keys;
pub mod memory;
pub mod redis;

#[cfg(test)]
mod tests;
