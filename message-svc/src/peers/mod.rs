//! Clients of the services and hooks message-svc asks before storing a message:
//! relation-svc ([`relation`]), group-svc ([`groups`]) and the app server's before-send
//! hook ([`hooks`]).

pub mod groups;
pub mod hooks;
pub mod relation;

pub use groups::GroupServiceGate;
pub use relation::RelationDirectory;
