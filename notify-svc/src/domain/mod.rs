//! The notify domain: no wire type and no adapter here; what it needs from outside is in
//! [`ports`].
//!
//! - [`router`]: inbox entries → the online devices of their users → one Push per gateway.
//! - [`watch`]: presence changes told to friends.
//! - [`typing`]: typing indicators, live only, throttled per user and conversation.
//! - [`offline`]: offline push for users with no live connection, as sync-svc decides.

pub mod offline;
pub mod ports;
pub mod router;
pub mod typing;
pub mod watch;

pub use router::{DevicePolicy, Error, MAX_PRESENCE_USERS, Router};
