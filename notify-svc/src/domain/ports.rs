//! What the domain needs from outside and the data that crosses: presence storage
//! ([`Presence`]), the gateways ([`Gateways`]), relation-svc ([`Friends`]), group-svc
//! ([`GroupMembers`]), sync-svc ([`Targets`]), the push provider ([`Provider`]), and the
//! codec of the events the domain pushes ([`EncodeTyping`], [`EncodePresence`],
//! [`DecodeMessage`]).

use std::time::Duration;

use bytes::Bytes;
use imesh_kit::error::StoreError;
use serde::Serialize;

/// Where one connected device can be reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceRoute {
    pub user_id: i64,
    pub device_id: String,
    pub platform: String,
    /// The gateway's internal gRPC address.
    pub gateway_addr: String,
    pub conn_id: u64,
}

/// Which devices of a user are connected, and through which gateway, and which gateways
/// hold members of each read-fanout group.
#[async_trait::async_trait]
pub trait Presence: Send + Sync + 'static {
    /// Records (or refreshes) a device's route for `ttl`, replacing an older connection of
    /// the same device.
    async fn online(&self, route: &DeviceRoute, ttl: Duration) -> Result<(), StoreError>;
    /// Forgets the device's route, but only while it still names `conn_id`: a late offline
    /// of an old connection MUST NOT remove the device's newer one.
    async fn offline(&self, user_id: i64, device_id: &str, conn_id: u64) -> Result<(), StoreError>;
    /// Every unexpired route of the given users.
    async fn lookup(&self, users: &[i64]) -> Result<Vec<DeviceRoute>, StoreError>;
    /// Records (or refreshes) for `ttl` that `gateway_addr` holds members of `groups`.
    async fn subscribe(
        &self,
        gateway_addr: &str,
        groups: &[i64],
        ttl: Duration,
    ) -> Result<(), StoreError>;
    /// The gateways with an unexpired subscription to `group`.
    async fn gateways_of(&self, group: i64) -> Result<Vec<String>, StoreError>;
}

/// An inbox entry with its event still encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub sync_seq: i64,
    pub event: Bytes,
}

/// Entries for one connection on a gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionPush {
    pub conn_id: u64,
    pub entries: Vec<Entry>,
}

/// Where pushes go: the gateways' internal `Push`.
#[async_trait::async_trait]
pub trait Gateways: Send + Sync + 'static {
    /// Pushes to connections on the gateway at `addr`; returns the connections it no longer holds.
    async fn push(&self, addr: &str, pushes: Vec<ConnectionPush>) -> anyhow::Result<Vec<u64>>;
    /// Pushes group events `(group, encoded event)` to the gateway at `addr`, which hands
    /// each to its connections of the group's members.
    async fn push_groups(&self, addr: &str, events: Vec<(i64, Bytes)>) -> anyhow::Result<()>;
    /// Closes connections on the gateway at `addr`, telling each client `reason`.
    async fn kick(&self, addr: &str, conn_ids: Vec<u64>, reason: String) -> anyhow::Result<()>;
}

/// A user's friends (relation-svc).
#[async_trait::async_trait]
pub trait Friends: Send + Sync + 'static {
    /// Up to `limit` of the users `user` is friends with and has not blocked.
    async fn friends(&self, user: i64, limit: usize) -> anyhow::Result<Vec<i64>>;
}

/// A group's current members, as group-svc knows them.
pub enum Members {
    List(Vec<i64>),
    /// A super group: no full member list is handed out.
    Unlisted,
    /// No such group.
    Unknown,
}

/// group-svc's member lists.
#[async_trait::async_trait]
pub trait GroupMembers: Send + Sync + 'static {
    async fn members(&self, group: i64) -> anyhow::Result<Members>;
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

/// A message in an inbox entry, as an offline notification needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfflineMessage {
    pub conversation_id: String,
    pub msg_id: i64,
    pub seq: i64,
    pub sender_id: i64,
    pub sent_at_ms: i64,
    /// A system notice (never pushed).
    pub notice: bool,
    /// The text, or a placeholder for other content (`[image]`, `[file] name`…).
    pub body: String,
}

/// The message an entry's event holds, if it holds one.
pub type DecodeMessage = fn(event: &Bytes) -> Option<OfflineMessage>;

/// Encodes the Typing event of `user` in `conversation_id` (a SyncEvent).
pub type EncodeTyping = fn(conversation_id: &str, user: i64) -> Bytes;

/// Encodes the PresenceChanged event of `user` with the platforms online (a SyncEvent).
pub type EncodePresence = fn(user: i64, platforms: &[String]) -> Bytes;
