//! Adapters of the login throttle's [`Attempts`](crate::domain::throttle::Attempts) port:
//! Redis ([`redis`], shared by every replica) and in process ([`memory`], the embedded
//! default).

pub mod memory;
pub mod redis;

#[cfg(test)]
mod tests;
