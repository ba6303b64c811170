//! The storage port of sync-svc. Adapter: [`sql`] (sea-orm: SQLite, PostgreSQL, MySQL).

use std::collections::HashSet;

use async_trait::async_trait;
use bytes::Bytes;
use imesh_kit::error::StoreError;

use crate::domain::Entry;

pub mod sql;

/// An event stored once, referenced by one inbox entry per recipient.
#[derive(Debug, Clone)]
pub struct StoredEvent {
    pub id: i64,
    pub event_id: String,
    pub payload: Bytes,
    /// `(user, sync_seq)` per recipient.
    pub entries: Vec<(i64, i64)>,
}

#[async_trait]
pub trait InboxStore: Send + Sync + 'static {
    /// The ids among `event_ids` already appended.
    async fn known_events(&self, event_ids: &[&str]) -> Result<HashSet<String>, StoreError>;
    /// Stores the events and their inbox entries in one transaction. MUST fail with
    /// `Conflict`, storing nothing, when an event id or a `(user, sync_seq)` already exists.
    async fn append(&self, events: &[StoredEvent]) -> Result<(), StoreError>;
    /// Up to `limit` of `user`'s entries with `sync_seq > after`, in order.
    async fn entries(&self, user: i64, after: i64, limit: u32) -> Result<Vec<Entry>, StoreError>;
    /// Raises the device's cursor to at least `sync_seq` and returns the stored value.
    async fn ack(&self, user: i64, device: &str, sync_seq: i64) -> Result<i64, StoreError>;
}

#[cfg(test)]
mod tests;
