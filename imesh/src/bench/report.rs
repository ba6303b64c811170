//! The end-of-run report: a table for people, the same fields as JSON for machines.

use std::{fmt::Write as _, time::Duration};

use hdrhistogram::Histogram;
use serde::Serialize;

use super::{calls::Calls, procstat::Sample};

#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub scenario: String,
    pub transport: String,
    pub connections: usize,
    pub sends: u64,
    /// Sends refused by a rate limit and retried after the wait it named.
    pub throttled: u64,
    pub expected: u64,
    /// Deliveries that arrived by push.
    pub pushed: u64,
    /// Deliveries only the final pull from the device's cursor found.
    pub pulled: u64,
    /// Expected deliveries that neither push nor pull brought: must be 0.
    pub lost: u64,
    /// The same message arriving twice under different inbox entries: must be 0.
    pub duplicated: u64,
    /// Sends acked out of their sender's order, and pushes of one sender's messages to a
    /// conversation arriving out of seq order: must be 0.
    pub reordered: u64,
    /// Connections the server closed with a fatal error frame (e.g. slow consumers).
    pub closed_by_server: u64,
    /// From the first send to the last delivery.
    pub elapsed_secs: f64,
    pub sends_per_sec: f64,
    pub deliveries_per_sec: f64,
    /// Send → push, for deliveries that arrived by push.
    pub latency: Latency,
    /// Send → push of each conversation's first message, sent before the run.
    pub warmup: Option<Latency>,
    pub server: Option<Server>,
    /// gRPC calls a delivery by method, most first (with `--metrics`).
    pub calls: Vec<Calls>,
    pub receipts: Option<Receipts>,
    pub super_group: Option<SuperGroup>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    pub count: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Self {
        Self {
            count: h.len(),
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p99_us: h.value_at_quantile(0.99),
            max_us: h.max(),
        }
    }
}

/// What the measured server processes spent during the run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Server {
    pub cpu_secs: f64,
    /// CPU time per delivery (pushed or pulled), all measured processes together.
    pub cpu_us_per_delivery: f64,
    /// The same with the stores' CPU added, when their pids were given.
    pub with_stores_cpu_us_per_delivery: Option<f64>,
    pub rss_bytes: u64,
    /// Growth of resident memory per connection while the run's devices were connected.
    pub rss_bytes_per_connection: f64,
    /// Growth of kernel socket and slab memory per connection, machine-wide: both ends of
    /// each connection when the load tool runs on the same machine.
    pub kernel_bytes_per_connection: f64,
    /// The part of it in socket objects (TCP sockets, their inodes, files, dentries and
    /// epoll entries; from /proc/slabinfo, 0 when unreadable): both ends too.
    pub socket_bytes_per_connection: f64,
}

impl Server {
    /// `idle` is a reading before the devices connected, `busy` before the load, `after`
    /// after it.
    pub fn between(
        idle: Sample,
        busy: Sample,
        after: Sample,
        connections: usize,
        deliveries: u64,
    ) -> Self {
        let cpu = after.cpu.saturating_sub(busy.cpu);
        let stores = (after.stores_cpu)
            .zip(busy.stores_cpu)
            .map(|(after, busy)| after.saturating_sub(busy));
        let per_delivery = |cpu: Duration| match deliveries {
            0 => 0.0,
            n => cpu.as_secs_f64() * 1e6 / n as f64,
        };
        let per_connection = |a: u64, b: u64| (b as f64 - a as f64) / connections.max(1) as f64;
        Self {
            cpu_secs: cpu.as_secs_f64(),
            cpu_us_per_delivery: per_delivery(cpu),
            with_stores_cpu_us_per_delivery: stores.map(|stores| per_delivery(cpu + stores)),
            rss_bytes: after.rss_bytes,
            rss_bytes_per_connection: per_connection(idle.rss_bytes, busy.rss_bytes),
            kernel_bytes_per_connection: per_connection(idle.kernel_bytes, busy.kernel_bytes),
            socket_bytes_per_connection: per_connection(idle.socket_bytes, busy.socket_bytes),
        }
    }
}

/// The receipts scenario's own figures.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Receipts {
    pub messages: u64,
    /// MarkRead calls the members made (one per message read).
    pub reads: u64,
    /// ReceiptCount events the sender received.
    pub count_events: u64,
    /// Messages whose count reached every member.
    pub fully_read: u64,
    /// Send → the sender's event saying every member read it.
    pub fully_read_latency: Latency,
}

/// The super group scenario's own figures: its size and how long each query took.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SuperGroup {
    pub members: u64,
    pub online: u64,
    /// Every member page (500 a page), one call at a time.
    pub pages: Latency,
    /// Searches by nickname.
    pub search: Latency,
    /// The 50 most active members.
    pub active: Latency,
}

impl Report {
    pub fn rates(&mut self, elapsed: Duration) {
        let secs = elapsed.as_secs_f64().max(1e-9);
        self.elapsed_secs = secs;
        self.sends_per_sec = self.sends as f64 / secs;
        self.deliveries_per_sec = (self.pushed + self.pulled) as f64 / secs;
    }

    /// The report as an aligned table.
    pub fn table(&self) -> String {
        let mut rows: Vec<(&str, String)> = vec![
            (
                "scenario",
                format!("{} over {}", self.scenario, self.transport),
            ),
            ("connections", self.connections.to_string()),
            (
                "sends",
                format!("{} ({} throttled and retried)", self.sends, self.throttled),
            ),
            (
                "deliveries",
                format!(
                    "{} of {} expected ({} by push, {} by pull)",
                    self.pushed + self.pulled,
                    self.expected,
                    self.pushed,
                    self.pulled
                ),
            ),
            ("lost", self.lost.to_string()),
            ("duplicated", self.duplicated.to_string()),
            ("reordered", self.reordered.to_string()),
            ("closed by server", self.closed_by_server.to_string()),
            ("elapsed", format!("{:.3} s", self.elapsed_secs)),
            ("sends/s", format!("{:.0}", self.sends_per_sec)),
            ("deliveries/s", format!("{:.0}", self.deliveries_per_sec)),
            ("send → push", latency(&self.latency)),
        ];
        if let Some(warmup) = &self.warmup {
            rows.push(("first messages", latency(warmup)));
        }
        if let Some(r) = &self.receipts {
            rows.push((
                "receipts",
                format!(
                    "{} reads, {} count events, {} of {} messages read by all",
                    r.reads, r.count_events, r.fully_read, r.messages
                ),
            ));
            rows.push(("send → read by all", latency(&r.fully_read_latency)));
        }
        if let Some(g) = &self.super_group {
            rows.push((
                "super group",
                format!("{} members, {} online", g.members, g.online),
            ));
            rows.push(("member page", latency(&g.pages)));
            rows.push(("member search", latency(&g.search)));
            rows.push(("active members", latency(&g.active)));
        }
        if let Some(s) = &self.server {
            rows.push((
                "server CPU",
                format!(
                    "{:.3} s, {:.2} µs per delivery{}",
                    s.cpu_secs,
                    s.cpu_us_per_delivery,
                    match s.with_stores_cpu_us_per_delivery {
                        Some(all) => format!("; {all:.2} µs with the stores"),
                        None => String::new(),
                    }
                ),
            ));
            rows.push((
                "server memory",
                format!(
                    "{:.1} MiB RSS; per connection {:.0} B RSS + {:.0} B kernel{} \
                     (machine-wide: both ends when the tool runs beside the server)",
                    s.rss_bytes as f64 / 1048576.0,
                    s.rss_bytes_per_connection,
                    s.kernel_bytes_per_connection,
                    match s.socket_bytes_per_connection {
                        0.0 => String::new(),
                        sockets => format!(", {sockets:.0} B of it socket objects"),
                    }
                ),
            ));
        }
        if !self.calls.is_empty() {
            let calls: Vec<String> = (self.calls.iter())
                .map(|c| format!("{} {:.4}", c.method, c.per_delivery))
                .collect();
            rows.push(("calls a delivery", calls.join(", ")));
        }
        let mut out = String::new();
        for (name, value) in rows {
            let _ = writeln!(out, "{name:>18}  {value}");
        }
        out
    }
}

fn latency(l: &Latency) -> String {
    if l.count == 0 {
        return "none measured".into();
    }
    format!(
        "p50 {} µs, p90 {} µs, p99 {} µs, max {} µs ({} samples)",
        l.p50_us, l.p90_us, l.p99_us, l.max_us, l.count
    )
}
