//! The end-to-end tests: real services, real clients, real stores, in one test binary (one
//! link instead of one per file). `tracing.rs` stays its own binary: it installs the
//! process-wide tracing subscriber.

mod abuse;
mod acks;
mod admission;
mod bad_input;
mod bench;
mod browser;
mod calls;
mod direct_path;
mod edits;
mod faults;
mod files;
mod gateways;
mod groups;
mod hooks;
mod json;
mod live_hints;
mod messaging;
mod mtls;
mod nicknames;
mod offline_push;
mod operability;
mod own_view;
mod pins;
mod presence_events;
mod reactions;
mod receipts;
mod references;
mod relations;
mod replicas;
mod scale_out;
mod search;
mod sessions;
mod slice;
mod super_group;
mod tcp;
mod tls;
mod token_keys;
mod typing;
