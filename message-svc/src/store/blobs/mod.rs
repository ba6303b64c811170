//! The [`Blobs`](crate::domain::Blobs) adapters: S3 (or any S3-compatible server) for
//! deployments, files under a folder the gateway serves for the embedded default.

mod local;
mod s3;
#[cfg(test)]
mod tests;

pub use local::LocalBlobs;
pub use s3::S3Blobs;

use serde::{Deserialize, Serialize};

/// Where uploaded objects are kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// Files under `local.dir`, served by a gateway sharing the folder.
    #[default]
    Local,
    /// An S3 bucket (or an S3-compatible server's).
    S3,
    /// No files: tickets and downloads are refused (FAILED_PRECONDITION).
    Off,
}

/// The embedded default's store: a folder, and the gateway URL that serves it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct LocalConfig {
    /// The gateway's `files.dir` must be the same folder.
    pub dir: String,
    /// Where clients reach the gateway's `/files` (its HTTP listener, as clients see it).
    pub public_url: String,
}

impl Default for LocalConfig {
    fn default() -> Self {
        Self {
            dir: "data/files".into(),
            public_url: "http://127.0.0.1:8080/files".into(),
        }
    }
}

/// An S3 bucket.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct S3Config {
    /// e.g. `https://s3.eu-west-1.amazonaws.com`, or an S3-compatible server's URL.
    pub endpoint: String,
    pub bucket: String,
    pub region: String,
    pub access_key: imesh_kit::config::Secret,
    pub secret_key: imesh_kit::config::Secret,
    /// `https://<bucket>.<endpoint host>/<key>` URLs instead of `<endpoint>/<bucket>/<key>`.
    pub virtual_host: bool,
    /// Extra CA certificates (PEM) for the endpoint, e.g. a company CA.
    pub ca_file: String,
    /// How long one call to the endpoint (a size check, a delete) may take.
    pub timeout_ms: u64,
}

impl Default for S3Config {
    fn default() -> Self {
        Self {
            endpoint: String::new(),
            bucket: String::new(),
            region: "us-east-1".into(),
            access_key: Default::default(),
            secret_key: Default::default(),
            virtual_host: false,
            ca_file: String::new(),
            timeout_ms: 5_000,
        }
    }
}
