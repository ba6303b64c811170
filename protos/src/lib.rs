//! The imesh wire contract: generated prost messages and tonic clients/servers for every
//! package under `protos/imesh/`, mirrored as a module tree (`imesh::message::v1`, …) with
//! short aliases at the root, plus [`FILE_DESCRIPTOR_SET`] for gRPC reflection. Every
//! message also has serde implementations of the proto3 JSON mapping.
//!
//! Internal packages (`relation`, `group`, `message`, `sync`, `notify`, gateway `Push`) are
//! spoken between services; `gateway::v1::{ClientFrame, ServerFrame}` is the client protocol.

#![allow(
    unreachable_pub,
    clippy::large_enum_variant,
    clippy::doc_lazy_continuation
)]

pub mod imesh {
    pub mod relation {
        pub mod v1 {
            tonic::include_proto!("imesh.relation.v1");
            include!(concat!(env!("OUT_DIR"), "/imesh.relation.v1.serde.rs"));
        }
    }
    pub mod group {
        pub mod v1 {
            tonic::include_proto!("imesh.group.v1");
            include!(concat!(env!("OUT_DIR"), "/imesh.group.v1.serde.rs"));
        }
    }
    pub mod message {
        pub mod v1 {
            tonic::include_proto!("imesh.message.v1");
            include!(concat!(env!("OUT_DIR"), "/imesh.message.v1.serde.rs"));
        }
    }
    pub mod sync {
        pub mod v1 {
            tonic::include_proto!("imesh.sync.v1");
            include!(concat!(env!("OUT_DIR"), "/imesh.sync.v1.serde.rs"));
        }
    }
    pub mod notify {
        pub mod v1 {
            tonic::include_proto!("imesh.notify.v1");
            include!(concat!(env!("OUT_DIR"), "/imesh.notify.v1.serde.rs"));
        }
    }
    pub mod gateway {
        pub mod v1 {
            tonic::include_proto!("imesh.gateway.v1");
            include!(concat!(env!("OUT_DIR"), "/imesh.gateway.v1.serde.rs"));
        }
    }
}

pub use imesh::{gateway::v1 as gateway, group::v1 as group, message::v1 as message};
pub use imesh::{notify::v1 as notify, relation::v1 as relation, sync::v1 as sync};

/// The most sends one `imesh.message.v1.MessageService/SendBatch` call carries: message-svc
/// refuses more, and a gateway batches no more.
pub const MAX_SEND_BATCH: usize = 512;

/// Encoded `FileDescriptorSet` of every imesh proto, for `tonic-reflection`.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/imesh_descriptor.bin"));
