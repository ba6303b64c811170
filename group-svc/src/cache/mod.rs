//! The shared group cache behind the send gate's per-process cache (seed 000): group info
//! and member rows as the gate needs them, and member-id sets for write fanout. The port,
//! [`GroupCache`], is the domain's. Adapters:
//! [`redis`] (deployments; invalidations also broadcast to every replica's local cache over
//! pub/sub) and [`memory`] (the embedded default). The database stays the truth: writers
//! change it first, then invalidate here.

pub use crate::domain::{ACTIVE_KEPT, GateGroup, GateMember, GroupCache};

pub mod keys;
pub mod memory;
pub mod redis;
pub mod roster;

#[cfg(test)]
mod tests;
