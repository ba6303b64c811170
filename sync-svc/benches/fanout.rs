//! Write fanout on each SQL backend configured (SQLite always; PostgreSQL and MySQL with
//! `source scripts/stores.sh && stores_start`): group messages appended to 100 and to 1,000
//! members' inboxes — every recipient's inbox head read and raised, the inbox rows, the
//! conversation state — with live delivery to a no-op notifier; one message per
//! append (an idle relay) and 16 (a busy relay's batch). Criterion's throughput is
//! deliveries per second.

/// The allocator the programs use (mimalloc), so the figures are theirs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod support;

use std::sync::Arc;

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use imesh_kit::testing;
use sync_svc::domain::{Change, Inboxes, IncomingEvent, Mark};

async fn inboxes(backend: testing::Backend) -> Inboxes {
    let bits = Arc::new(sync_svc::store::memory::MemoryBits::default());
    support::inboxes(backend, Arc::default(), bits).await
}

fn message(group: usize, seq: i64, members: &[i64]) -> IncomingEvent {
    let conversation = format!("g:{group}");
    IncomingEvent {
        event_id: format!("m:{conversation}:{seq}"),
        recipients: members.to_vec(),
        read_fanout_group: None,
        payload: Bytes::from(vec![7u8; 120]),
        mark: Some(Mark {
            conversation_id: conversation,
            seq,
            change: Change::Message {
                sender: members[seq as usize % members.len()],
                time_ms: seq,
                mentioned: vec![],
                mention_all: false,
                receipt_bound: 0,
            },
        }),
    }
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for backend in testing::sql_backends() {
        bench_on(c, &rt, backend);
    }
}

fn bench_on(c: &mut Criterion, rt: &tokio::runtime::Runtime, backend: testing::Backend) {
    let inboxes = rt.block_on(inboxes(backend));
    let mut g = c.benchmark_group(format!("fanout/{backend:?}"));
    for (size, batch) in [(100usize, 1i64), (1_000, 1), (100, 16), (1_000, 16)] {
        let group = size * 100 + batch as usize;
        let members: Vec<i64> = (1..=size as i64).collect();
        let mut seq = 0;
        // The first message opens every member's read state; the bench measures the steady
        // state after it.
        rt.block_on(inboxes.append(vec![message(group, 0, &members)]))
            .unwrap();
        g.throughput(Throughput::Elements(size as u64 * batch as u64));
        let id = BenchmarkId::new(format!("{batch} message(s) per append"), size);
        g.bench_with_input(id, &members, |b, members| {
            b.iter(|| {
                let events = (0..batch)
                    .map(|i| message(group, seq + i + 1, members))
                    .collect();
                seq += batch;
                rt.block_on(inboxes.append(events)).unwrap()
            })
        });
    }
    g.finish();
}

criterion_group!(fanout, benches);
criterion_main!(fanout);
