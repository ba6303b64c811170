//! The in-process adapters of the embedded default: the shared relation cache
//! ([`MemoryEdgeCache`]) and the login throttle's counters ([`MemoryAttempts`]).

mod attempts;
mod edges;

pub use attempts::MemoryAttempts;
pub use edges::MemoryEdgeCache;
