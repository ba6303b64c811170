//! The direct path's writes in message-svc, on each SQL backend configured (SQLite always;
//! PostgreSQL and MySQL with `source scripts/stores.sh && stores_start`): text messages of
//! 250 one-to-one conversations appended through the group commit (the row, its two keys,
//! the conversation's max seq, the outbox row and, on SQLite, the search index's pending
//! row), then their outbox rows removed as the relay would. One message per commit (an idle
//! server), 16 and 256 (a busy one's batches). The conversations take turns, so a commit
//! touches as many of them as it holds messages, as it does among many users. Criterion's
//! throughput is messages per second.

/// The allocator the programs use (mimalloc), so the figures are theirs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use imesh_kit::{
    outbox::{OutboxRow, SqlOutbox},
    testing,
};
use message_svc::{
    domain::{Content, Mentions, Message, MessageStore, direct_conversation},
    store::{
        OUTBOX_TABLE,
        sql::{Migrator, SqlMessageStore},
    },
};

const PAIRS: i64 = 250;

/// Hands out each pair's next message, the pairs in turn.
struct Traffic {
    sent: i64,
    /// Each pair's last seq.
    seqs: [i64; PAIRS as usize],
}

impl Traffic {
    fn new() -> Self {
        Self {
            sent: 0,
            seqs: [0; PAIRS as usize],
        }
    }

    fn next(&mut self) -> (Message, OutboxRow) {
        self.sent += 1;
        let pair = self.sent % PAIRS;
        let (a, b) = (pair * 2 + 1, pair * 2 + 2);
        let sender = if self.sent / PAIRS % 2 == 0 { a } else { b };
        let seq = &mut self.seqs[pair as usize];
        *seq += 1;
        let msg_id = 1_000_000 + self.sent;
        let message = Message {
            msg_id,
            conversation_id: direct_conversation(a, b),
            seq: *seq,
            sender_id: sender,
            client_msg_id: format!("{sender:08x}-{msg_id:012x}"),
            content: Content::Text(format!("message {msg_id}: see you at the station at nine")),
            mentions: Mentions::default(),
            receipt_bound: 0,
            server_time_ms: 1_700_000_000_000 + self.sent,
            recalled_by: 0,
            recalled_at_ms: 0,
            version: 1,
            edited_at_ms: 0,
            reply: None,
            forwarded: None,
            reactions: Vec::new(),
        };
        let event = OutboxRow {
            id: msg_id,
            payload: vec![7; 160],
        };
        (message, event)
    }
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for backend in testing::sql_backends() {
        let (store, outbox) = rt.block_on(async {
            let mut config = testing::fresh_sql(backend).await.unwrap();
            if backend == testing::Backend::Sqlite {
                // One writing connection, as `imesh up` gives each SQLite file.
                config.max_connections = 1;
            }
            let db = imesh_kit::sql::connect_and_migrate::<Migrator>(&config)
                .await
                .unwrap();
            let reads = imesh_kit::sql::readers(&config, &db).await.unwrap();
            let store = SqlMessageStore::new(db.clone()).reading_from(reads);
            (store, SqlOutbox::new(db, OUTBOX_TABLE))
        });
        let mut traffic = Traffic::new();
        let mut g = c.benchmark_group(format!("direct appends/{backend:?}"));
        for batch in [1usize, 16, 256] {
            g.throughput(Throughput::Elements(batch as u64));
            let id = BenchmarkId::new("messages per commit", batch);
            g.bench_function(id, |b| {
                b.iter(|| {
                    let appends: Vec<_> = (0..batch).map(|_| traffic.next()).collect();
                    rt.block_on(async {
                        let outcomes = store.append_many(&appends).await.outcomes().await;
                        assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
                        let ids: Vec<i64> = appends.iter().map(|(_, e)| e.id).collect();
                        outbox.remove(&ids).await.unwrap();
                    })
                })
            });
        }
        g.finish();
    }
}

criterion_group!(benches_group, benches);
criterion_main!(benches_group);
