//! Offline push: messages to users with no live connection become notifications for a push
//! provider (a webhook first; APNs or FCM fit the same [`Provider`] trait), unless sync-svc
//! says the conversation is muted or the user is in quiet hours.
//!
//! Delivery hands over the entries of offline users without waiting ([`OfflinePush::offer`]
//! never blocks, and drops a batch when its bounded queue is full: an offline push is a
//! courtesy, the message itself is safe in the inbox). One worker takes batches in order,
//! asks sync-svc once per batch, and sends each notification with retries and backoff.

use std::{sync::Arc, time::Duration};

use futures::StreamExt as _;
use imesh_protos::{
    message::{Message, content},
    sync::{SyncEvent, sync_event},
};
use prometheus_client::metrics::{counter::Counter, family::Family};
use prost::Message as _;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::router::Entry;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct Config {
    /// Where notifications are POSTed as JSON (`https://…` or `http://…`); empty turns
    /// offline push off.
    pub webhook_url: String,
    /// When set (16 characters or more), each POST is signed with it (`x-imesh-signature`,
    /// as the app server's hooks are).
    pub secret: imesh_kit::config::Secret,
    /// Extra CA certificates (PEM) to trust besides the public roots.
    pub ca_file: String,
    pub timeout_ms: u64,
    /// Tries per notification (and per sync-svc decision) before it is dropped.
    pub attempts: u32,
    /// Batches of offline users waiting for the worker; more are dropped.
    pub queue: usize,
    /// Notifications sent at once.
    pub concurrency: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            webhook_url: String::new(),
            secret: imesh_kit::config::Secret::default(),
            ca_file: String::new(),
            timeout_ms: 5_000,
            attempts: 4,
            queue: 1_024,
            concurrency: 16,
        }
    }
}

/// How much a notification shows (the user's preview policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Preview {
    Full,
    Sender,
    Hidden,
}

/// sync-svc's word on one offline target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub push: bool,
    pub badge: i64,
    pub preview: Preview,
}

/// Asks whether `(user, conversation)` targets are pushed (sync-svc `OfflineTargets`).
#[async_trait::async_trait]
pub trait Targets: Send + Sync + 'static {
    /// One decision per target, in order.
    async fn decide(&self, targets: Vec<(i64, String)>) -> anyhow::Result<Vec<Decision>>;
}

/// What the provider is handed: one message for one user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Notification {
    pub user_id: i64,
    pub conversation_id: String,
    pub msg_id: i64,
    pub seq: i64,
    /// 0 when the preview policy hides the sender.
    pub sender_id: i64,
    pub title: String,
    /// The text (or a placeholder for media) under the full preview; empty otherwise.
    pub body: String,
    pub preview: Preview,
    /// Unread messages outside muted conversations.
    pub badge: i64,
    pub sent_at_ms: i64,
}

/// A push provider. MUST be safe to call again with the same notification (retries).
#[async_trait::async_trait]
pub trait Provider: Send + Sync + 'static {
    /// `Err(Permanent)` is not retried (e.g. the receiver refused the payload).
    async fn send(&self, notification: &Notification) -> Result<(), SendError>;
}

#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("refused: {0}")]
    Permanent(String),
    #[error("failed: {0}")]
    Transient(String),
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct Outcome {
    outcome: &'static str,
}

/// The handle delivery holds; the worker runs until every handle is dropped.
pub struct OfflinePush {
    tx: mpsc::Sender<Vec<(i64, Vec<Entry>)>>,
    outcomes: Family<Outcome, Counter>,
}

impl OfflinePush {
    pub fn start(config: &Config, targets: Arc<dyn Targets>, provider: Arc<dyn Provider>) -> Self {
        let (tx, rx) = mpsc::channel(config.queue.max(1));
        let outcomes = Family::<Outcome, Counter>::default();
        let worker = Worker {
            targets,
            provider,
            attempts: config.attempts.max(1),
            concurrency: config.concurrency.max(1),
            outcomes: outcomes.clone(),
        };
        tokio::spawn(worker.run(rx));
        Self { tx, outcomes }
    }

    /// Reports notifications by outcome (sent, suppressed, failed, dropped) in `registry`.
    pub fn register(&self, registry: &mut imesh_kit::metrics::Registry) {
        registry.register(
            "offline_pushes",
            "Offline push notifications, by outcome",
            self.outcomes.clone(),
        );
    }

    /// Hands over the entries of users with no live connection; never waits.
    pub fn offer(&self, offline: Vec<(i64, Vec<Entry>)>) {
        if offline.is_empty() {
            return;
        }
        if self.tx.try_send(offline).is_err() {
            count(&self.outcomes, "dropped");
            tracing::warn!("offline push queue full: a batch of notifications is dropped");
        }
    }
}

fn count(outcomes: &Family<Outcome, Counter>, outcome: &'static str) {
    outcomes.get_or_create(&Outcome { outcome }).inc();
}

struct Worker {
    targets: Arc<dyn Targets>,
    provider: Arc<dyn Provider>,
    attempts: u32,
    concurrency: usize,
    outcomes: Family<Outcome, Counter>,
}

impl Worker {
    async fn run(self, mut rx: mpsc::Receiver<Vec<(i64, Vec<Entry>)>>) {
        while let Some(batch) = rx.recv().await {
            let messages = messages_for(batch);
            for chunk in messages.chunks(MAX_TARGETS) {
                self.push(chunk).await;
            }
        }
    }

    /// Decides and sends one chunk; the chunk's notifications go out concurrently, chunks
    /// one after another.
    async fn push(&self, messages: &[(i64, Message)]) {
        let targets: Vec<(i64, String)> = messages
            .iter()
            .map(|(user, m)| (*user, m.conversation_id.clone()))
            .collect();
        let decisions = match retried(self.attempts, || self.targets.decide(targets.clone())).await
        {
            Ok(decisions) => decisions,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "offline push decisions failed; notifications dropped");
                self.outcomes
                    .get_or_create(&Outcome { outcome: "failed" })
                    .inc_by(messages.len() as u64);
                return;
            }
        };
        let mut notifications = Vec::new();
        for ((user, message), decision) in messages.iter().zip(decisions) {
            if decision.push {
                notifications.push(notification(*user, message, &decision));
            } else {
                count(&self.outcomes, "suppressed");
            }
        }
        futures::stream::iter(notifications)
            .map(|n| self.send(n))
            .buffer_unordered(self.concurrency)
            .collect::<Vec<()>>()
            .await;
    }

    async fn send(&self, n: Notification) {
        let result = retried(self.attempts, || async {
            match self.provider.send(&n).await {
                Err(SendError::Permanent(why)) => Ok(Err(why)),
                Err(transient) => Err(anyhow::Error::new(transient)),
                Ok(()) => Ok(Ok(())),
            }
        })
        .await;
        let outcome = match result {
            Ok(Ok(())) => "sent",
            Ok(Err(why)) => {
                tracing::warn!(user = n.user_id, reason = %why, "offline push refused");
                "failed"
            }
            Err(e) => {
                tracing::warn!(user = n.user_id, error = %format!("{e:#}"), "offline push failed");
                "failed"
            }
        };
        count(&self.outcomes, outcome);
    }
}

/// Most targets in one sync-svc decision call.
const MAX_TARGETS: usize = 500;

/// Calls `f` up to `attempts` times, backing off 100 ms, 200 ms, 400 ms… between tries.
async fn retried<T, F, Fut>(attempts: u32, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    let mut backoff = Duration::from_millis(100);
    let mut tries = 1;
    loop {
        match f().await {
            Ok(value) => return Ok(value),
            Err(e) if tries >= attempts => return Err(e),
            Err(_) => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
                tries += 1;
            }
        }
    }
}

/// The messages among the entries that warrant a notification: from someone else, not a
/// system notice.
fn messages_for(batch: Vec<(i64, Vec<Entry>)>) -> Vec<(i64, Message)> {
    let mut out = Vec::new();
    for (user, entries) in batch {
        for entry in entries {
            let Ok(SyncEvent {
                kind: Some(sync_event::Kind::Message(message)),
            }) = SyncEvent::decode(entry.event)
            else {
                continue;
            };
            let notice = matches!(
                message.content.as_ref().and_then(|c| c.kind.as_ref()),
                Some(content::Kind::Notice(_)) | None
            );
            if message.sender_id != user && message.sender_id > 0 && !notice {
                out.push((user, message));
            }
        }
    }
    out
}

/// Longest text body, in characters.
const BODY_CHARS: usize = 120;

fn notification(user: i64, message: &Message, decision: &Decision) -> Notification {
    let full = decision.preview == Preview::Full;
    let body = match message.content.as_ref().and_then(|c| c.kind.as_ref()) {
        _ if !full => String::new(),
        Some(content::Kind::Text(t)) => t.text.chars().take(BODY_CHARS).collect(),
        Some(content::Kind::Image(_)) => "[image]".into(),
        Some(content::Kind::File(f)) => format!("[file] {}", f.name),
        Some(content::Kind::Audio(_)) => "[voice]".into(),
        Some(content::Kind::Video(_)) => "[video]".into(),
        Some(content::Kind::Custom(_)) | Some(content::Kind::Notice(_)) | None => {
            "[message]".into()
        }
    };
    let hidden = decision.preview == Preview::Hidden;
    Notification {
        user_id: user,
        conversation_id: message.conversation_id.clone(),
        msg_id: message.msg_id,
        seq: message.seq,
        sender_id: if hidden { 0 } else { message.sender_id },
        title: "New message".into(),
        body,
        preview: decision.preview,
        badge: decision.badge,
        sent_at_ms: message.server_time_ms,
    }
}

#[cfg(test)]
mod tests;
