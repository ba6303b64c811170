//! The command line: `imesh up`, every service in one process on the embedded default;
//! `imesh bench`, load through a running deployment's gateway, and a report.

use std::{
    net::IpAddr,
    path::{Path, PathBuf},
};

use crate::cluster::{Cluster, ClusterSpec};
use clap::{Parser, Subcommand};
use imesh_kit::config::{AuthConfig, Secret, TelemetryConfig};
use imesh_kit::tls::TlsConfig;
use serde::{Deserialize, Serialize};

#[derive(Parser)]
#[command(name = "imesh", version, about = "An instant-messaging backend")]
struct Cli {
    /// A TOML file with settings; `IMESH__…` environment variables override it.
    #[arg(long, global = true, env = "IMESH_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs every service in one process: SQLite under the data folder, in-process adapters.
    Up {
        /// Where the SQLite files and the generated dev secrets live.
        #[arg(long)]
        data: Option<PathBuf>,
        /// The address to listen on.
        #[arg(long)]
        host: Option<IpAddr>,
        /// Serve wss:// and TLS on the TCP port with a self-signed certificate for
        /// localhost, made once and kept in the data folder (for local trials).
        #[arg(long)]
        tls_self_signed: bool,
    },
    /// Drives a named scenario through a gateway with real connections and reports
    /// throughput, send → push latency, losses and duplicates (and server cost with --pid).
    Bench(Box<crate::bench::Spec>),
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(default)]
struct UpSettings {
    auth: AuthConfig,
    telemetry: TelemetryConfig,
    data_dir: PathBuf,
    /// `host`, `ports`, and each service's settings as its own program reads them, in a
    /// section named for it: `[relation]`, `[group]`, `[message]`, `[sync]`, `[notify]`,
    /// `[gateway]` (their addresses are `imesh up`'s own).
    #[serde(flatten)]
    cluster: ClusterSpec,
}

impl Default for UpSettings {
    fn default() -> Self {
        Self {
            auth: AuthConfig::default(),
            telemetry: TelemetryConfig {
                log: "info,sqlx=warn,sea_orm_migration=warn".into(),
                ..Default::default()
            },
            data_dir: PathBuf::from("data"),
            cluster: ClusterSpec::default(),
        }
    }
}

/// Runs the command the process's arguments name.
pub async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let (data, host, tls_self_signed) = match cli.command {
        Command::Up {
            data,
            host,
            tls_self_signed,
        } => (data, host, tls_self_signed),
        Command::Bench(spec) => return bench(*spec).await,
    };
    let mut settings: UpSettings = imesh_kit::config::load(cli.config.as_deref())
        .unwrap_or_else(|e| imesh_kit::cli::exit("imesh", e));
    settings.data_dir = data.unwrap_or(settings.data_dir);
    settings.cluster.host = host.unwrap_or(settings.cluster.host);
    let _telemetry = imesh_kit::telemetry::init("imesh", &settings.telemetry)?;
    std::fs::create_dir_all(&settings.data_dir)?;
    let auth = dev_secrets(&settings.data_dir, settings.auth)?;
    let mut spec = settings.cluster;
    if tls_self_signed {
        let (cert, key) = self_signed_certificate(&settings.data_dir, spec.host)?;
        spec.gateway.tls.cert_file = cert.display().to_string();
        spec.gateway.tls.key_file = key.display().to_string();
    }
    let tls = spec.gateway.tls.clone();
    spec.auth = auth.clone();
    spec.store_under(&settings.data_dir);
    let cluster = Cluster::start(spec).await?;
    print_banner(&cluster, &auth, &settings.data_dir, &tls);
    cluster.run_until(imesh_kit::grpc::shutdown_signal()).await
}

async fn bench(spec: crate::bench::Spec) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    let report = crate::bench::run(spec, std::io::stderr().is_terminal()).await?;
    print!("{}", report.table());
    anyhow::ensure!(
        report.lost == 0 && report.duplicated == 0 && report.reordered == 0,
        "{} lost, {} duplicated and {} reordered deliveries",
        report.lost,
        report.duplicated,
        report.reordered
    );
    Ok(())
}

/// Secrets not configured are generated once and kept in the data folder, so tokens stay
/// valid across restarts of the embedded default.
fn dev_secrets(data_dir: &Path, mut auth: AuthConfig) -> anyhow::Result<AuthConfig> {
    let path = data_dir.join("dev-secrets");
    let stored = std::fs::read_to_string(&path).unwrap_or_default();
    let mut lines = stored.lines().map(str::to_owned);
    let (internal, jwt) = match (lines.next(), lines.next()) {
        (Some(a), Some(b)) if a.len() >= 16 && b.len() >= 16 => (a, b),
        _ => {
            let (a, b) = (random_secret(), random_secret());
            write_private(&path, format!("{a}\n{b}\n").as_bytes())?;
            (a, b)
        }
    };
    if auth.internal_secret.is_empty() {
        auth.internal_secret = Secret::new(internal);
    }
    if auth.jwt_secret.is_empty() {
        auth.jwt_secret = Secret::new(jwt);
    }
    auth.validate().map_err(anyhow::Error::msg)?;
    Ok(auth)
}

/// A self-signed certificate for localhost and `host`, made once and kept in `data_dir`:
/// the certificate's and the key's paths.
fn self_signed_certificate(data_dir: &Path, host: IpAddr) -> anyhow::Result<(PathBuf, PathBuf)> {
    let (cert, key) = (data_dir.join("tls-cert.pem"), data_dir.join("tls-key.pem"));
    if !(cert.exists() && key.exists()) {
        let names = vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
            host.to_string(),
        ];
        let made = rcgen::generate_simple_self_signed(names)?;
        write_private(&key, made.signing_key.serialize_pem().as_bytes())?;
        std::fs::write(&cert, made.cert.pem())?;
    }
    Ok((cert, key))
}

/// Writes a file only its owner may read (secrets and private keys).
fn write_private(path: &Path, contents: &[u8]) -> anyhow::Result<()> {
    use std::{io::Write, os::unix::fs::OpenOptionsExt};

    use anyhow::Context as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    file.write_all(contents)?;
    Ok(())
}

fn random_secret() -> String {
    use rand::Rng;
    let bytes: [u8; 16] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn print_banner(cluster: &Cluster, auth: &AuthConfig, data_dir: &Path, tls: &TlsConfig) {
    let a = &cluster.addrs;
    let secret = auth.internal_secret.expose();
    println!(
        "imesh is up (embedded: SQLite under {}, in-process counters and presence)\n",
        data_dir.display()
    );
    let (scheme, over) = if tls.enabled() {
        ("wss", ", over TLS")
    } else {
        ("ws", "")
    };
    println!("  gateway        {scheme}://{}/ws", a.gateway);
    let page = if tls.enabled() { "https" } else { "http" };
    println!("  web demo       {page}://{}/", a.gateway);
    println!(
        "  gateway (tcp)  {} (12-byte header per frame{over})",
        a.gateway_tcp
    );
    if tls.enabled() {
        println!("  certificate    {} (trust it in clients)", tls.cert_file);
    }
    for (name, addr) in [
        ("relation-svc", a.relation),
        ("group-svc", a.group),
        ("message-svc", a.message),
        ("sync-svc", a.sync),
        ("notify-svc", a.notify),
        ("gateway (push)", a.gateway_grpc),
    ] {
        println!("  {name:<14} {addr}");
    }
    println!("\n  internal credential (x-imesh-internal): {secret}\n");
    println!("Try:");
    println!("  grpcurl -plaintext {} list", a.relation);
    println!(
        "  grpcurl -plaintext -H 'x-imesh-internal: {secret}' -d '{{\"username\":\"alice\",\"password\":\"correct horse\"}}' {} imesh.relation.v1.RelationService/Register",
        a.relation
    );
    println!(
        "  grpcurl -plaintext -H 'x-imesh-internal: {secret}' -d '{{\"username\":\"alice\",\"password\":\"correct horse\"}}' {} imesh.relation.v1.RelationService/Login",
        a.relation
    );
    println!(
        "  then open {page}://{}/#token=<the token Login answered>   (the browser demo)",
        a.gateway
    );
    println!("\nCtrl-C stops it.");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_services_settings_are_settings_of_imesh_up() {
        let file = std::env::temp_dir().join(format!("imesh-up-{}.toml", std::process::id()));
        std::fs::write(
            &file,
            "[gateway]\nframes_per_sec = 0\nsends_in_flight = 8\n\
             [gateway.admission]\nsessions_per_user = 3\n[relation.login]\nfree_failures = 2\n\
             [message.rate_limits]\nuser_per_sec = 0\n[sync]\ninbox_retention_hours = 1\n",
        )
        .unwrap();
        let settings: UpSettings = imesh_kit::config::load(Some(&file)).unwrap();
        std::fs::remove_file(&file).unwrap();
        let spec = settings.cluster;
        assert_eq!(spec.gateway.frames_per_sec, 0);
        assert_eq!(spec.gateway.sends_in_flight, 8);
        assert_eq!(spec.gateway.admission.sessions_per_user, 3);
        assert_eq!(spec.relation.login.free_failures, 2);
        assert_eq!(spec.message.rate_limits.user_per_sec, 0);
        assert_eq!(spec.sync.inbox_retention_hours, 1);
        assert_eq!(
            spec.gateway.send_batches_in_flight,
            gateway::Config::default().send_batches_in_flight
        );
        assert_eq!(
            spec.ports.relation, 50051,
            "unset settings keep their defaults"
        );
    }
}
