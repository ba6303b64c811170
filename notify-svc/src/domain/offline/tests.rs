use std::sync::Arc;

use imesh_protos::{
    message::{Content, Message, Notice, Text, content},
    sync::{SyncEvent, sync_event},
};
use parking_lot::Mutex;
use prost::Message as _;

use super::*;
use crate::events::decode_message;

fn entry(message: Message) -> Entry {
    let event = SyncEvent {
        kind: Some(sync_event::Kind::Message(message)),
    };
    Entry {
        sync_seq: 1,
        event: event.encode_to_vec().into(),
    }
}

/// What the worker reads from `message`'s entry.
fn offline(message: Message) -> OfflineMessage {
    decode_message(&entry(message).event).expect("a message event")
}

fn text(conversation: &str, sender: i64, seq: i64, text: &str) -> Message {
    Message {
        msg_id: 1000 + seq,
        conversation_id: conversation.into(),
        seq,
        sender_id: sender,
        content: Some(Content {
            kind: Some(content::Kind::Text(Text { text: text.into() })),
        }),
        server_time_ms: 42,
        ..Message::default()
    }
}

/// Decides by conversation: "muted" ones are not pushed; the badge is the user id.
struct FakeTargets(Preview);

#[async_trait::async_trait]
impl Targets for FakeTargets {
    async fn decide(&self, targets: Vec<(i64, String)>) -> anyhow::Result<Vec<Decision>> {
        Ok(targets
            .into_iter()
            .map(|(user, conversation)| Decision {
                push: !conversation.contains("muted"),
                badge: user,
                preview: self.0,
            })
            .collect())
    }
}

/// Records what it is sent; fails the first `failures` calls with `error`.
struct FakeProvider {
    sent: Mutex<Vec<Notification>>,
    calls: Mutex<u32>,
    failures: u32,
    permanent: bool,
}

impl FakeProvider {
    fn failing(failures: u32, permanent: bool) -> Arc<Self> {
        Arc::new(Self {
            sent: Mutex::new(Vec::new()),
            calls: Mutex::new(0),
            failures,
            permanent,
        })
    }
}

#[async_trait::async_trait]
impl Provider for FakeProvider {
    async fn send(&self, notification: &Notification) -> Result<(), SendError> {
        let call = {
            let mut calls = self.calls.lock();
            *calls += 1;
            *calls
        };
        if call <= self.failures {
            return Err(if self.permanent {
                SendError::Permanent("HTTP 400".into())
            } else {
                SendError::Transient("HTTP 503".into())
            });
        }
        self.sent.lock().push(notification.clone());
        Ok(())
    }
}

fn worker(preview: Preview, provider: Arc<FakeProvider>) -> Worker {
    Worker {
        decode: decode_message,
        targets: Arc::new(FakeTargets(preview)),
        provider,
        attempts: 3,
        concurrency: 4,
        outcomes: Family::default(),
    }
}

#[tokio::test]
async fn messages_from_others_are_notified_unless_muted_and_never_own_or_notices() {
    let provider = FakeProvider::failing(0, false);
    let notice = Message {
        content: Some(Content {
            kind: Some(content::Kind::Notice(Notice::default())),
        }),
        ..text("g:5", 9, 3, "")
    };
    let batch = vec![
        (
            7,
            vec![
                entry(text("d:7:8", 8, 1, "hello")),
                entry(text("d:7:8", 7, 2, "my own")),
                entry(notice),
                entry(text("muted:1", 8, 1, "shh")),
            ],
        ),
        (11, vec![entry(text("g:5", 8, 4, &"x".repeat(500)))]),
    ];
    let w = worker(Preview::Full, provider.clone());
    for chunk in messages_for(decode_message, batch).chunks(MAX_TARGETS) {
        w.push(chunk).await;
    }
    let mut sent = provider.sent.lock().clone();
    sent.sort_by_key(|n| n.user_id);
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(
        sent[0],
        Notification {
            user_id: 7,
            conversation_id: "d:7:8".into(),
            msg_id: 1001,
            seq: 1,
            sender_id: 8,
            title: "New message".into(),
            body: "hello".into(),
            preview: Preview::Full,
            badge: 7,
            sent_at_ms: 42,
        }
    );
    assert_eq!(
        sent[1].body.chars().count(),
        BODY_CHARS,
        "long texts are cut"
    );
}

#[tokio::test]
async fn the_preview_policy_hides_the_text_or_the_sender_too() {
    let provider = FakeProvider::failing(0, false);
    let message = vec![(1, offline(text("d:1:2", 2, 1, "secret")))];
    worker(Preview::Sender, provider.clone())
        .push(&message)
        .await;
    worker(Preview::Hidden, provider.clone())
        .push(&message)
        .await;
    let sent = provider.sent.lock().clone();
    assert_eq!(
        sent.iter()
            .map(|n| (n.sender_id, n.body.as_str()))
            .collect::<Vec<_>>(),
        vec![(2, ""), (0, "")]
    );
}

#[tokio::test]
async fn a_transient_failure_is_retried_and_a_refusal_is_not() {
    let flaky = FakeProvider::failing(2, false);
    let message = vec![(1, offline(text("d:1:2", 2, 1, "hi")))];
    worker(Preview::Full, flaky.clone()).push(&message).await;
    assert_eq!((*flaky.calls.lock(), flaky.sent.lock().len()), (3, 1));

    let refusing = FakeProvider::failing(1, true);
    worker(Preview::Full, refusing.clone()).push(&message).await;
    assert_eq!((*refusing.calls.lock(), refusing.sent.lock().len()), (1, 0));
}
