//! Configuration: every binary reads one typed tree, built from its defaults, then an
//! optional TOML file, then `IMESH__SECTION__KEY` environment variables (the names the Helm
//! chart sets). A bad configuration is one clear error line. The list settings of
//! [`LIST_KEYS`] take comma-separated values from the environment.

use std::{collections::HashSet, fmt, net::SocketAddr, path::Path, time::Duration};

use serde::{Deserialize, de::DeserializeOwned};

/// Settings that are lists, as they are named in the environment's key paths (the gateway
/// binary's and `imesh up`'s).
pub const LIST_KEYS: &[&str] = &[
    "admission.platforms",
    "gateway.admission.platforms",
    "admission.trusted_proxies",
    "gateway.admission.trusted_proxies",
    "auth.jwt_verify_secrets",
    "auth.jwt_public_keys",
    "files.image.mime_types",
    "files.file.mime_types",
    "files.audio.mime_types",
    "files.video.mime_types",
    "files.thumbnail.mime_types",
    "message.files.image.mime_types",
    "message.files.file.mime_types",
    "message.files.audio.mime_types",
    "message.files.video.mime_types",
    "message.files.thumbnail.mime_types",
];

/// Loads `T` from `file` (if given) and the `IMESH__…` environment; absent keys keep
/// `T::default()`'s values. A key that is none of `T`'s settings is named on stderr as
/// ignored (e.g. `IMESH__DATABASE__CHECKPOINT_MS` for `imesh up`, whose databases are
/// `message.database`, `sync.database`, …).
pub fn load<T: DeserializeOwned + Default + serde::Serialize>(
    file: Option<&Path>,
) -> Result<T, config::ConfigError> {
    let defaults = config::Config::try_from(&T::default())?;
    let mut builder = config::Config::builder().add_source(defaults);
    if let Some(file) = file {
        builder = builder.add_source(config::File::from(file).required(true));
    }
    let mut environment = config::Environment::with_prefix("IMESH")
        .prefix_separator("__")
        .separator("__")
        .try_parsing(true)
        .list_separator(",");
    for key in LIST_KEYS {
        environment = environment.with_list_parse_key(key);
    }
    let merged = builder.add_source(environment).build()?;
    // Printed, not logged: logging is set up from what this returns.
    for key in unknown_keys(&T::default(), &merged) {
        let variable = format!("IMESH__{}", key.replace('.', "__").to_uppercase());
        eprintln!("warning: {key} (or {variable}) is not one of this program's settings; ignored");
    }
    merged.try_deserialize()
}

/// The keys `merged` sets that `T` has no setting for: names that would otherwise be
/// ignored without a word, such as a setting under the wrong section.
fn unknown_keys<T: serde::Serialize>(defaults: &T, merged: &config::Config) -> Vec<String> {
    // From serde, not from `config`, which leaves out empty lists.
    fn known(prefix: &str, value: &serde_json::Value, out: &mut HashSet<String>) {
        if let serde_json::Value::Object(fields) = value {
            for (key, value) in fields {
                let path = format!("{prefix}{key}");
                known(&format!("{path}."), value, out);
                out.insert(path);
            }
        }
    }
    fn leaves(prefix: &str, table: config::Map<String, config::Value>, out: &mut Vec<String>) {
        for (key, value) in table {
            let path = format!("{prefix}{key}");
            match value.kind {
                config::ValueKind::Table(inner) => leaves(&format!("{path}."), inner, out),
                _ => out.push(path),
            }
        }
    }
    let mut settings = HashSet::new();
    known(
        "",
        &serde_json::to_value(defaults).unwrap_or_default(),
        &mut settings,
    );
    let mut keys = Vec::new();
    leaves(
        "",
        merged.clone().try_deserialize().unwrap_or_default(),
        &mut keys,
    );
    keys.retain(|key| !settings.contains(key));
    keys.sort();
    keys
}

/// Deserializes a list setting, dropping empty entries: a variable set to "" (the chart's
/// value for an empty list) is an empty list, not a list of one empty value.
pub fn list<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: std::str::FromStr,
    T::Err: fmt::Display,
{
    use serde::de::Error as _;
    Vec::<String>::deserialize(deserializer)?
        .iter()
        .map(|entry| entry.trim())
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            entry
                .parse()
                .map_err(|e| D::Error::custom(format!("{entry:?}: {e}")))
        })
        .collect()
}

/// A value that must not appear in logs or `Debug` output.
#[derive(Clone, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        Ok(Self::new(value))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// Credentials shared by every service of one deployment.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct AuthConfig {
    /// Proves a gRPC call comes from inside the deployment (`x-imesh-internal`).
    pub internal_secret: Secret,
    /// HS256 key of the user tokens relation-svc issues and the gateway verifies.
    pub jwt_secret: Secret,
    /// HS256 keys that verify tokens besides `jwt_secret` (rotation: the next key before it
    /// signs, the last one until its tokens expire).
    #[serde(deserialize_with = "list")]
    pub jwt_verify_secrets: Vec<Secret>,
    /// An Ed25519 private key (PKCS#8 PEM): tokens are signed with it instead of
    /// `jwt_secret`. Only the issuer (relation-svc) needs it.
    pub jwt_private_key: Secret,
    /// Ed25519 public keys (PEM) that verify tokens: the private key's own and any other
    /// still trusted. A gateway holding only these needs no `jwt_secret`.
    #[serde(deserialize_with = "list")]
    pub jwt_public_keys: Vec<String>,
}

impl AuthConfig {
    /// Refuses to start with a missing secret rather than run open: the internal
    /// credential, and a token key (a secret, or Ed25519 public keys).
    pub fn validate(&self) -> Result<(), String> {
        let short = |secret: &Secret| secret.expose().len() < 16;
        if short(&self.internal_secret) {
            return Err(
                "auth.internal_secret must be set to at least 16 characters (IMESH__AUTH__INTERNAL_SECRET)"
                    .into(),
            );
        }
        if self.jwt_public_keys.is_empty() && short(&self.jwt_secret) {
            return Err("auth.jwt_secret must be set to at least 16 characters (IMESH__AUTH__JWT_SECRET), or auth.jwt_public_keys to Ed25519 keys".into());
        }
        if let Some(i) = self
            .jwt_verify_secrets
            .iter()
            .position(|s| !s.is_empty() && short(s))
        {
            return Err(format!(
                "auth.jwt_verify_secrets[{i}] must be at least 16 characters"
            ));
        }
        Ok(())
    }
}

/// How a service's gRPC server listens and protects itself.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct GrpcConfig {
    pub listen: SocketAddr,
    /// Per-request deadline.
    pub timeout_ms: u64,
    /// Requests in flight across all connections; more wait.
    pub concurrency_limit: usize,
    /// How long in-flight requests may take to finish after a shutdown signal.
    pub grace_ms: u64,
    /// Mutual TLS with the other services; off when no certificate is named.
    pub tls: PeerTlsConfig,
}

impl GrpcConfig {
    pub fn on(listen: SocketAddr) -> Self {
        Self {
            listen,
            ..Self::default()
        }
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    pub fn grace(&self) -> Duration {
        Duration::from_millis(self.grace_ms)
    }
}

impl Default for GrpcConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([0, 0, 0, 0], 50051)),
            timeout_ms: 10_000,
            concurrency_limit: 4096,
            grace_ms: 20_000,
            tls: PeerTlsConfig::default(),
        }
    }
}

/// Mutual TLS between services: each presents `cert_file` (for the name `server_name`) and
/// accepts peers whose certificate `ca_file` signed. The server side asks every caller for
/// a certificate and answers UNAUTHENTICATED to service calls without one; health,
/// reflection, `/metrics` and the probes (`/livez`, `/readyz`) answer any TLS client.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct PeerTlsConfig {
    /// This service's certificate chain (PEM, leaf first); empty: plaintext gRPC.
    pub cert_file: String,
    /// Its private key (PEM).
    pub key_file: String,
    /// The CA certificate(s) every service's certificate is signed by (PEM).
    pub ca_file: String,
    /// The DNS name every service's certificate carries; callers check it, whatever
    /// address they dialled (pods are dialled by IP).
    pub server_name: String,
    /// How often the server's certificate files are checked for a change.
    pub reload_secs: u64,
    /// A handshake not done in this long closes the connection.
    pub handshake_timeout_ms: u64,
}

impl Default for PeerTlsConfig {
    fn default() -> Self {
        Self {
            cert_file: String::new(),
            key_file: String::new(),
            ca_file: String::new(),
            server_name: "imesh-internal".to_owned(),
            reload_secs: 10,
            handshake_timeout_ms: 5_000,
        }
    }
}

impl PeerTlsConfig {
    /// Whether mutual TLS is on; an incomplete setting is an error.
    pub fn enabled(&self) -> anyhow::Result<bool> {
        if self.cert_file.is_empty() {
            return Ok(false);
        }
        anyhow::ensure!(
            !self.key_file.is_empty(),
            "grpc.tls.key_file: must be set with grpc.tls.cert_file"
        );
        anyhow::ensure!(
            !self.ca_file.is_empty(),
            "grpc.tls.ca_file: must be set with grpc.tls.cert_file (peers are verified)"
        );
        Ok(true)
    }

    /// The listener side of these settings.
    pub fn listener(&self) -> crate::tls::TlsConfig {
        crate::tls::TlsConfig {
            cert_file: self.cert_file.clone(),
            key_file: self.key_file.clone(),
            reload_secs: self.reload_secs,
            handshake_timeout_ms: self.handshake_timeout_ms,
        }
    }
}

/// The SQL database a service owns.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct SqlConfig {
    /// `sqlite://path?mode=rwc`, `postgres://…` or `mysql://…`.
    pub url: Secret,
    pub max_connections: u32,
    /// SQLite only: how often a connection of its own copies the WAL back into the
    /// database file, in milliseconds (at most an hour), so that no commit does it
    /// (`kit/src/sql/checkpoints.rs`); 0 leaves it to SQLite, inside the commit that fills
    /// 1,000 WAL pages.
    pub checkpoint_ms: u64,
    /// SQLite only: read-only connections beside `max_connections` for the reads that
    /// need not wait behind writes (a send's idempotency lookup, history, inbox pulls);
    /// 0 reads through the main pool.
    pub read_connections: u32,
}

impl Default for SqlConfig {
    fn default() -> Self {
        Self {
            url: Secret::new("sqlite://data/imesh.db?mode=rwc"),
            max_connections: 16,
            checkpoint_ms: 100,
            read_connections: 2,
        }
    }
}

/// Redis, when the deployment has one; absent means in-process adapters.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct RedisConfig {
    /// `redis://host:port/db`; empty selects the in-process adapters.
    pub url: Secret,
    pub pool_size: usize,
}

impl RedisConfig {
    pub fn url(&self) -> Option<&str> {
        (!self.url.is_empty()).then(|| self.url.expose())
    }
}

/// Tracing and export.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct TelemetryConfig {
    /// An `EnvFilter` directive, e.g. `info,imesh=debug`; `RUST_LOG` wins when set.
    pub log: String,
    /// OTLP/gRPC collector, e.g. `http://otel-collector:4317`; empty disables export.
    pub otlp_endpoint: String,
    /// Emit JSON lines instead of human-readable logs.
    pub json: bool,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            log: "info".into(),
            otlp_endpoint: String::new(),
            json: false,
        }
    }
}

/// An HTTP(S) endpoint of the company's app server that imesh calls: every body is signed
/// with HMAC-SHA256 under `secret` (see [`crate::hooks`]). Off while `url` is empty.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct HookConfig {
    /// `https://…` (or `http://…` on a trusted network); empty: off.
    pub url: String,
    /// The key both sides hold; at least 16 characters when `url` is set.
    pub secret: Secret,
    /// How long one call may take.
    pub timeout_ms: u64,
    /// Extra CA certificates (PEM) to trust besides the public roots, e.g. a company CA.
    pub ca_file: String,
}

impl Default for HookConfig {
    fn default() -> Self {
        Self {
            url: String::new(),
            secret: Secret::default(),
            timeout_ms: 2_000,
            ca_file: String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default, Deserialize, serde::Serialize)]
    #[serde(default)]
    struct Settings {
        port: u16,
        message: Section,
    }

    #[derive(Default, Deserialize, serde::Serialize)]
    #[serde(default)]
    struct Section {
        checkpoint_ms: u64,
        peers: Vec<String>,
    }

    #[test]
    fn keys_no_setting_has_are_found_and_known_ones_are_not() {
        let defaults = config::Config::try_from(&Settings::default()).unwrap();
        let file = "port = 1\n\
                    [message]\ncheckpoint_ms = 5\npeers = [\"a\"]\n\
                    [database]\ncheckpoint_ms = 9\n\
                    [message.extra]\nx = 1\n";
        let merged = config::Config::builder()
            .add_source(defaults.clone())
            .add_source(config::File::from_str(file, config::FileFormat::Toml))
            .build()
            .unwrap();

        assert_eq!(
            unknown_keys(&Settings::default(), &merged),
            ["database.checkpoint_ms", "message.extra.x"]
        );
        let settings: Settings = merged.try_deserialize().unwrap();
        assert_eq!(settings.message.checkpoint_ms, 5);
    }
}
