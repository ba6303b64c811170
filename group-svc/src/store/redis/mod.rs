//! The Redis adapters, shared by every replica: the group cache ([`RedisGroupCache`], whose
//! invalidations are also broadcast to every replica's local cache over pub/sub,
//! [`listen`]) and large groups' rosters ([`RedisRosters`]: bucketed sorted sets, scripts).

mod groups;
mod rosters;

pub use groups::{RedisGroupCache, listen};
pub use rosters::RedisRosters;
