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
