//! Per-user inboxes: write fanout of events into one ordered stream per user, catch-up
//! pulls after a cursor, cumulative device acks; conversation state in [`reads`]. No tonic
//! or sea-orm types here.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use bytes::Bytes;
use imesh_kit::{error::StoreError, ids::Snowflake, metrics::Registry};
use prometheus_client::metrics::histogram::Histogram;

mod live;
pub mod marks;
pub mod ports;
mod push;
mod reads;
mod receipts;

pub use live::Queued;
pub use ports::{InboxStore, Memberships, Notifier, ReceiptBits, StoredEvent};

pub use push::{MAX_OFFLINE_TARGETS, OfflineDecision, Preview, PushSettings};
pub use reads::{
    Change, ConversationPage, ConversationView, Cursor, EncodeRead, EncodeRemoved, EncodeSettings,
    Mark, ReadMark, Settings,
};
pub use receipts::{Dirty, EncodeReceipt, FIRST_SLOT, MapMember, MemberMap, Receipt, ReceiptCount};

/// An event to append to the inboxes of `recipients`; `payload` is an encoded SyncEvent.
#[derive(Debug, Clone)]
pub struct IncomingEvent {
    pub event_id: String,
    /// Empty for read fanout: the event only moves its conversation's state.
    pub recipients: Vec<i64>,
    /// Read fanout: the group whose conversation the event belongs to.
    pub read_fanout_group: Option<i64>,
    pub payload: Bytes,
    /// What the event does to its conversation's state (messages and recalls).
    pub mark: Option<Mark>,
}

/// One inbox entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub sync_seq: i64,
    pub payload: Bytes,
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Appended {
    pub appended: u32,
    pub duplicates: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("group-svc could not be asked")]
    Groups(#[source] anyhow::Error),
    #[error("conversation_id: not one of your conversations")]
    NoConversation,
    #[error("seq: message {0} did not ask for read receipts")]
    NoReceipt(i64),
    #[error("{0}")]
    Forbidden(&'static str),
}

fn invalid(field: &'static str, reason: impl Into<String>) -> Error {
    Error::Invalid {
        field,
        reason: reason.into(),
    }
}

pub const MAX_RECIPIENTS: usize = 10_000;

/// Recipients of one event from which its append waits for the push (see
/// `Inboxes::notify`): a group's fanout, not a direct message's.
const WAITED_FANOUT: usize = 32;

pub const DEFAULT_PULL: u32 = 100;
pub const MAX_PULL: u32 = 500;

pub struct Inboxes {
    store: Arc<dyn InboxStore>,
    ids: Arc<Snowflake>,
    notifier: Arc<dyn Notifier>,
    members: Arc<dyn Memberships>,
    bits: Arc<dyn ReceiptBits>,
    dirty: Dirty,
    encode: Encoders,
    webhooks: Option<Arc<tokio::sync::Notify>>,
    /// Inbox entries written per appended event.
    fanout: Histogram,
}

/// Encodes the live hint that a read-fanout conversation reached `latest_seq`.
pub type EncodeAdvanced = fn(conversation_id: &str, latest_seq: i64) -> Bytes;

/// What [`Inboxes`] is built from besides its store.
pub struct Parts {
    pub ids: Arc<Snowflake>,
    pub notifier: Arc<dyn Notifier>,
    pub members: Arc<dyn Memberships>,
    pub bits: Arc<dyn ReceiptBits>,
    pub encode: Encoders,
    /// Set when the app server takes after-event webhooks: their relay, woken after an
    /// append queued some.
    pub webhooks: Option<Arc<tokio::sync::Notify>>,
}

/// How the events sync-svc makes itself are encoded (the api's proto encoders).
#[derive(Clone, Copy)]
pub struct Encoders {
    pub read: EncodeRead,
    pub advanced: EncodeAdvanced,
    pub settings: EncodeSettings,
    pub removed: EncodeRemoved,
    pub receipt: EncodeReceipt,
    /// The webhook payload of an appended event (by its id and encoded SyncEvent), for the
    /// kinds the app server hears of; `None` for the others.
    pub webhook: fn(event_id: &str, payload: &[u8]) -> Option<Vec<u8>>,
}

impl Inboxes {
    pub fn new(store: Arc<dyn InboxStore>, parts: Parts) -> Self {
        let Parts {
            ids,
            notifier,
            members,
            bits,
            encode,
            webhooks,
        } = parts;
        Self {
            store,
            ids,
            notifier,
            members,
            bits,
            dirty: Dirty::default(),
            encode,
            webhooks,
            fanout: Histogram::new(imesh_kit::metrics::size_buckets()),
        }
    }

    /// Reports fanout sizes in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "inbox_fanout_recipients",
            "Inboxes one appended event was written to",
            self.fanout.clone(),
        );
    }

    /// Appends each event to its recipients' inboxes once, however often it is replayed,
    /// then hands the new entries to the notifier (best effort: devices that miss a push
    /// catch up by pulling; a [`Queued`] notifier pushes them after the append returns).
    pub async fn append(&self, events: Vec<IncomingEvent>) -> Result<Appended, Error> {
        for event in &events {
            if event.event_id.is_empty() || event.event_id.len() > 191 {
                return Err(invalid("events.event_id", "must be 1–191 characters"));
            }
            let fanout_ok = match event.read_fanout_group {
                Some(group) if group <= 0 => {
                    return Err(invalid("events.read_fanout_group_id", "must be a group id"));
                }
                Some(_) => event.recipients.is_empty(),
                None => (1..=MAX_RECIPIENTS).contains(&event.recipients.len()),
            };
            if !fanout_ok {
                return Err(invalid(
                    "events.recipient_ids",
                    format!("must hold 1–{MAX_RECIPIENTS} users, or none for read fanout"),
                ));
            }
            if event.recipients.iter().any(|id| *id <= 0) {
                return Err(invalid("events.recipient_ids", "must be user ids"));
            }
            if let Some(mark) = &event.mark
                && let Change::Message { receipt_bound, .. } = mark.change
                && receipt_bound > 0
                && (event.read_fanout_group.is_some()
                    || reads::group_of(&mark.conversation_id).is_none())
            {
                return Err(invalid(
                    "events.receipt_map_bound",
                    "only write-fanout group messages ask for read receipts",
                ));
            }
        }
        let total = events.len() as u32;
        let mut seen: HashSet<String> = HashSet::new();
        let mut stored = Vec::new();
        // Message events of read-fanout groups (event id, group, conversation, seq), for
        // the live hints.
        let mut hints: Vec<(String, i64, String, i64)> = Vec::new();
        for event in events {
            if !seen.insert(event.event_id.clone()) {
                continue;
            }
            if let (Some(group), Some(mark)) = (event.read_fanout_group, &event.mark)
                && matches!(mark.change, Change::Message { .. })
            {
                let conversation = mark.conversation_id.clone();
                hints.push((event.event_id.clone(), group, conversation, mark.seq));
            }
            let mut recipients = event.recipients;
            recipients.sort_unstable();
            recipients.dedup();
            self.fanout.observe(recipients.len() as f64);
            let hook = self
                .webhooks
                .as_ref()
                .and_then(|_| (self.encode.webhook)(&event.event_id, &event.payload));
            stored.push(StoredEvent {
                id: self.ids.next_id()?,
                event_id: event.event_id,
                payload: event.payload,
                recipients,
                mark: event.mark,
                hook,
            });
        }
        // A replay is rare: the append goes first, and only a taken event id (a replay, or
        // a concurrent append of the same event) asks which events are stored already.
        let (seqs, passed) = match self.append_stored(&stored).await {
            Err(Error::Store(StoreError::Conflict(_))) => {
                let ids: Vec<&str> = stored.iter().map(|e| e.event_id.as_str()).collect();
                let known = self.store.known_events(&ids).await?;
                hints.retain(|(event_id, ..)| !known.contains(event_id));
                stored.retain(|e| !known.contains(&e.event_id));
                self.append_stored(&stored).await?
            }
            appended => appended?,
        };
        let appended = stored.len() as u32;
        // Read-fanout groups whose conversation moved on: the latest seq of each, one live
        // hint per group however many of its messages this batch holds.
        let mut advanced: HashMap<i64, (String, i64)> = HashMap::new();
        for (_, group, conversation, seq) in hints {
            let latest = advanced.entry(group).or_insert((conversation, 0));
            latest.1 = latest.1.max(seq);
        }
        if let Some(relay) = &self.webhooks
            && stored.iter().any(|e| e.hook.is_some())
        {
            relay.notify_one();
        }
        self.mark_senders(passed).await;
        self.notify(&stored, &seqs).await;
        self.advance(advanced).await;
        Ok(Appended {
            appended,
            duplicates: total - appended,
        })
    }

    /// The receipt messages the events' senders pass (read before the append stores their
    /// new watermarks), then the append itself.
    async fn append_stored(
        &self,
        stored: &[StoredEvent],
    ) -> Result<(Vec<Vec<i64>>, Vec<(i64, String, Vec<Receipt>)>), Error> {
        if stored.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let passed = self.passed_by_senders(stored).await?;
        Ok((self.store.append(stored).await?, passed))
    }

    /// Pushes each event's entries (`seqs`: by event and recipient) to their users. When an
    /// event reaches [`WAITED_FANOUT`] recipients or more, the append waits for the push:
    /// a group's members recur in every one of its messages, so the next append that
    /// gathers more of them writes each member's inbox pages once for all of them, and a
    /// busy relay's batches grow while it waits. A direct append's recipients rarely recur,
    /// and it returns as soon as its entries are stored.
    async fn notify(&self, stored: &[StoredEvent], seqs: &[Vec<i64>]) {
        let mut per_user: std::collections::HashMap<i64, Vec<Entry>> =
            std::collections::HashMap::new();
        for (event, seqs) in stored.iter().zip(seqs) {
            for (user, sync_seq) in event.recipients.iter().zip(seqs) {
                per_user.entry(*user).or_default().push(Entry {
                    sync_seq: *sync_seq,
                    payload: event.payload.clone(),
                });
            }
        }
        if per_user.is_empty() {
            return;
        }
        let deliveries = per_user.into_iter().collect();
        let delivered = if stored.iter().any(|e| e.recipients.len() >= WAITED_FANOUT) {
            self.notifier.deliver_and_wait(deliveries).await
        } else {
            self.notifier.deliver(deliveries).await
        };
        if let Err(e) = delivered {
            tracing::warn!(error = %format!("{e:#}"), "live delivery failed; devices will catch up by pulling");
        }
    }

    /// Tells the gateways holding members of each group that its conversation moved on
    /// (best effort: members also catch up through History).
    async fn advance(&self, advanced: HashMap<i64, (String, i64)>) {
        if advanced.is_empty() {
            return;
        }
        let events = advanced
            .into_iter()
            .map(|(group, (conversation, seq))| (group, (self.encode.advanced)(&conversation, seq)))
            .collect();
        if let Err(e) = self.notifier.deliver_to_groups(events).await {
            tracing::warn!(error = %format!("{e:#}"), "live group hints failed; members catch up through History");
        }
    }

    /// Drops inbox entries older than `retention` (the messages themselves stay in
    /// message-svc's history); returns how many went.
    pub async fn purge(&self, retention: std::time::Duration) -> Result<u64, Error> {
        let cutoff = imesh_kit::ids::unix_ms() - retention.as_millis() as i64;
        Ok(self
            .store
            .purge_before(imesh_kit::ids::first_id_at(cutoff))
            .await?)
    }

    /// `user`'s entries after `after`, oldest first; `has_more` when the page was full.
    pub async fn pull(
        &self,
        user: i64,
        after: i64,
        limit: u32,
    ) -> Result<(Vec<Entry>, bool), Error> {
        if after < 0 {
            return Err(invalid("after_sync_seq", "must not be negative"));
        }
        let limit = match limit {
            0 => DEFAULT_PULL,
            1..=MAX_PULL => limit,
            _ => return Err(invalid("limit", format!("must be at most {MAX_PULL}"))),
        };
        let mut entries = self.store.entries(user, after, limit + 1).await?;
        let has_more = entries.len() > limit as usize;
        entries.truncate(limit as usize);
        Ok((entries, has_more))
    }

    /// Records that `device` has every entry up to `sync_seq`; returns the device's cursor,
    /// which never moves back.
    pub async fn ack(&self, user: i64, device: &str, sync_seq: i64) -> Result<i64, Error> {
        if device.is_empty() || device.len() > 64 {
            return Err(invalid("device_id", "must be 1–64 characters"));
        }
        if sync_seq < 0 {
            return Err(invalid("sync_seq", "must not be negative"));
        }
        Ok(self.store.ack(user, device, sync_seq).await?)
    }

    /// [`Self::ack`] for many devices of many users at once (a gateway's coalesced acks).
    pub async fn ack_many(&self, acks: Vec<(i64, String, i64)>) -> Result<(), Error> {
        if acks.is_empty() || acks.len() > MAX_ACKS {
            return Err(invalid("acks", format!("must hold 1–{MAX_ACKS} acks")));
        }
        for (user, device, sync_seq) in &acks {
            if *user <= 0 {
                return Err(invalid("acks.user_id", "must be a user id"));
            }
            if device.is_empty() || device.len() > 64 {
                return Err(invalid("acks.device_id", "must be 1–64 characters"));
            }
            if *sync_seq < 0 {
                return Err(invalid("acks.sync_seq", "must not be negative"));
            }
        }
        Ok(self.store.ack_many(&acks).await?)
    }
}

/// Most acks one [`Inboxes::ack_many`] call takes.
pub const MAX_ACKS: usize = 1000;

#[cfg(test)]
mod tests;
