//! Adapters of the domain's [`Presence`](crate::domain::ports::Presence) port:
//! [`MemoryPresence`] (the embedded default) and [`RedisPresence`]; one contract suite runs
//! against both.

mod memory;
mod redis;

pub use self::{memory::MemoryPresence, redis::RedisPresence};

#[cfg(test)]
mod tests;
