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
use prometheus_client::metrics::{counter::Counter, family::Family};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::ports::{
    Decision, DecodeMessage, Entry, Notification, OfflineMessage, Preview, Provider, SendError,
    Targets,
};

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
    /// Starts the worker, which reads each entry's message with `decode`.
    pub fn start(
        config: &Config,
        decode: DecodeMessage,
        targets: Arc<dyn Targets>,
        provider: Arc<dyn Provider>,
    ) -> Self {
        let (tx, rx) = mpsc::channel(config.queue.max(1));
        let outcomes = Family::<Outcome, Counter>::default();
        let worker = Worker {
            decode,
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
    decode: DecodeMessage,
    targets: Arc<dyn Targets>,
    provider: Arc<dyn Provider>,
    attempts: u32,
    concurrency: usize,
    outcomes: Family<Outcome, Counter>,
}

impl Worker {
    async fn run(self, mut rx: mpsc::Receiver<Vec<(i64, Vec<Entry>)>>) {
        while let Some(batch) = rx.recv().await {
            let messages = messages_for(self.decode, batch);
            for chunk in messages.chunks(MAX_TARGETS) {
                self.push(chunk).await;
            }
        }
    }

    /// Decides and sends one chunk; the chunk's notifications go out concurrently, chunks
    /// one after another.
    async fn push(&self, messages: &[(i64, OfflineMessage)]) {
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
fn messages_for(
    decode: DecodeMessage,
    batch: Vec<(i64, Vec<Entry>)>,
) -> Vec<(i64, OfflineMessage)> {
    let mut out = Vec::new();
    for (user, entries) in batch {
        for entry in entries {
            let Some(message) = decode(&entry.event) else {
                continue;
            };
            if message.sender_id != user && message.sender_id > 0 && !message.notice {
                out.push((user, message));
            }
        }
    }
    out
}

/// Longest text body, in characters.
const BODY_CHARS: usize = 120;

fn notification(user: i64, message: &OfflineMessage, decision: &Decision) -> Notification {
    let body = match decision.preview {
        Preview::Full => message.body.chars().take(BODY_CHARS).collect(),
        Preview::Sender | Preview::Hidden => String::new(),
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
        sent_at_ms: message.sent_at_ms,
    }
}

#[cfg(test)]
mod tests;
