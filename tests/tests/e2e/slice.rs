//! The foundation slice end to end: register and log in, connect over WebSocket, a direct
//! message from A reaches B live, retries are idempotent, and a reconnecting device catches
//! up from its cursor with exactly what it missed. Runs on every available store set.

use imesh_protos::{
    gateway::server_frame::Body,
    message::content,
    sync::{InboxEntry, sync_event},
};
use imesh_tests::{Stores, TestCluster};

fn text_of(entry: &InboxEntry) -> (i64, String) {
    let Some(sync_event::Kind::Message(message)) =
        entry.event.as_ref().and_then(|e| e.kind.clone())
    else {
        panic!("not a message event: {entry:?}");
    };
    let Some(content::Kind::Text(text)) = message.content.and_then(|c| c.kind) else {
        panic!("not a text message");
    };
    (message.sender_id, text.text)
}

async fn slice(stores: Stores) {
    let env = TestCluster::start(stores).await;
    let (alice, alice_token) = env.user("alice").await;
    let (bob, bob_token) = env.user("bob").await;
    let mut a = env.signed_in(&alice_token, "alice-phone").await;
    let mut b = env.signed_in(&bob_token, "bob-phone").await;

    // A sends B a message: A gets the ack, B gets it live.
    let Body::SendAck(ack) = a.send_text(bob, "m1", "hello bob").await else {
        panic!("send refused")
    };
    assert!(
        ack.msg_id > 0 && ack.server_time_ms > 0,
        "{stores:?}: {ack:?}"
    );
    assert_eq!(ack.seq, 1, "{stores:?}");
    assert!(!ack.duplicate);
    let pushed = b.next_push().await;
    assert_eq!(
        text_of(&pushed),
        (alice, "hello bob".to_owned()),
        "{stores:?}"
    );
    b.ack(pushed.sync_seq).await;

    // The same client_msg_id again: the same ack, nothing new stored or delivered.
    let Body::SendAck(again) = a.send_text(bob, "m1", "hello bob").await else {
        panic!("retry refused")
    };
    assert_eq!(
        (again.msg_id, again.seq, again.server_time_ms),
        (ack.msg_id, ack.seq, ack.server_time_ms)
    );
    assert!(again.duplicate, "{stores:?}");

    // B goes away; A sends three more; B comes back and pulls after its cursor.
    let cursor = pushed.sync_seq;
    b.close().await;
    for (i, text) in ["one", "two", "three"].iter().enumerate() {
        let Body::SendAck(ack) = a.send_text(bob, &format!("m{}", i + 2), text).await else {
            panic!("send refused")
        };
        assert_eq!(
            ack.seq,
            i as i64 + 2,
            "{stores:?}: the retry consumed no seq"
        );
    }
    let mut b = env.signed_in(&bob_token, "bob-phone").await;
    let caught_up = b.pull_at_least(cursor, 3).await;
    let texts: Vec<_> = caught_up.entries.iter().map(text_of).collect();
    assert_eq!(
        texts,
        vec![
            (alice, "one".to_owned()),
            (alice, "two".to_owned()),
            (alice, "three".to_owned())
        ],
        "{stores:?}: exactly the missed messages, in order"
    );
    let seqs: Vec<i64> = caught_up.entries.iter().map(|e| e.sync_seq).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]) && seqs[0] > cursor,
        "{stores:?}: {seqs:?}"
    );
    assert!(!caught_up.has_more);

    // A's own devices see the conversation too (multi-device sync): all four messages.
    let mine = a.pull_at_least(0, 4).await;
    assert_eq!(mine.entries.len(), 4, "{stores:?}");
    env.cluster.stop().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_message_flows_live_and_a_reconnecting_device_catches_up() {
    for stores in Stores::available() {
        slice(stores).await;
    }
}
