//! Write fanout on each SQL backend configured (SQLite always; PostgreSQL and MySQL with
//! `source scripts/stores.sh && stores_start`), with in-process counters: group messages
//! appended to 100 and to 1,000 members' inboxes — sync_seqs for every recipient, the inbox
//! rows, the conversation state — with live delivery to a no-op notifier; one message per
//! append (an idle relay) and 16 (a busy relay's batch). Criterion's throughput is
//! deliveries per second.

use std::sync::Arc;

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use imesh_kit::{
    ids::Snowflake,
    seq::{MemoryCounters, SeqAllocator, SqlCeilings},
    testing,
};
use sync_svc::{
    domain::{
        Change, Entry, Inboxes, IncomingEvent, Mark, MemberMap, Memberships, Notifier, Parts,
    },
    store::sql::{Migrator, SqlInboxStore},
};

struct Nobody;

#[async_trait::async_trait]
impl Notifier for Nobody {
    async fn deliver(&self, _: Vec<(i64, Vec<Entry>)>) -> anyhow::Result<()> {
        Ok(())
    }

    async fn deliver_to_groups(&self, _: Vec<(i64, Bytes)>) -> anyhow::Result<()> {
        Ok(())
    }
}

#[async_trait::async_trait]
impl Memberships for Nobody {
    async fn is_member(&self, _: i64, _: i64) -> anyhow::Result<bool> {
        Ok(true)
    }

    async fn member_map(&self, _: i64, _: bool) -> anyhow::Result<Arc<MemberMap>> {
        Ok(Arc::default())
    }
}

async fn inboxes(backend: testing::Backend) -> Inboxes {
    let config = testing::fresh_sql(backend).await.unwrap();
    let db = imesh_kit::sql::connect_and_migrate::<Migrator>(&config)
        .await
        .unwrap();
    let seqs = SeqAllocator::new(
        Arc::new(MemoryCounters::default()),
        Arc::new(SqlCeilings::new(db.clone())),
        10_000,
    );
    Inboxes::new(
        Arc::new(SqlInboxStore::new(db)),
        Parts {
            seqs: Arc::new(seqs),
            ids: Arc::new(Snowflake::new(1)),
            notifier: Arc::new(Nobody),
            members: Arc::new(Nobody),
            bits: Arc::new(sync_svc::bits::memory::MemoryBits::default()),
            encode: sync_svc::api::ENCODERS,
        },
    )
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
