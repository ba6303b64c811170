//! The send path end to end in one process on the embedded default: a device sends a direct
//! message over WebSocket and the time runs until the peer's device has the push — gateway,
//! message-svc (gate, seq, message and outbox row in one SQLite transaction), the outbox
//! relay, sync-svc (inbox rows, conversation state), notify-svc and back out through the
//! gateway. One message in flight at a time: this is latency, not throughput.

/// The allocator the programs use (mimalloc), so the figures are theirs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{Criterion, criterion_group, criterion_main};
use imesh_protos::{gateway::server_frame::Body, sync::sync_event::Kind};
use imesh_tests::{Stores, TestCluster};

fn send_to_push(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (_env, mut alice, bob, mut bobs_phone) = rt.block_on(async {
        let env = TestCluster::start_with(Stores::Embedded, |spec| {
            spec.message.rate_limits.user_per_sec = 0;
        })
        .await;
        let (_, alice_token) = env.user("alice").await;
        let (bob, bob_token) = env.user("bob").await;
        let alice = env.signed_in(&alice_token, "alice-phone").await;
        let mut phone = env.signed_in(&bob_token, "bob-phone").await;
        assert!(matches!(phone.ping().await, Body::Pong(_)));
        (env, alice, bob, phone)
    });
    let mut n = 0u64;
    c.bench_function("send/direct message, send to push", |b| {
        b.iter(|| {
            n += 1;
            rt.block_on(async {
                let Body::SendAck(ack) = alice.send_text(bob, &format!("b{n}"), "ping").await else {
                    panic!("send refused")
                };
                loop {
                    let entry = bobs_phone.next_push().await;
                    if matches!(entry.event.and_then(|e| e.kind), Some(Kind::Message(m)) if m.seq == ack.seq)
                    {
                        break;
                    }
                }
            })
        })
    });
}

criterion_group!(send, send_to_push);
criterion_main!(send);
