//! Client connections, whatever carries them: the TCP and WebSocket transports, the accept
//! loop, one connection's life, its batched writer with the window of unacked pushes, and
//! the server frames written to it.

pub mod frames;
pub mod link;
pub mod listen;
pub mod queue;
pub mod spare;
pub mod tcp;
pub mod window;
pub mod writer;
pub mod ws;

/// Bytes taken from a client's socket per read, into a buffer on the stack: a connection
/// keeps only what it has not yet used (see [`spare`] and `tcp::io`).
const READ_CHUNK: usize = 4096;
