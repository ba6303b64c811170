//! What one device received: each inbox entry once (by `sync_seq`), each bench message once
//! (by `client_msg_id`; the same message under a second `sync_seq` is a duplicate), and the
//! send → push latency of each, from the send time the sender wrote into the text.

use std::{
    collections::{HashMap, HashSet},
    time::Instant,
};

use hdrhistogram::Histogram;
use imesh_protos::{
    message::content::Kind,
    sync::{InboxEntry, ReceiptCount, SyncEvent, sync_event},
};
use parking_lot::Mutex;
use tokio::sync::mpsc;

/// Latencies are kept in microseconds, up to a minute, to three significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

/// The text a bench message carries: when it was sent, in µs since the run's anchor.
pub fn stamp(anchor: Instant) -> String {
    format!("t:{}", anchor.elapsed().as_micros())
}

/// What a scenario hears about as it arrives.
#[derive(Debug)]
pub enum Arrival {
    /// A new bench message from someone else.
    Message { conversation_id: String, seq: i64 },
    /// A receipt message's read count moved (to its sender).
    Receipt(ReceiptCount),
    /// A live hint: a read-fanout conversation reached `latest_seq`, heard `at`.
    Hint {
        conversation_id: String,
        latest_seq: i64,
        at: Instant,
    },
}

pub struct Tally {
    user_id: i64,
    anchor: Instant,
    /// Bench messages are those whose `client_msg_id` starts with this.
    run: String,
    /// And warm-up messages those whose `client_msg_id` starts with this ([`warmup_id`]).
    warmup: String,
    log: Mutex<Log>,
    arrivals: Option<mpsc::UnboundedSender<Arrival>>,
}

#[derive(Default)]
struct Log {
    entries: HashSet<i64>,
    messages: HashSet<String>,
    /// Every entry up to here has arrived.
    contiguous: i64,
    pushed: u64,
    pulled: u64,
    duplicates: u64,
    /// The last pushed seq of each (conversation, sender).
    last_pushed: HashMap<(String, i64), i64>,
    reordered: u64,
    latency: Option<Histogram<u64>>,
    /// Warm-up messages from others, and their send → push.
    warmed: u64,
    warmup_latency: Option<Histogram<u64>>,
    closed_by_server: Option<String>,
    /// Each pushed delivery, when the run keeps them.
    samples: Option<Vec<Timing>>,
}

/// One pushed delivery, as `--latencies` writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timing {
    /// When it was sent, in µs from the run's start.
    pub sent_us: u64,
    /// Send → push, in µs.
    pub took_us: u64,
    /// When message-svc numbered it: the message's server time, in Unix ms.
    pub numbered_ms: i64,
}

/// A device's counts at the end of a run.
pub struct Counts {
    pub pushed: u64,
    pub pulled: u64,
    pub duplicates: u64,
    /// Pushes of one sender's messages to a conversation that came after a later one.
    pub reordered: u64,
    pub latency: Histogram<u64>,
    pub closed_by_server: Option<String>,
    /// Each pushed delivery, if kept (`--latencies`).
    pub samples: Vec<Timing>,
}

impl Tally {
    pub fn new(
        user_id: i64,
        anchor: Instant,
        run: &str,
        keep_samples: bool,
        arrivals: Option<mpsc::UnboundedSender<Arrival>>,
    ) -> Self {
        let log = Log {
            samples: keep_samples.then(Vec::new),
            ..Log::default()
        };
        Self {
            user_id,
            anchor,
            run: run.to_owned(),
            warmup: warmup_id(run),
            log: Mutex::new(log),
            arrivals,
        }
    }

    /// The cursor to ack and to pull after: every entry up to it has arrived.
    pub fn cursor(&self) -> i64 {
        self.log.lock().contiguous
    }

    pub fn pushed(&self, entries: Vec<InboxEntry>) {
        for entry in entries {
            if entry.sync_seq == 0 {
                self.hinted(entry.event); // live only, not an inbox entry
                continue;
            }
            self.take(entry.sync_seq, entry.event, false);
        }
    }

    fn hinted(&self, event: Option<SyncEvent>) {
        let (Some(arrivals), Some(sync_event::Kind::Advanced(hint))) =
            (&self.arrivals, event.and_then(|e| e.kind))
        else {
            return;
        };
        let _ = arrivals.send(Arrival::Hint {
            conversation_id: hint.conversation_id,
            latest_seq: hint.latest_seq,
            at: Instant::now(),
        });
    }

    /// Entries a pull returned: deliveries the pushes missed, if they are new.
    pub fn pulled(&self, entries: Vec<InboxEntry>) {
        for entry in entries {
            self.take(entry.sync_seq, entry.event, true);
        }
    }

    pub fn closed_by_server(&self, why: &str) {
        self.log.lock().closed_by_server = Some(why.to_owned());
    }

    /// Warm-up messages from others this device holds.
    pub fn warmed(&self) -> u64 {
        self.log.lock().warmed
    }

    /// The send → push of the warm-up messages so far, handed over once.
    pub fn warmup_latency(&self) -> Histogram<u64> {
        self.log
            .lock()
            .warmup_latency
            .take()
            .unwrap_or_else(histogram)
    }

    /// New bench messages this device holds (pushed or pulled, each counted once).
    pub fn received(&self) -> u64 {
        let log = self.log.lock();
        log.pushed + log.pulled
    }

    pub fn counts(&self) -> Counts {
        let mut log = self.log.lock();
        Counts {
            pushed: log.pushed,
            pulled: log.pulled,
            duplicates: log.duplicates,
            reordered: log.reordered,
            latency: log.latency.take().unwrap_or_else(histogram),
            closed_by_server: log.closed_by_server.clone(),
            samples: log.samples.take().unwrap_or_default(),
        }
    }

    fn take(&self, sync_seq: i64, event: Option<SyncEvent>, pulled: bool) {
        let now_us = self.anchor.elapsed().as_micros() as u64;
        let arrival = {
            let mut log = self.log.lock();
            if !log.entries.insert(sync_seq) {
                return;
            }
            while log.entries.contains(&(log.contiguous + 1)) {
                log.contiguous += 1;
            }
            match event.and_then(|e| e.kind) {
                Some(sync_event::Kind::Message(m))
                    if m.sender_id != self.user_id && m.client_msg_id.starts_with(&self.warmup) =>
                {
                    log.warmed += 1;
                    if let Some((_, took)) = send_to_push(&m.content, now_us) {
                        let latency = log.warmup_latency.get_or_insert_with(histogram);
                        latency.saturating_record(took);
                    }
                    return;
                }
                Some(sync_event::Kind::Message(m))
                    if m.sender_id != self.user_id && m.client_msg_id.starts_with(&self.run) =>
                {
                    if !log.messages.insert(m.client_msg_id.clone()) {
                        log.duplicates += 1;
                        return;
                    }
                    if pulled {
                        log.pulled += 1;
                    } else {
                        log.pushed += 1;
                        let key = (m.conversation_id.clone(), m.sender_id);
                        let last = log.last_pushed.entry(key).or_default();
                        let out_of_order = m.seq <= *last;
                        *last = (*last).max(m.seq);
                        log.reordered += u64::from(out_of_order);
                        if let Some((sent_us, took)) = send_to_push(&m.content, now_us) {
                            let latency = log.latency.get_or_insert_with(histogram);
                            latency.saturating_record(took);
                            if let Some(samples) = &mut log.samples {
                                samples.push(Timing {
                                    sent_us,
                                    took_us: took,
                                    numbered_ms: m.server_time_ms,
                                });
                            }
                        }
                    }
                    Arrival::Message {
                        conversation_id: m.conversation_id,
                        seq: m.seq,
                    }
                }
                Some(sync_event::Kind::Receipt(count)) => Arrival::Receipt(count),
                _ => return,
            }
        };
        if let Some(arrivals) = &self.arrivals {
            let _ = arrivals.send(arrival);
        }
    }
}

/// The prefix of a run's warm-up messages' client ids: not the run's own, so that they are
/// not counted as its messages.
pub fn warmup_id(run: &str) -> String {
    format!("w{run}")
}

/// When a bench message arriving at `now_us` was sent (its text, `t:<µs>`), and how long
/// it took (at least 1 µs, a histogram's smallest value).
fn send_to_push(
    content: &Option<imesh_protos::message::Content>,
    now_us: u64,
) -> Option<(u64, u64)> {
    let Kind::Text(text) = content.as_ref()?.kind.as_ref()? else {
        return None;
    };
    let sent_us: u64 = text.text.strip_prefix("t:")?.parse().ok()?;
    Some((sent_us, now_us.saturating_sub(sent_us).max(1)))
}
