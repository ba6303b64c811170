//! The named scenarios. Each provisions its users, connects them, drives its load, waits
//! for the deliveries it expects (or the run's deadline), catches every device up by
//! pulling, and reports.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use futures::{StreamExt, TryStreamExt, future::try_join_all, stream};
use imesh_protos::{
    gateway::{Ack, Ping, client_frame::Body as Out, server_frame::Body as In},
    message::{Content, SendRequest, Text, content, send_request::To},
    sync::{MarkReadRequest, ReadMark},
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{
    Device, Run, Scenario, calls,
    procstat::{self, Sample},
    provision::Admin,
    report::{Latency, Receipts, Report, Server},
    tally::{self, Arrival, Timing},
};

mod super_group;

/// Without progress for this long after the last send, the run stops waiting.
const DRAIN: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(10);
/// How often devices ack their cursor.
const ACK_EVERY: Duration = Duration::from_secs(1);
/// Below the gateway's default idle timeout (90 s).
const HEARTBEAT: Duration = Duration::from_secs(30);
/// The gRPC code of a rate-limited request.
const RESOURCE_EXHAUSTED: u32 = 8;

pub(super) async fn run(run: &Run, admin: &Admin) -> anyhow::Result<Report> {
    match run.spec.scenario.clone() {
        Scenario::Direct {
            pairs,
            messages,
            rate,
            window,
            warmup,
        } => direct(run, admin, (pairs, messages, rate, window), warmup, false).await,
        Scenario::Reconnect { pairs, messages } => {
            direct(run, admin, (pairs, messages, 0, 1), false, true).await
        }
        Scenario::Group {
            size,
            groups,
            senders,
            messages,
            rate,
            window,
        } => {
            group(
                run,
                admin,
                (size, groups, senders.min(size)),
                (messages, rate, window),
            )
            .await
        }
        Scenario::Idle {
            connections,
            hold_secs,
        } => idle(run, admin, connections, hold_secs).await,
        Scenario::Receipts { size, messages } => receipts(run, admin, size, messages).await,
        Scenario::Super {
            members,
            online,
            messages,
            rate,
        } => {
            let shape = super_group::Shape {
                members,
                online,
                messages,
                rate,
            };
            super_group::run(run, admin, shape).await
        }
    }
}

/// What the senders did.
#[derive(Default)]
struct Sends {
    sent: AtomicU64,
    throttled: AtomicU64,
    /// Acked sends whose seq is out of their sender's order.
    reordered: AtomicU64,
}

/// The planned sends of one device: to whom, how many, at what pace.
#[derive(Clone)]
struct Plan {
    from: Arc<Device>,
    to: To,
    messages: usize,
    interval: Option<Duration>,
    /// Sends kept in flight at once.
    window: usize,
    receipt: bool,
}

/// The pause between one sender's sends for `rate` sends/s over `senders` senders.
fn interval(rate: u32, senders: usize) -> Option<Duration> {
    (rate > 0).then(|| Duration::from_secs_f64(senders as f64 / f64::from(rate)))
}

fn text(run: &Run) -> Option<Content> {
    Some(Content {
        kind: Some(content::Kind::Text(Text {
            text: tally::stamp(run.anchor),
        })),
    })
}

/// When sender `sender` of `senders` first sends: each a fraction of the interval after
/// the one before, so the offered load is even over time, not a burst of every sender at
/// each tick.
fn phase(every: Duration, sender: usize, senders: usize) -> Duration {
    every.mul_f64(sender as f64 / senders as f64)
}

fn send_request(run: &Run, plan: &Plan, client_msg_id: &str) -> Out {
    Out::Send(SendRequest {
        client_msg_id: client_msg_id.to_owned(),
        to: Some(plan.to),
        content: text(run),
        receipt: plan.receipt,
        ..Default::default()
    })
}

/// Writes the first try of one message now and returns the wait for its answer, which
/// waits out rate limits and rides through reconnects (a retry reuses the
/// `client_msg_id`, so nothing is stored twice) and gives the message's seq. Sends
/// started one after another are written in that order.
async fn start_send<'a>(
    run: &'a Run,
    plan: &'a Plan,
    client_msg_id: String,
    sends: &'a Sends,
) -> impl Future<Output = anyhow::Result<i64>> + 'a {
    let mut client = plan.from.client().await;
    let first = client.start(send_request(run, plan, &client_msg_id)).await;
    async move {
        let mut answer = match first {
            Ok(reply) => reply.await,
            Err(e) => Err(e),
        };
        loop {
            match answer {
                Ok(In::SendAck(ack)) => {
                    sends.sent.fetch_add(1, Ordering::Relaxed);
                    return Ok(ack.seq);
                }
                Ok(In::Error(e)) if e.code == RESOURCE_EXHAUSTED => {
                    sends.throttled.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(e.retry_after_ms.max(10))).await;
                }
                Ok(In::Error(e)) => anyhow::bail!("send refused: {} ({})", e.message, e.field),
                Ok(other) => anyhow::bail!("unexpected reply to send: {other:?}"),
                // The connection went away (the server closed it, or a reconnect is under
                // way): try again on the next, connecting it unless another task did.
                Err(_) if run.left() > Duration::ZERO && client.closed.is_cancelled() => {
                    plan.from.renew(&client, &run.target).await?;
                }
                Err(e) => return Err(e),
            }
            client = plan.from.client().await;
            answer = client
                .request(send_request(run, plan, &client_msg_id))
                .await;
        }
    }
}

/// Runs every plan concurrently, each keeping up to its window of sends in flight;
/// returns each send's seq and start time per plan. Counts in `sends.reordered` the sends
/// whose seq is not above the one sent before them (retried ones included: the gateway
/// holds a conversation's later sends until a refused one comes again).
async fn send_all(
    run: &Run,
    plans: &[Plan],
    sends: &Sends,
    ids: &str,
) -> anyhow::Result<Vec<Vec<(i64, Instant)>>> {
    let start = tokio::time::Instant::now();
    try_join_all(plans.iter().enumerate().map(|(p, plan)| async move {
        let ticks = plan.interval.map(|every| {
            let mut ticks = tokio::time::interval_at(start + phase(every, p, plans.len()), every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks
        });
        let paced = stream::unfold((0, ticks), |(k, mut ticks)| async move {
            if k >= plan.messages || run.left().is_zero() {
                return None;
            }
            if let Some(ticks) = &mut ticks {
                ticks.tick().await;
            }
            Some((k, (k + 1, ticks)))
        });
        // Each first try is written before the next one starts; up to the window of
        // answers are awaited at once.
        let acked: Vec<(i64, Instant)> = paced
            .then(|k| async move {
                let started = Instant::now();
                let answer = start_send(run, plan, format!("{ids}-{p}-{k}"), sends).await;
                (answer, started)
            })
            .map(|(answer, started)| async move { anyhow::Ok((answer.await?, started)) })
            .buffered(plan.window)
            .try_collect()
            .await?;
        let reordered = acked.windows(2).filter(|w| w[1].0 <= w[0].0).count();
        sends
            .reordered
            .fetch_add(reordered as u64, Ordering::Relaxed);
        anyhow::Ok(acked)
    }))
    .await
}

/// Acks each device's cursor every [`ACK_EVERY`] until `stop`, as real clients do.
fn ack_cursors(devices: Vec<Arc<Device>>, stop: CancellationToken) {
    tokio::spawn(async move {
        let mut acked = vec![0i64; devices.len()];
        while !stop.is_cancelled() {
            for (device, acked) in devices.iter().zip(acked.iter_mut()) {
                let cursor = device.tally.cursor();
                if cursor > *acked {
                    let _ = device
                        .client()
                        .await
                        .tell(Out::Ack(Ack { sync_seq: cursor }))
                        .await;
                    *acked = cursor;
                }
            }
            tokio::select! {
                () = stop.cancelled() => {}
                () = tokio::time::sleep(ACK_EVERY) => {}
            }
        }
    });
}

/// Connects each device again whenever its connection ends (the server closed it), until
/// `stop`, as a client does: it pulls what it missed and hears the rest by push.
fn keep_connected(run: &Run, devices: &[Arc<Device>], stop: &CancellationToken) {
    for device in devices {
        let (device, target, stop) = (device.clone(), run.target.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let client = device.client().await;
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = client.closed.cancelled() => {}
                }
                // A refused or failed connection is tried again; a server that stays away
                // shows in the run's own errors and counts.
                if device.renew(&client, &target).await.is_err() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        });
    }
}

/// Waits until `devices` hold `expected` deliveries, progress stalls for [`DRAIN`] after
/// `sent` is done, or the run's deadline passes; returns when the last delivery came.
async fn await_deliveries(
    run: &Run,
    devices: &[Arc<Device>],
    expected: &[u64],
    sent: &AtomicBool,
) -> Instant {
    let total: u64 = expected.iter().sum();
    run.progress.set_message("delivering");
    run.progress.set_position(0);
    run.progress.set_length(total);
    let (mut seen, mut last_change) = (0, Instant::now());
    loop {
        let now: u64 = devices.iter().map(|d| d.tally.received()).sum();
        if now != seen {
            (seen, last_change) = (now, Instant::now());
            run.progress.set_position(now);
        }
        let stalled = sent.load(Ordering::Acquire) && last_change.elapsed() > DRAIN;
        if now >= total || stalled || run.left().is_zero() {
            return last_change;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Pulls every device whose deliveries fall short, then counts the run.
async fn settle(
    run: &Run,
    devices: &[Arc<Device>],
    expected: &[u64],
    report: &mut Report,
) -> anyhow::Result<()> {
    for (device, expected) in devices.iter().zip(expected) {
        let client = device.client().await;
        if client.closed.is_cancelled() {
            device.renew(&client, &run.target).await?;
        } else if device.tally.received() < *expected {
            device.catch_up().await?;
        }
    }
    let mut latency = tally::histogram();
    let mut samples = Vec::new();
    for (device, expected) in devices.iter().zip(expected) {
        let mut counts = device.tally.counts();
        samples.append(&mut counts.samples);
        report.pushed += counts.pushed;
        report.pulled += counts.pulled;
        report.duplicated += counts.duplicates;
        report.reordered += counts.reordered;
        report.lost += expected.saturating_sub(counts.pushed + counts.pulled);
        report.closed_by_server += u64::from(counts.closed_by_server.is_some());
        latency
            .add(&counts.latency)
            .expect("histograms of the same bounds");
    }
    report.expected = expected.iter().sum();
    report.connections = devices.len();
    report.latency = Latency::of(&latency);
    if let Some(path) = &run.spec.latencies {
        write_samples(path, run.anchor, samples)?;
    }
    report.transport = match run.target {
        super::client::Target::Ws(_) => "WebSocket".into(),
        super::client::Target::Tcp(_) => "TCP".into(),
        super::client::Target::Tls(..) => "TCP over TLS".into(),
    };
    Ok(())
}

/// `samples` in the order they were sent, after a line giving the run's start (what `sent`
/// counts from) in Unix µs: each as `<sent µs> <send → push µs> <send → numbered µs>`, the
/// last from message-svc's stamp in whole ms (so up to 1 ms early, and below 0 at times).
fn write_samples(
    path: &std::path::Path,
    anchor: Instant,
    mut samples: Vec<Timing>,
) -> anyhow::Result<()> {
    use std::io::Write as _;
    samples.sort_unstable();
    let started = std::time::SystemTime::now() - anchor.elapsed();
    let started_us = started.duration_since(std::time::UNIX_EPOCH)?.as_micros() as i64;
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(
        out,
        "# run started at {started_us} (Unix µs); then <sent µs> <send → push µs> \
         <send → numbered µs>"
    )?;
    for s in samples {
        let numbered = s.numbered_ms * 1000 - (started_us + s.sent_us as i64);
        writeln!(out, "{} {} {numbered}", s.sent_us, s.took_us)?;
    }
    out.flush()?;
    Ok(())
}

fn sample(run: &Run) -> Option<Sample> {
    if run.spec.pids.is_empty() {
        None
    } else {
        procstat::sample(&run.spec.pids, &run.spec.store_pids)
    }
}

/// Drives `plans` over `devices` (who expect `expected` deliveries each) and reports.
async fn drive(
    run: &Run,
    name: &str,
    devices: &[Arc<Device>],
    plans: Vec<Plan>,
    expected: &[u64],
    idle: Option<Sample>,
    chaos: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
) -> anyhow::Result<(Report, Vec<Vec<(i64, Instant)>>)> {
    // Devices ack and connect again until the run's deliveries are in.
    let run_over = CancellationToken::new();
    ack_cursors(devices.to_vec(), run_over.clone());
    keep_connected(run, devices, &run_over);
    // The pages are read outside the CPU samples: serving them is not the run's work.
    let served = calls::served(&run.spec.metrics).await?;
    let busy = sample(run);
    let sends = Sends::default();
    let sent = AtomicBool::new(false);
    let started = Instant::now();
    let sending = async {
        let seqs = send_all(run, &plans, &sends, &run.id).await;
        sent.store(true, Ordering::Release);
        seqs
    };
    let (seqs, last) = tokio::join!(sending, await_deliveries(run, devices, expected, &sent));
    let seqs = seqs?;
    if let Some(chaos) = chaos {
        chaos.await??;
    }
    run_over.cancel();
    let mut report = Report {
        scenario: name.into(),
        sends: sends.sent.load(Ordering::Relaxed),
        throttled: sends.throttled.load(Ordering::Relaxed),
        reordered: sends.reordered.load(Ordering::Relaxed),
        ..Default::default()
    };
    settle(run, devices, expected, &mut report).await?;
    report.rates(last.saturating_duration_since(started));
    let done = sample(run);
    let deliveries = report.pushed + report.pulled;
    let now_served = calls::served(&run.spec.metrics).await?;
    report.calls = calls::per_delivery(&served, &now_served, deliveries);
    if let (Some(idle), Some(busy), Some(after)) = (idle, busy, done) {
        report.server = Some(Server::between(
            idle,
            busy,
            after,
            devices.len(),
            deliveries,
        ));
    }
    Ok((report, seqs))
}

/// Sends each plan's first message, at the plan's pace, and waits until every device
/// holds its peer's (or the run's time is up): the conversations exist and the caches
/// along the way hold them. Returns the messages' send → push.
async fn warm_up(run: &Run, devices: &[Arc<Device>], plans: &[Plan]) -> anyhow::Result<Latency> {
    run.progress.set_message("warming up");
    let firsts: Vec<Plan> = (plans.iter())
        .map(|plan| Plan {
            messages: 1,
            ..plan.clone()
        })
        .collect();
    send_all(run, &firsts, &Sends::default(), &tally::warmup_id(&run.id)).await?;
    let arrived = || devices.iter().all(|d| d.tally.warmed() >= 1);
    while !arrived() && !run.left().is_zero() {
        tokio::time::sleep(POLL).await;
    }
    let mut latency = tally::histogram();
    for device in devices {
        latency
            .add(device.tally.warmup_latency())
            .expect("histograms of the same bounds");
    }
    Ok(Latency::of(&latency))
}

/// `direct` (and `reconnect`, which drops and reconnects every device once, midway).
async fn direct(
    run: &Run,
    admin: &Admin,
    (pairs, messages, rate, window): (usize, usize, u32, usize),
    warmup: bool,
    reconnect: bool,
) -> anyhow::Result<Report> {
    run.progress.set_message("provisioning");
    let users = admin.users(&run.id, pairs * 2).await?;
    run.progress.set_length(users.len() as u64);
    let idle = sample(run);
    let devices = run.connect(users, |_| None).await?;
    let plans: Vec<Plan> = devices
        .iter()
        .enumerate()
        .map(|(i, from)| Plan {
            from: from.clone(),
            to: To::UserId(devices[i ^ 1].user.id),
            messages,
            interval: interval(rate, devices.len()),
            window: window.max(1),
            receipt: false,
        })
        .collect();
    let warmup = match warmup {
        true => Some(warm_up(run, &devices, &plans).await?),
        false => None,
    };
    let expected = vec![messages as u64; devices.len()];
    let chaos = reconnect.then(|| {
        let (devices, target) = (devices.clone(), run.target.clone());
        let half = messages as u64 / 2;
        tokio::spawn(async move {
            for device in &devices {
                while device.tally.received() < half {
                    tokio::time::sleep(POLL).await;
                }
                device.reconnect(&target).await?;
            }
            anyhow::Ok(())
        })
    });
    let name = if reconnect { "reconnect" } else { "direct" };
    let (report, _) = drive(run, name, &devices, plans, &expected, idle, chaos).await?;
    Ok(Report { warmup, ..report })
}

/// Scenarios measure normal groups, whose members each get the message in their inbox
/// (write fanout); super groups push hints instead and would need other accounting.
fn write_fanout_size(size: usize) -> anyhow::Result<()> {
    anyhow::ensure!(
        (2..=2_000).contains(&size),
        "--size {size}: groups of 2–2,000 members (write fanout) are measured"
    );
    Ok(())
}

/// `group`: `groups` groups of `size` members, `senders` of each sending `messages` at
/// `rate` (all senders together), `window` in flight each.
async fn group(
    run: &Run,
    admin: &Admin,
    (size, groups, senders): (usize, usize, usize),
    (messages, rate, window): (usize, u32, usize),
) -> anyhow::Result<Report> {
    write_fanout_size(size)?;
    run.progress.set_message("provisioning");
    let users = admin.users(&run.id, size * groups).await?;
    let mut group_ids = Vec::with_capacity(groups);
    for members in users.chunks(size) {
        group_ids.push(admin.group(members).await?);
    }
    run.progress.set_length(users.len() as u64);
    let idle = sample(run);
    let devices = run.connect(users, |_| None).await?;
    // As a client does on signing in, each member pulls what its inbox got before (the
    // group's joins): the cursor it acks is contiguous only from there.
    futures::future::try_join_all(devices.iter().map(|d| d.catch_up())).await?;
    let mut plans = Vec::new();
    let mut expected = Vec::with_capacity(devices.len());
    for (members, group_id) in devices.chunks(size).zip(&group_ids) {
        for (i, member) in members.iter().enumerate() {
            let from_others = if i < senders { senders - 1 } else { senders };
            expected.push((from_others * messages) as u64);
            if i < senders {
                plans.push(Plan {
                    from: member.clone(),
                    to: To::GroupId(*group_id),
                    messages,
                    interval: interval(rate, senders * groups),
                    window: window.max(1),
                    receipt: false,
                });
            }
        }
    }
    Ok(drive(run, "group", &devices, plans, &expected, idle, None)
        .await?
        .0)
}

/// `idle`: connections held with heartbeats only; what each one costs the server.
async fn idle(
    run: &Run,
    admin: &Admin,
    connections: usize,
    hold_secs: u64,
) -> anyhow::Result<Report> {
    run.progress.set_message("provisioning");
    let users = admin.users(&run.id, connections).await?;
    run.progress.set_length(users.len() as u64);
    let before = sample(run);
    let started = Instant::now();
    let devices = run.connect(users, |_| None).await?;
    run.progress.set_message("holding");
    let hold_until = Instant::now() + Duration::from_secs(hold_secs).min(run.left());
    let mut next_beat = Instant::now() + HEARTBEAT;
    while Instant::now() < hold_until {
        tokio::time::sleep(
            hold_until
                .min(next_beat)
                .saturating_duration_since(Instant::now()),
        )
        .await;
        if Instant::now() >= next_beat {
            for device in &devices {
                let _ = device.client().await.tell(Out::Ping(Ping {})).await;
            }
            next_beat += HEARTBEAT;
        }
    }
    let held = sample(run);
    let expected = vec![0; devices.len()];
    let mut report = Report {
        scenario: "idle".into(),
        ..Default::default()
    };
    settle(run, &devices, &expected, &mut report).await?;
    report.rates(started.elapsed());
    anyhow::ensure!(
        report.closed_by_server == 0,
        "{} of {} idle connections were closed by the server",
        report.closed_by_server,
        devices.len()
    );
    if let (Some(before), Some(held)) = (before, held) {
        report.server = Some(Server::between(before, held, held, devices.len(), 0));
    }
    Ok(report)
}

/// `receipts`: one sender's receipt messages, read by every member as they arrive.
async fn receipts(
    run: &Run,
    admin: &Admin,
    size: usize,
    messages: usize,
) -> anyhow::Result<Report> {
    write_fanout_size(size)?;
    run.progress.set_message("provisioning");
    let users = admin.users(&run.id, size).await?;
    let group_id = admin.group(&users).await?;
    run.progress.set_length(users.len() as u64);
    let idle = sample(run);
    let mut inboxes = Vec::with_capacity(size);
    let devices = run
        .connect(users, |_| {
            let (tx, rx) = mpsc::unbounded_channel();
            inboxes.push(rx);
            Some(tx)
        })
        .await?;
    let reads = Arc::new(AtomicU64::new(0));
    let mut inboxes = inboxes.into_iter();
    let sender_inbox = inboxes.next().expect("the group has a sender");
    // Every member marks each message read as it arrives.
    for (member, mut inbox) in devices.iter().skip(1).cloned().zip(inboxes) {
        let reads = reads.clone();
        tokio::spawn(async move {
            while let Some(arrival) = inbox.recv().await {
                let Arrival::Message {
                    conversation_id,
                    seq,
                } = arrival
                else {
                    continue;
                };
                let mark = Out::MarkRead(MarkReadRequest {
                    marks: vec![ReadMark {
                        conversation_id,
                        read_seq: seq,
                    }],
                });
                if let Ok(In::MarkRead(_)) = member.client().await.request(mark).await {
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    let counted = Arc::new(parking_lot::Mutex::new(Counted::default()));
    let counting = tokio::spawn(count_receipts(sender_inbox, counted.clone()));
    let plans = vec![Plan {
        from: devices[0].clone(),
        to: To::GroupId(group_id),
        messages,
        interval: None,
        window: 1,
        receipt: true,
    }];
    let mut expected = vec![messages as u64; size];
    expected[0] = 0;
    let (mut report, seqs) = drive(run, "receipts", &devices, plans, &expected, idle, None).await?;
    let sent: Vec<(i64, Instant)> = seqs.into_iter().flatten().collect();
    // The last counts come within a receipt window (about a second) of the last read.
    let wait_until = Instant::now() + DRAIN.min(run.left());
    while Instant::now() < wait_until && counted.lock().full.len() < sent.len() {
        tokio::time::sleep(POLL).await;
    }
    counting.abort();
    let Counted { events, full } = std::mem::take(&mut *counted.lock());
    let mut latency = tally::histogram();
    for (seq, started) in &sent {
        if let Some(at) = full.get(seq) {
            latency.saturating_record(at.saturating_duration_since(*started).as_micros() as u64);
        }
    }
    report.receipts = Some(Receipts {
        messages: sent.len() as u64,
        reads: reads.load(Ordering::Relaxed),
        count_events: events,
        fully_read: full.len() as u64,
        fully_read_latency: Latency::of(&latency),
    });
    Ok(report)
}

/// What the sender heard of its receipt messages.
#[derive(Default)]
struct Counted {
    events: u64,
    /// Seq → when its count first reached every member.
    full: std::collections::HashMap<i64, Instant>,
}

async fn count_receipts(
    mut inbox: mpsc::UnboundedReceiver<Arrival>,
    counted: Arc<parking_lot::Mutex<Counted>>,
) {
    while let Some(arrival) = inbox.recv().await {
        if let Arrival::Receipt(count) = arrival {
            let mut counted = counted.lock();
            counted.events += 1;
            if count.total > 0 && count.read >= count.total {
                counted.full.entry(count.seq).or_insert_with(Instant::now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paced_senders_start_evenly_spread_over_one_interval() {
        let every = Duration::from_millis(100);
        let phases: Vec<u128> = (0..4).map(|p| phase(every, p, 4).as_millis()).collect();
        assert_eq!(phases, vec![0, 25, 50, 75]);
        assert_eq!(interval(2_000, 500), Some(Duration::from_millis(250)));
        assert_eq!(interval(0, 500), None, "0: as fast as replies come");
    }
}
