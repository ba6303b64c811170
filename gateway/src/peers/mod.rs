//! The services a device's requests go to: one-off calls, friend and group operations
//! forwarded as the connected user, sends batched in order to message-svc, and acks
//! coalesced on their way to sync-svc.

pub mod acks;
pub mod backends;
pub mod calls;
pub mod sends;
