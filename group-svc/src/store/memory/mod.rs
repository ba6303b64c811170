//! The in-process adapters of the embedded default: the group cache
//! ([`MemoryGroupCache`]) and large groups' rosters ([`MemoryRosters`]).

mod groups;
mod rosters;

pub use groups::MemoryGroupCache;
pub use rosters::MemoryRosters;
