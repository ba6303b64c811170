//! What the server processes cost, read from Linux's /proc when their pids are given: CPU
//! time (user + system, every thread), resident memory, and the kernel's memory for TCP
//! sockets and slab objects (machine-wide, so only meaningful on a quiet machine).

use std::time::Duration;

/// A reading of the given processes and of the kernel.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    pub cpu: Duration,
    pub rss_bytes: u64,
    pub kernel_bytes: u64,
    /// The part of `kernel_bytes` in socket objects (0 when /proc/slabinfo is unreadable).
    pub socket_bytes: u64,
}

/// Reads `pids` now; `None` when /proc cannot tell (not Linux, a pid gone).
pub(super) fn sample(pids: &[u32]) -> Option<Sample> {
    let ticks_per_sec = clock_ticks()?;
    let mut out = Sample::default();
    for pid in pids {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
        let rest = stat.rsplit_once(')')?.1;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let utime: u64 = fields.get(11)?.parse().ok()?;
        let stime: u64 = fields.get(12)?.parse().ok()?;
        out.cpu += Duration::from_secs_f64((utime + stime) as f64 / ticks_per_sec as f64);
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        out.rss_bytes += kib_field(&status, "VmRSS:")? * 1024;
    }
    out.kernel_bytes = kernel_bytes().unwrap_or(0);
    out.socket_bytes = socket_bytes().unwrap_or(0);
    Some(out)
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
