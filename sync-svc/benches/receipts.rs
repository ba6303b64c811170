//! Read receipts: one MarkRead whose watermark crosses 100 receipt messages (the bits set
//! in one call, the watermark stored) against one crossing 100 plain messages, on every
//! configured SQL backend, with the in-process bitmaps and with Redis when
//! `IMESH_TEST_REDIS_URL` is set; the bitmap write alone; and the Redis memory one receipt message costs in
//! 200- and 2,000-member groups (printed, `MEMORY USAGE` of the arena over its messages).
//!
//! `cargo bench -p sync-svc --bench receipts`

/// The allocator the programs use (mimalloc), so the figures are theirs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod support;

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use imesh_kit::testing;
use sync_svc::{
    domain::{Change, Inboxes, IncomingEvent, MapMember, Mark, MemberMap, ReadMark, ReceiptBits},
    store::{memory::MemoryBits, redis::RedisBits},
};

/// Messages crossed by one watermark advance.
const CROSSED: i64 = 100;

/// A group of `size` members, users `1..=size` with map ids from 0.
fn members(size: u32) -> Arc<MemberMap> {
    let members = (0..size)
        .map(|i| MapMember {
            user: i64::from(i) + 1,
            map_id: i,
            manages: i == 0,
        })
        .collect();
    Arc::new(MemberMap::new(members))
}

async fn inboxes(backend: testing::Backend, size: u32, bits: Arc<dyn ReceiptBits>) -> Inboxes {
    support::inboxes(backend, members(size), bits).await
}

/// Messages `from..from + count` of `conversation` from user 1 to every member, asking for
/// receipts over `bound` map ids (0: plain messages).
fn messages(
    conversation: &str,
    from: i64,
    count: i64,
    size: u32,
    bound: u32,
) -> Vec<IncomingEvent> {
    (from..from + count)
        .map(|seq| IncomingEvent {
            event_id: format!("m:{conversation}:{seq}"),
            recipients: (1..=i64::from(size)).collect(),
            read_fanout_group: None,
            payload: Bytes::from(vec![7u8; 120]),
            mark: Some(Mark {
                conversation_id: conversation.to_owned(),
                seq,
                change: Change::Message {
                    sender: 1,
                    time_ms: seq,
                    mentioned: vec![],
                    mention_all: false,
                    receipt_bound: bound,
                },
            }),
        })
        .collect()
}

async fn redis_bits() -> Option<(fred::prelude::Pool, Arc<dyn ReceiptBits>)> {
    let config = testing::redis()?;
    let pool = imesh_kit::redis::connect(&config, config.url()?)
        .await
        .unwrap();
    let bits = RedisBits::new(pool.clone(), Duration::from_secs(600));
    Some((pool, Arc::new(bits)))
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut adapters: Vec<(&str, Arc<dyn ReceiptBits>)> =
        vec![("memory", Arc::new(MemoryBits::default()))];
    let redis = rt.block_on(redis_bits());
    // `cargo bench` passes `--bench`; `cargo test` runs each bench once as a check, on a
    // small group and without the memory report.
    let measuring = std::env::args().any(|arg| arg == "--bench");
    let size = if measuring { 2_000 } else { 100 };
    if let Some((_, bits)) = &redis {
        adapters.push(("redis", bits.clone()));
    }
    for (name, bits) in &adapters {
        set_bits(c, &rt, name, bits.clone());
    }
    for backend in testing::sql_backends() {
        let on = |bits: &str| format!("{backend:?}/{bits}");
        let memory = adapters[0].1.clone();
        advance(
            c,
            &rt,
            (backend, &on("memory")),
            size,
            "plain messages (baseline)",
            memory,
        );
        for (name, bits) in &adapters {
            advance(
                c,
                &rt,
                (backend, &on(name)),
                size,
                "receipt messages",
                bits.clone(),
            );
        }
    }
    if let Some((pool, bits)) = redis.filter(|_| measuring) {
        for members in [200, 2_000] {
            rt.block_on(memory_per_message(&pool, bits.clone(), members));
        }
    }
}

/// One member's MarkRead crossing [`CROSSED`] receipt messages of a `size`-member group;
/// each iteration is the next member, with a fresh run of messages once all have read.
fn advance(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    (backend, name): (testing::Backend, &str),
    size: u32,
    kind: &str,
    bits: Arc<dyn ReceiptBits>,
) {
    let bound = if kind.starts_with("plain") { 0 } else { size };
    let inboxes = rt.block_on(inboxes(backend, size, bits));
    let conversation = format!("g:{}", testing::random_id());
    let (mut top, mut reader) = (0i64, i64::from(size));
    c.bench_function(
        &format!("receipts/{name}/mark_read crossing 100 {kind}"),
        |b| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    if reader == i64::from(size) {
                        let events = messages(&conversation, top + 1, CROSSED, size, bound);
                        rt.block_on(inboxes.append(events)).unwrap();
                        (top, reader) = (top + CROSSED, 2);
                    }
                    let mark = vec![ReadMark {
                        conversation_id: conversation.clone(),
                        read_seq: top,
                    }];
                    let started = std::time::Instant::now();
                    rt.block_on(inboxes.mark_read(reader, mark)).unwrap();
                    spent += started.elapsed();
                    reader += 1;
                }
                spent
            })
        },
    );
}

/// The bitmap part alone: one reader's bit in 100 receipt messages of a 2,000-member group.
fn set_bits(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    name: &str,
    bits: Arc<dyn ReceiptBits>,
) {
    let conversation = format!("g:{}", testing::random_id());
    let mut reader = 0u64;
    c.bench_function(
        &format!("receipts/bits/{name}/set one reader in 100"),
        |b| {
            b.iter(|| {
                reader = (reader + 1) % 2_000;
                let marks: Vec<u64> = (0..100u64).map(|m| (1 + m * 250) * 8 + reader).collect();
                rt.block_on(bits.set(&conversation, &marks)).unwrap()
            })
        },
    );
}

/// Prints the Redis bytes per receipt message: 1,000 messages, each read by half the group.
async fn memory_per_message(pool: &fred::prelude::Pool, bits: Arc<dyn ReceiptBits>, size: u32) {
    const MESSAGES: i64 = 1_000;
    let inboxes = inboxes(testing::Backend::Sqlite, size, bits).await;
    let conversation = format!("g:{}", testing::random_id());
    for start in (1..=MESSAGES).step_by(100) {
        let events = messages(&conversation, start, 100, size, size);
        inboxes.append(events).await.unwrap();
    }
    for reader in 2..=i64::from(size) / 2 {
        let mark = vec![ReadMark {
            conversation_id: conversation.clone(),
            read_seq: MESSAGES,
        }];
        inboxes.mark_read(reader, mark).await.unwrap();
    }
    let counted = inboxes
        .receipt_counts(
            imesh_kit::identity::Actor::System,
            &conversation,
            &[1, MESSAGES],
        )
        .await
        .unwrap();
    let key = sync_svc::keys::receipt_bits(&conversation);
    let args: Vec<fred::prelude::Value> = vec!["USAGE".into(), key.into()];
    let used: i64 = fred::prelude::ClientLike::custom(pool, fred::cmd!("MEMORY"), args)
        .await
        .unwrap();
    println!(
        "receipts/redis/memory: {size} members: {:.1} bytes per receipt message \
         ({used} bytes for {MESSAGES} messages; counts {}/{})",
        used as f64 / MESSAGES as f64,
        counted[0].read,
        counted[0].total
    );
}

criterion_group!(receipts, benches);
criterion_main!(receipts);
