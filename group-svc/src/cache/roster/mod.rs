//! The adapters of the domain's [`Rosters`] port (its protocol is described there):
//! [`redis`] (sorted sets, scripts) and [`memory`].

pub use crate::domain::ports::{BUCKETS, CLAIM_TTL, Entry, Rosters, TTL, bucket};

pub mod memory;
pub mod redis;

#[cfg(test)]
pub(crate) mod tests;
