//! The adapters of the ports the domain modules declare, over other services: each gateway's
//! `Push` ([`gateways`]), relation-svc's friend lists ([`friends`]), group-svc's members
//! ([`groups`]), sync-svc's offline decisions ([`targets`]), and the company's push service
//! ([`webhook`]).

pub mod friends;
pub mod gateways;
pub mod groups;
pub mod targets;
pub mod webhook;
