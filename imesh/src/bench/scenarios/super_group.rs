//! `super`: one super group of up to 100,000 members, a thousand of them online. The owner
//! sends; every online member hears of each message by a live hint (read fanout: no inbox
//! entry, the client fetches by seq). Then member pages over the whole group, searches
//! and the most active members, timed one call at a time.

use std::{sync::Arc, time::Instant};

use imesh_protos::group::{ActiveMembersRequest, ListMembersRequest, SearchMembersRequest};
use parking_lot::Mutex;
use tokio::sync::mpsc;

use super::{DRAIN, POLL, Plan, Sends, To, interval, sample, send_all, settle};
use crate::bench::{
    Run,
    provision::Admin,
    report::{Latency, Report, Server, SuperGroup},
    tally::{self, Arrival},
};

/// A member's live hints of the group: (latest seq, when heard).
type Heard = Arc<Mutex<Vec<(i64, Instant)>>>;

/// Timed calls of each query kind.
const QUERIES: usize = 50;

/// The run's shape: members in all, online members, messages, sends/s.
pub(super) struct Shape {
    pub members: usize,
    pub online: usize,
    pub messages: usize,
    pub rate: u32,
}

pub(super) async fn run(run: &Run, admin: &Admin, shape: Shape) -> anyhow::Result<Report> {
    anyhow::ensure!(
        shape.online >= 2,
        "--online: the owner and at least one member"
    );
    run.progress.set_message("provisioning");
    let users = admin.users(&run.id, shape.online).await?;
    let group_id = admin.super_group(&users, shape.members).await?;
    run.progress.set_length(users.len() as u64);
    let idle = sample(run);
    let heard: Vec<Heard> = (0..users.len()).map(|_| Arc::default()).collect();
    let mut inboxes = Vec::with_capacity(users.len());
    let devices = run
        .connect(users, |_| {
            let (tx, rx) = mpsc::unbounded_channel();
            inboxes.push(rx);
            Some(tx)
        })
        .await?;
    let conversation = format!("g:{group_id}");
    for (mut inbox, heard) in inboxes.into_iter().zip(heard.iter().cloned()) {
        let conversation = conversation.clone();
        tokio::spawn(async move {
            while let Some(arrival) = inbox.recv().await {
                if let Arrival::Hint {
                    conversation_id,
                    latest_seq,
                    at,
                } = arrival
                    && conversation_id == conversation
                {
                    heard.lock().push((latest_seq, at));
                }
            }
        });
    }

    let busy = sample(run);
    let plans = vec![Plan {
        from: devices[0].clone(),
        to: To::GroupId(group_id),
        messages: shape.messages,
        interval: interval(shape.rate, 1),
        window: 1,
        receipt: false,
    }];
    let sends = Sends::default();
    let started = Instant::now();
    let sent: Vec<(i64, Instant)> = send_all(run, &plans, &sends, &run.id).await?.concat();
    let last = sent.iter().map(|(seq, _)| *seq).max().unwrap_or(0);
    // Every member but the sender hears of the last seq, or the run stops waiting.
    run.progress.set_message("hinting");
    let members = &heard[1..];
    let wait_until = Instant::now() + DRAIN.min(run.left());
    let reached = |h: &Mutex<Vec<(i64, Instant)>>| h.lock().iter().any(|(s, _)| *s >= last);
    while Instant::now() < wait_until && !members.iter().all(|h| reached(h)) {
        tokio::time::sleep(POLL).await;
    }
    let after = sample(run);

    // Each sent message counts as delivered to a member at the first hint at or past it.
    let mut latency = tally::histogram();
    let (mut delivered, mut missing, mut done) = (0u64, 0u64, started);
    for member in members {
        let hints = member.lock().clone();
        for (seq, sent_at) in &sent {
            let first = hints
                .iter()
                .filter(|(s, at)| s >= seq && at >= sent_at)
                .map(|(_, at)| *at)
                .min();
            match first {
                Some(at) => {
                    delivered += 1;
                    done = done.max(at);
                    latency.saturating_record(at.duration_since(*sent_at).as_micros() as u64);
                }
                None => missing += 1,
            }
        }
    }
    let mut report = Report {
        scenario: "super".into(),
        sends: sent.len() as u64,
        ..Default::default()
    };
    let expected = vec![0; devices.len()];
    settle(run, &devices, &expected, &mut report).await?;
    report.expected = delivered + missing;
    report.pushed = delivered;
    report.lost = missing;
    report.latency = Latency::of(&latency);
    report.rates(done.saturating_duration_since(started));
    if let (Some(idle), Some(busy), Some(after)) = (idle, busy, after) {
        report.server = Some(Server::between(idle, busy, after, devices.len(), delivered));
    }

    run.progress.set_message("querying");
    let reader = devices[1].user.id;
    let names: Vec<String> = (0..QUERIES)
        .map(|i| format!("{}-{}", run.id, 1 + i * (shape.online - 1) / QUERIES))
        .collect();
    report.super_group = Some(SuperGroup {
        members: shape.members as u64,
        online: shape.online as u64,
        pages: pages(admin, reader, group_id).await?,
        search: search(admin, reader, group_id, &names).await?,
        active: active(admin, reader, group_id).await?,
    });
    Ok(report)
}

/// Every member page of the group, 500 a page, one after another.
async fn pages(admin: &Admin, reader: i64, group_id: i64) -> anyhow::Result<Latency> {
    let mut latency = tally::histogram();
    let mut cursor = 0;
    loop {
        let list = ListMembersRequest {
            group_id,
            cursor,
            limit: 500,
        };
        let (mut groups, request) = admin.groups_as(reader, list);
        let (page, took) = timed(groups.list_members(request)).await;
        latency.saturating_record(took);
        cursor = page?.into_inner().next_cursor;
        if cursor == 0 {
            return Ok(Latency::of(&latency));
        }
    }
}

/// One search per name; each must find its member.
async fn search(
    admin: &Admin,
    reader: i64,
    group_id: i64,
    names: &[String],
) -> anyhow::Result<Latency> {
    let mut latency = tally::histogram();
    for name in names {
        let search = SearchMembersRequest {
            group_id,
            query: name.clone(),
            limit: 20,
        };
        let (mut groups, request) = admin.groups_as(reader, search);
        let (found, took) = timed(groups.search_members(request)).await;
        anyhow::ensure!(
            !found?.into_inner().members.is_empty(),
            "searching {name:?} found nobody"
        );
        latency.saturating_record(took);
    }
    Ok(Latency::of(&latency))
}

async fn active(admin: &Admin, reader: i64, group_id: i64) -> anyhow::Result<Latency> {
    let mut latency = tally::histogram();
    for _ in 0..QUERIES {
        let active = ActiveMembersRequest {
            group_id,
            limit: 50,
        };
        let (mut groups, request) = admin.groups_as(reader, active);
        let (answer, took) = timed(groups.active_members(request)).await;
        answer?;
        latency.saturating_record(took);
    }
    Ok(Latency::of(&latency))
}

/// What `call` answered and how long it took, in µs.
async fn timed<T>(call: impl Future<Output = T>) -> (T, u64) {
    let started = Instant::now();
    let answer = call.await;
    (answer, started.elapsed().as_micros().max(1) as u64)
}
