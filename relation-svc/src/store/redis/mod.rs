//! The Redis adapters, shared by every replica: the relation cache ([`RedisEdgeCache`],
//! seed 001's hash per user) and the login throttle's counters ([`RedisAttempts`]).

mod attempts;
mod edges;

pub use attempts::RedisAttempts;
pub use edges::RedisEdgeCache;
