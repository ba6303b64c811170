//! What the server processes cost, read from Linux's /proc when their pids are given: CPU
//! time (user + system, every thread), resident memory, and the kernel's memory for TCP
//! sockets and slab objects (machine-wide, so only meaningful on a quiet machine).

use std::time::Duration;

/// A reading of the given processes and of the kernel.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    pub cpu: Duration,
    /// The store processes' CPU, their children's included; `None` without stores.
    pub stores_cpu: Option<Duration>,
    pub rss_bytes: u64,
    pub kernel_bytes: u64,
    /// The part of `kernel_bytes` in socket objects (0 when /proc/slabinfo is unreadable).
    pub socket_bytes: u64,
}

/// Reads `pids` and the trees of `stores` now; `None` when /proc cannot tell (not Linux,
/// a pid gone).
pub(super) fn sample(pids: &[u32], stores: &[u32]) -> Option<Sample> {
    let ticks_per_sec = clock_ticks()?;
    let secs = |ticks: u64| Duration::from_secs_f64(ticks as f64 / ticks_per_sec as f64);
    let mut out = Sample::default();
    for pid in pids {
        let stat = Stat::of(*pid)?;
        out.cpu += secs(stat.utime + stat.stime);
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        out.rss_bytes += kib_field(&status, "VmRSS:")? * 1024;
    }
    if !stores.is_empty() {
        out.stores_cpu = Some(secs(tree_ticks(stores)?));
    }
    out.kernel_bytes = kernel_bytes().unwrap_or(0);
    out.socket_bytes = socket_bytes().unwrap_or(0);
    Some(out)
}

/// Whether /proc shows process `pid`.
pub(super) fn running(pid: u32) -> bool {
    Stat::of(pid).is_some()
}

/// The CPU fields of `/proc/<pid>/stat`, in clock ticks.
struct Stat {
    parent: u32,
    utime: u64,
    stime: u64,
    /// Of the children it has reaped.
    children: u64,
}

impl Stat {
    fn of(pid: u32) -> Option<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the parenthesised command name: state is field 3, ppid 4, utime 14,
        // stime 15, cutime 16, cstime 17.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let field = |i: usize| fields.get(i)?.parse::<u64>().ok();
        Some(Self {
            parent: field(1)? as u32,
            utime: field(11)?,
            stime: field(12)?,
            children: field(13)? + field(14)?,
        })
    }
}

/// The CPU of `roots` and of their children, living (e.g. PostgreSQL's backends) or
/// reaped: a reaped child's time is in its parent's, so none is lost between readings.
fn tree_ticks(roots: &[u32]) -> Option<u64> {
    let mut ticks = 0;
    for root in roots {
        let stat = Stat::of(*root)?;
        ticks += stat.utime + stat.stime + stat.children;
    }
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        // A process gone since the listing took its time to its parent.
        if let Some(stat) = Stat::of(pid)
            && roots.contains(&stat.parent)
        {
            ticks += stat.utime + stat.stime;
        }
    }
    Some(ticks)
}

/// Socket buffers (TCP pages in /proc/net/sockstat) plus slab (sockets, inodes, epoll).
fn kernel_bytes() -> Option<u64> {
    let sockstat = std::fs::read_to_string("/proc/net/sockstat").ok()?;
    let tcp_pages: u64 = sockstat
        .lines()
        .find(|l| l.starts_with("TCP:"))?
        .split_whitespace()
        .skip_while(|w| *w != "mem")
        .nth(1)?
        .parse()
        .ok()?;
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    Some(tcp_pages * 4096 + kib_field(&meminfo, "Slab:")? * 1024)
}

/// Slab caches a TCP connection's socket is made of.
const SOCKET_CACHES: [&str; 7] = [
    "TCP",
    "TCPv6",
    "sock_inode_cache",
    "filp",
    "dentry",
    "eventpoll_epi",
    "eventpoll_pwq",
];

/// Bytes in the slab objects of sockets (`/proc/slabinfo`: active objects × object size;
/// readable by root only).
fn socket_bytes() -> Option<u64> {
    let slabinfo = std::fs::read_to_string("/proc/slabinfo").ok()?;
    let bytes = slabinfo
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let name = fields.next()?;
            if !SOCKET_CACHES.contains(&name) {
                return None;
            }
            let active: u64 = fields.next()?.parse().ok()?;
            let size: u64 = fields.nth(1)?.parse().ok()?;
            Some(active * size)
        })
        .sum();
    Some(bytes)
}

fn kib_field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with(name))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// USER_HZ, from `getconf` (100 on every common Linux build).
fn clock_ticks() -> Option<u64> {
    let out = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()?;
    String::from_utf8(out.stdout).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::tree_ticks;

    #[test]
    fn a_stores_children_count_living_and_reaped() {
        let me = std::process::id();
        let before = tree_ticks(&[me]).unwrap();
        let mut child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        // A tenth of a second of the child's CPU, at 100 ticks a second.
        while tree_ticks(&[me]).unwrap() < before + 10 {
            assert!(
                Instant::now() < deadline,
                "the living child's CPU is not counted"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let living = tree_ticks(&[me]).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            tree_ticks(&[me]).unwrap() >= living,
            "a reaped child's CPU stays counted"
        );
    }
}
