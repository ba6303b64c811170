//! `imesh bench`: load through a real gateway with real client connections, and a report.
//!
//! A run provisions its own users and groups through the admin path ([`provision`]),
//! connects every device over WebSocket or TCP ([`client`]), runs one [`Scenario`]
//! ([`scenarios`]) bounded in count and time, then catches every device up by pulling from
//! its cursor and counts, per device, what arrived by push, what only a pull found, what
//! never arrived and what arrived twice ([`tally`]). Server CPU and memory come from /proc
//! when the server's pids are given ([`procstat`]).

pub mod calls;
pub mod client;
mod procstat;
mod provision;
mod report;
mod scenarios;
pub mod tally;

use std::{
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use imesh_protos::{
    gateway::{client_frame::Body as Out, server_frame::Body as In},
    sync::PullRequest,
};
use tokio::sync::RwLock;

pub use self::report::Report;
use self::{
    client::{Client, Target},
    provision::User,
    tally::{Arrival, Tally},
};

/// Where the deployment is and how to reach it.
#[derive(Debug, Clone, clap::Args)]
pub struct Spec {
    /// The gateway: `ws://host:port/ws` (WebSocket), `tcp://host:port` (framed TCP) or
    /// `tls://host:port` (framed TCP over TLS, trusting `--ca`).
    #[arg(long, default_value = "ws://127.0.0.1:8080/ws")]
    pub gateway: String,
    /// The certificate (PEM) a `tls://` gateway is trusted by, e.g. the one
    /// `imesh up --tls-self-signed` keeps in its data folder.
    #[arg(long)]
    pub ca: Option<PathBuf>,
    /// relation-svc, for users and tokens.
    #[arg(long, default_value = "127.0.0.1:50051")]
    pub relation: String,
    /// group-svc, for groups.
    #[arg(long, default_value = "127.0.0.1:50052")]
    pub group: String,
    /// The internal credential (`imesh up` prints it and keeps it in `<data>/dev-secrets`).
    #[arg(long, env = "IMESH__AUTH__INTERNAL_SECRET", hide_env_values = true)]
    pub secret: String,
    /// Server processes on this machine to measure (CPU, memory); repeat for several.
    #[arg(long = "pid")]
    pub pids: Vec<u32>,
    /// Stores beside them (PostgreSQL's postmaster, redis-server): their CPU, their
    /// children's included, is added to the servers' as "with the stores"; repeatable.
    #[arg(long = "store-pid")]
    pub store_pids: Vec<u32>,
    /// A service's Prometheus page, on its gRPC port (`http://127.0.0.1:50053/metrics`):
    /// the run reports the gRPC calls each method served a delivery, how well each hop
    /// batched. Repeat for every service (`imesh up`'s are on 50051–50056).
    #[arg(long = "metrics")]
    pub metrics: Vec<String>,
    /// The whole run stops after this long, whatever is left.
    #[arg(long, default_value_t = 120)]
    pub max_secs: u64,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also write each of the run's pushed deliveries to this file, in the order they were
    /// sent: `<sent> <send → push>` in µs, sent counted from the run's start (the first
    /// line gives it in Unix µs). To see when in a run the slow ones were sent.
    #[arg(long)]
    pub latencies: Option<PathBuf>,
    /// Devices connecting at once.
    #[arg(long, default_value_t = 64)]
    pub connect_concurrency: usize,
    #[command(subcommand)]
    pub scenario: Scenario,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum Scenario {
    /// P online pairs; each side sends M messages to its peer.
    Direct {
        #[arg(long, default_value_t = 100)]
        pairs: usize,
        #[arg(long, default_value_t = 20)]
        messages: usize,
        /// Sends per second over all senders (0: each sender as fast as replies come).
        #[arg(long, default_value_t = 0)]
        rate: u32,
        /// Sends each sender keeps in flight (pipelined, not waiting for each ack).
        #[arg(long, default_value_t = 1)]
        window: usize,
        /// First send each conversation's first message, at the same pace, and wait until
        /// all arrive; their latency is reported on its own line, the run's figures then
        /// describe conversations under way. `--warmup false` measures from the start.
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        warmup: bool,
    },
    /// Groups of G online members; S senders per group send K messages each.
    Group {
        #[arg(long, default_value_t = 100)]
        size: usize,
        #[arg(long, default_value_t = 1)]
        groups: usize,
        #[arg(long, default_value_t = 1)]
        senders: usize,
        #[arg(long, default_value_t = 20)]
        messages: usize,
        #[arg(long, default_value_t = 0)]
        rate: u32,
        /// Sends each sender keeps in flight (pipelined, not waiting for each ack).
        #[arg(long, default_value_t = 1)]
        window: usize,
    },
    /// C authenticated connections held idle for T seconds: memory per connection.
    Idle {
        #[arg(long, default_value_t = 1000)]
        connections: usize,
        #[arg(long, default_value_t = 10)]
        hold_secs: u64,
    },
    /// One group of G members; one sender sends K receipt messages and every member reads
    /// each as it arrives; the sender waits for every count to reach G-1.
    Receipts {
        #[arg(long, default_value_t = 200)]
        size: usize,
        #[arg(long, default_value_t = 10)]
        messages: usize,
    },
    /// One super group of N members (the first `online` of them real users, connected;
    /// the rest synthetic ids); its owner sends K messages (at R/s, 0: one after another).
    /// Measures send → live hint on every online member, then member pages, search and
    /// the most active members over the whole group.
    Super {
        #[arg(long, default_value_t = 100_000)]
        members: usize,
        #[arg(long, default_value_t = 1_000)]
        online: usize,
        #[arg(long, default_value_t = 20)]
        messages: usize,
        #[arg(long, default_value_t = 0)]
        rate: u32,
    },
    /// Like `direct`, with every device dropped and reconnected once mid-run.
    Reconnect {
        #[arg(long, default_value_t = 50)]
        pairs: usize,
        #[arg(long, default_value_t = 20)]
        messages: usize,
    },
}

/// A device of the run: its user, its tally, and its current connection (replaced when it
/// reconnects).
pub struct Device {
    pub user: User,
    device_id: String,
    pub tally: Arc<Tally>,
    client: RwLock<Arc<Client>>,
}

impl Device {
    pub async fn client(&self) -> Arc<Client> {
        self.client.read().await.clone()
    }

    /// Drops the connection, connects again and pulls what arrived meanwhile.
    pub async fn reconnect(&self, target: &Target) -> anyhow::Result<()> {
        self.replace(None, target).await
    }

    /// Connects again, as a client does, when `lost` (closed by the server, or dropped) is
    /// still the device's connection; when another task already replaced it, does nothing.
    pub async fn renew(&self, lost: &Arc<Client>, target: &Target) -> anyhow::Result<()> {
        self.replace(Some(lost), target).await
    }

    /// Replaces the connection (only while it is still `expected`, when given), then pulls.
    async fn replace(&self, expected: Option<&Arc<Client>>, target: &Target) -> anyhow::Result<()> {
        let mut current = self.client.write().await;
        if expected.is_some_and(|expected| !Arc::ptr_eq(expected, &current)) {
            return Ok(());
        }
        current.close();
        let fresh = Client::connect(
            target,
            &self.user.token,
            &self.device_id,
            self.tally.clone(),
        )
        .await?;
        *current = Arc::new(fresh);
        drop(current);
        self.catch_up().await
    }

    /// Pulls every inbox entry after the cursor, until the inbox has no more.
    pub async fn catch_up(&self) -> anyhow::Result<()> {
        let client = self.client().await;
        loop {
            let pull = Out::Pull(PullRequest {
                after_sync_seq: self.tally.cursor(),
                limit: 500,
            });
            match client.request(pull).await? {
                In::Pull(page) => {
                    let more = page.has_more && !page.entries.is_empty();
                    self.tally.pulled(page.entries);
                    if !more {
                        return Ok(());
                    }
                }
                In::Error(e) => anyhow::bail!("pull refused: {}", e.message),
                other => anyhow::bail!("unexpected reply to pull: {other:?}"),
            }
        }
    }
}

/// What every scenario shares.
pub struct Run {
    pub spec: Spec,
    pub target: Target,
    pub anchor: Instant,
    /// Prefix of every username and client_msg_id of this run.
    pub id: String,
    pub deadline: Instant,
    pub progress: indicatif::ProgressBar,
}

impl Run {
    /// Connects one device per user; `arrivals` for the users whose tally should report.
    pub async fn connect(
        &self,
        users: Vec<User>,
        mut arrivals: impl FnMut(usize) -> Option<tokio::sync::mpsc::UnboundedSender<Arrival>>,
    ) -> anyhow::Result<Vec<Arc<Device>>> {
        use futures::{StreamExt, TryStreamExt};
        self.progress.set_message("connecting");
        let prepared: Vec<(User, Arc<Tally>)> = users
            .into_iter()
            .enumerate()
            .map(|(i, user)| {
                let keep = self.spec.latencies.is_some();
                let tally = Tally::new(user.id, self.anchor, &self.id, keep, arrivals(i));
                (user, Arc::new(tally))
            })
            .collect();
        futures::stream::iter(prepared)
            .map(|(user, tally)| async move {
                let device_id = format!("{}-d{}", self.id, user.id);
                let client =
                    Client::connect(&self.target, &user.token, &device_id, tally.clone()).await?;
                self.progress.inc(1);
                anyhow::Ok(Arc::new(Device {
                    user,
                    device_id,
                    tally,
                    client: RwLock::new(Arc::new(client)),
                }))
            })
            .buffered(self.spec.connect_concurrency.max(1))
            .try_collect()
            .await
    }

    /// Time left before the run's hard stop.
    pub fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }
}

/// Runs `spec`'s scenario to its end and reports it. `progress` shows a bar on stderr.
pub async fn run(spec: Spec, progress: bool) -> anyhow::Result<Report> {
    let target = Target::parse(&spec.gateway, spec.ca.as_deref())?;
    for (flag, pids) in [("--pid", &spec.pids), ("--store-pid", &spec.store_pids)] {
        if let Some(pid) = pids.iter().find(|pid| !procstat::running(**pid)) {
            anyhow::bail!("{flag} {pid}: no such process on this machine to measure");
        }
    }
    // A page that cannot be read now would fail the run at its end.
    calls::served(&spec.metrics).await?;
    // The files are written after the run: one that cannot be must not cost the run.
    for (flag, path) in [("--json", &spec.json), ("--latencies", &spec.latencies)] {
        if let Some(path) = path {
            std::fs::File::create(path)
                .map_err(|e| anyhow::anyhow!("{flag} {}: {e}", path.display()))?;
        }
    }
    let bar = if progress {
        indicatif::ProgressBar::new(0).with_style(
            indicatif::ProgressStyle::with_template("{spinner} {msg:<12} {wide_bar} {pos}/{len}")
                .expect("a valid progress template"),
        )
    } else {
        indicatif::ProgressBar::hidden()
    };
    let run = Run {
        deadline: Instant::now() + Duration::from_secs(spec.max_secs),
        anchor: Instant::now(),
        id: format!("b{:08x}", rand::random::<u32>()),
        target,
        progress: bar,
        spec,
    };
    let admin = provision::Admin::new(&run.spec.relation, &run.spec.group, &run.spec.secret)?;
    let report = scenarios::run(&run, &admin).await;
    run.progress.finish_and_clear();
    let report = report?;
    if let Some(path) = &run.spec.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)?;
    }
    Ok(report)
}
