//! The sea-orm adapter of [`InboxStore`] and sync-svc's migrations.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::Arc,
};

use async_trait::async_trait;
use imesh_kit::{error::StoreError, sql::insert};
use sea_orm::{ConnectionTrait, DatabaseBackend, DatabaseConnection, DbErr, TransactionTrait};
use sea_orm_migration::prelude::*;

use crate::domain::{ConversationView, Cursor, Entry, PushSettings, Receipt, Settings};
use crate::domain::{InboxStore, StoredEvent};

mod heads;
mod postgres;
mod push;
mod reads;
mod receipts;
mod schema;

pub use schema::Migrator;

#[derive(Iden)]
pub(super) enum SyncEvents {
    Table,
    Id,
    EventId,
    Payload,
}

#[derive(Iden)]
pub(super) enum Inbox {
    Table,
    UserId,
    SyncSeq,
    EventPk,
}

#[derive(Iden)]
pub(super) enum DeviceCursors {
    Table,
    UserId,
    DeviceId,
    AckedSeq,
}

/// Rows per INSERT statement, well under every backend's bind-parameter limit.
const CHUNK: usize = 1000;

/// How many times an append numbers its entries again after racing other appends to
/// the same seqs; then it fails with `Conflict` and its caller retries.
const NUMBERING_ATTEMPTS: u32 = 8;

#[derive(Clone)]
pub struct SqlInboxStore {
    db: DatabaseConnection,
    /// Where pure reads go ([`imesh_kit::sql::readers`]): never behind an append.
    reads: DatabaseConnection,
    known: Arc<reads::KnownStates>,
    /// On SQLite, which takes one writer at a time anyway, this process's appends take
    /// turns, so they never race each other to a seq.
    turns: Option<Arc<tokio::sync::Mutex<()>>>,
    /// SQLite's heads as this process committed them (see [`heads::HeadsCache`]).
    heads: Option<Arc<heads::HeadsCache>>,
}

impl SqlInboxStore {
    pub fn new(db: DatabaseConnection) -> Self {
        let sqlite = db.get_database_backend() == DatabaseBackend::Sqlite;
        Self {
            reads: db.clone(),
            db,
            known: Arc::default(),
            turns: sqlite.then(Arc::default),
            heads: sqlite.then(Arc::default),
        }
    }

    /// Reads through `reads` (connections beside the writer's) instead of the writer's.
    pub fn reading_from(self, reads: DatabaseConnection) -> Self {
        Self { reads, ..self }
    }

    /// Numbers the events' entries after their recipients' heads and stores them, in one
    /// transaction; returns the seqs. On SQLite a first attempt reads the heads before it
    /// writes, in one trip; an attempt after a race advances them first.
    async fn try_append(
        &self,
        events: &[StoredEvent],
        counts: &BTreeMap<i64, i64>,
        first: bool,
    ) -> Result<Vec<Vec<i64>>, DbErr> {
        let backend = self.db.get_database_backend();
        let beside = self.beside(events);
        if backend == DatabaseBackend::Postgres && beside.disjoint && !receipts::asked(events) {
            let seqs = postgres::append(&self.db, events, counts, beside.statements).await?;
            self.known.remember(&beside.created);
            return Ok(seqs);
        }
        let Some(cache) = self.heads.as_ref().filter(|_| first) else {
            let txn = self.db.begin().await?;
            let before = heads::advance(&txn, counts).await?;
            let (seqs, heads) = heads::number(events, before);
            let (statements, created) = self.statements(events, &seqs, beside);
            imesh_kit::sql::execute_all(&txn, statements).await?;
            if receipts::asked(events) {
                // Receipt slots are placed after the conversation's last one, read in the
                // same transaction.
                receipts::allocate(&txn, events).await?;
            }
            txn.commit().await?;
            if let Some(cache) = &self.heads {
                cache.committed(&heads);
            }
            self.known.remember(&created);
            return Ok(seqs);
        };
        // The caller's turn keeps the heads read here current until the commit against
        // this process's appends (another process's may still race it); those this process
        // committed last are not read again.
        let (mut before, missing) = cache.split(counts);
        if !missing.is_empty() {
            before.extend(heads::read(&self.db, &missing).await?);
        }
        let (seqs, heads) = heads::number(events, before);
        let (mut statements, created) = self.statements(events, &seqs, beside);
        statements.extend(heads::raise(backend, &heads));
        if receipts::asked(events) {
            let txn = self.db.begin().await?;
            imesh_kit::sql::execute_all(&txn, statements).await?;
            receipts::allocate(&txn, events).await?;
            txn.commit().await?;
        } else {
            // The writes in one trip.
            imesh_kit::sql::commit(&self.db, &statements).await?;
        }
        cache.committed(&heads);
        self.known.remember(&created);
        Ok(seqs)
    }

    /// The statements storing the events with the entries `seqs` numbers, then those
    /// `beside` them, and the read states they open.
    fn statements(
        &self,
        events: &[StoredEvent],
        seqs: &[Vec<i64>],
        beside: reads::Marks,
    ) -> (Vec<sea_orm::Statement>, Vec<(i64, String)>) {
        let backend = self.db.get_database_backend();
        // In (user, seq) order, as every append takes its rows: appends racing to the same
        // seqs wait on each other in one order, never in a deadlock.
        let mut entries: Vec<(i64, i64, i64)> = events
            .iter()
            .zip(seqs)
            .flat_map(|(e, seqs)| e.recipients.iter().zip(seqs).map(|(u, s)| (*u, *s, e.id)))
            .collect();
        entries.sort_unstable();
        let mut statements = inserts(backend, events, &entries);
        statements.extend(beside.statements);
        (statements, beside.created)
    }

    /// The statements of what the events change beside their entries: the read states
    /// and conversation states their marks move, and their webhook events.
    fn beside(&self, events: &[StoredEvent]) -> reads::Marks {
        let backend = self.db.get_database_backend();
        let mut marks = reads::marks(backend, events, &self.known);
        let hooks: Vec<imesh_kit::outbox::OutboxRow> = events
            .iter()
            .filter_map(|e| {
                Some(imesh_kit::outbox::OutboxRow {
                    id: e.id,
                    payload: e.hook.clone()?,
                })
            })
            .collect();
        if !hooks.is_empty() {
            marks.statements.push(imesh_kit::outbox::insert_statement(
                backend,
                super::WEBHOOK_TABLE,
                &hooks,
            ));
        }
        marks
    }
}

/// The events and their inbox entries, the entries `CHUNK` rows a statement.
fn inserts(
    backend: DatabaseBackend,
    events: &[StoredEvent],
    entries: &[(i64, i64, i64)],
) -> Vec<sea_orm::Statement> {
    let entries = entries.chunks(CHUNK).map(|chunk| {
        let rows = (chunk.iter())
            .map(|(user, seq, event)| vec![(*user).into(), (*seq).into(), (*event).into()])
            .collect();
        insert(backend, "inbox", &["user_id", "sync_seq", "event_pk"], rows)
    });
    std::iter::once(insert_events(backend, events))
        .chain(entries)
        .collect()
}

/// The insert of the events themselves.
fn insert_events(backend: DatabaseBackend, events: &[StoredEvent]) -> sea_orm::Statement {
    let rows = (events.iter())
        .map(|e| {
            vec![
                e.id.into(),
                e.event_id.clone().into(),
                e.payload.to_vec().into(),
            ]
        })
        .collect();
    insert(backend, "sync_events", &["id", "event_id", "payload"], rows)
}

#[async_trait]
impl InboxStore for SqlInboxStore {
    async fn known_events(&self, event_ids: &[&str]) -> Result<HashSet<String>, StoreError> {
        if event_ids.is_empty() {
            return Ok(HashSet::new());
        }
        let stmt = Query::select()
            .column(SyncEvents::EventId)
            .from(SyncEvents::Table)
            .and_where(Expr::col(SyncEvents::EventId).is_in(event_ids.iter().copied()))
            .to_owned();
        let rows = self.db.query_all(&stmt).await?;
        rows.iter()
            .map(|r| r.try_get::<String>("", "event_id").map_err(Into::into))
            .collect()
    }

    async fn append(&self, events: &[StoredEvent]) -> Result<Vec<Vec<i64>>, StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let _turn = match &self.turns {
            Some(turns) => Some(turns.lock().await),
            None => None,
        };
        let counts = heads::counts(events);
        let mut attempt = 1;
        loop {
            let err = match self.try_append(events, &counts, attempt == 1).await {
                Ok(seqs) => return Ok(seqs),
                Err(err) => err,
            };
            if let Some(cache) = &self.heads {
                cache.forget(&counts);
            }
            // Another append took one of the seqs first (unless an event is a replay), or
            // MySQL's gap locks on heads not yet written deadlocked two appends.
            let raced = match err.sql_err() {
                Some(sea_orm::SqlErr::UniqueConstraintViolation(_)) => {
                    let ids: Vec<&str> = events.iter().map(|e| e.event_id.as_str()).collect();
                    self.known_events(&ids).await?.is_empty()
                }
                _ => imesh_kit::sql::is_deadlock(&err),
            };
            if !raced || attempt == NUMBERING_ATTEMPTS {
                return Err(err.into());
            }
            attempt += 1;
        }
    }

    async fn entries(&self, user: i64, after: i64, limit: u32) -> Result<Vec<Entry>, StoreError> {
        let stmt = Query::select()
            .column((Inbox::Table, Inbox::SyncSeq))
            .column((SyncEvents::Table, SyncEvents::Payload))
            .from(Inbox::Table)
            .inner_join(
                SyncEvents::Table,
                Expr::col((SyncEvents::Table, SyncEvents::Id))
                    .equals((Inbox::Table, Inbox::EventPk)),
            )
            .and_where(Expr::col((Inbox::Table, Inbox::UserId)).eq(user))
            .and_where(Expr::col((Inbox::Table, Inbox::SyncSeq)).gt(after))
            .order_by((Inbox::Table, Inbox::SyncSeq), Order::Asc)
            .limit(u64::from(limit))
            .to_owned();
        let rows = self.reads.query_all(&stmt).await?;
        rows.iter()
            .map(|r| {
                Ok(Entry {
                    sync_seq: r.try_get("", "sync_seq")?,
                    payload: r.try_get::<Vec<u8>>("", "payload")?.into(),
                })
            })
            .collect::<Result<_, sea_orm::DbErr>>()
            .map_err(Into::into)
    }

    async fn purge_before(&self, event_id: i64) -> Result<u64, StoreError> {
        let txn = self.db.begin().await?;
        let entries = Query::delete()
            .from_table(Inbox::Table)
            .and_where(Expr::col(Inbox::EventPk).lt(event_id))
            .to_owned();
        let purged = txn.execute(&entries).await?.rows_affected();
        let events = Query::delete()
            .from_table(SyncEvents::Table)
            .and_where(Expr::col(SyncEvents::Id).lt(event_id))
            .to_owned();
        txn.execute(&events).await?;
        txn.commit().await?;
        Ok(purged)
    }

    async fn ack(&self, user: i64, device: &str, sync_seq: i64) -> Result<i64, StoreError> {
        let backend = self.db.get_database_backend();
        let raise = imesh_kit::sql::upsert_max(
            backend,
            "device_cursors",
            &["user_id", "device_id", "acked_seq"],
            &["user_id", "device_id"],
            &["acked_seq"],
            vec![vec![user.into(), device.into(), sync_seq.into()]],
        );
        self.db.execute_raw(raise).await?;
        let stmt = Query::select()
            .column(DeviceCursors::AckedSeq)
            .from(DeviceCursors::Table)
            .and_where(Expr::col(DeviceCursors::UserId).eq(user))
            .and_where(Expr::col(DeviceCursors::DeviceId).eq(device))
            .to_owned();
        let row = self
            .db
            .query_one(&stmt)
            .await?
            .ok_or(StoreError::NotFound)?;
        Ok(row.try_get("", "acked_seq")?)
    }

    async fn ack_many(&self, acks: &[(i64, String, i64)]) -> Result<(), StoreError> {
        // One row per device: an upsert may touch a row once.
        let mut highest: std::collections::BTreeMap<(i64, &str), i64> = Default::default();
        for (user, device, seq) in acks {
            let cursor = highest.entry((*user, device.as_str())).or_default();
            *cursor = Ord::max(*cursor, *seq);
        }
        let rows: Vec<Vec<sea_orm::Value>> = highest
            .into_iter()
            .map(|((user, device), seq)| vec![user.into(), device.into(), seq.into()])
            .collect();
        let backend = self.db.get_database_backend();
        for chunk in rows.chunks(CHUNK / 3) {
            let raise = imesh_kit::sql::upsert_max(
                backend,
                "device_cursors",
                &["user_id", "device_id", "acked_seq"],
                &["user_id", "device_id"],
                &["acked_seq"],
                chunk.to_vec(),
            );
            self.db.execute_raw(raise).await?;
        }
        Ok(())
    }

    async fn read_states(
        &self,
        user: i64,
        conversations: &[&str],
    ) -> Result<Vec<(String, i64, i64)>, StoreError> {
        reads::read_states(&self.reads, user, conversations).await
    }

    async fn latest_seqs(&self, conversations: &[&str]) -> Result<Vec<(String, i64)>, StoreError> {
        reads::latest_seqs(&self.reads, conversations).await
    }

    async fn raise_read(&self, user: i64, marks: &[(String, i64)]) -> Result<(), StoreError> {
        reads::raise_read(&self.db, user, marks).await
    }

    async fn conversations(
        &self,
        user: i64,
        after: Option<&Cursor>,
        limit: u32,
    ) -> Result<Vec<ConversationView>, StoreError> {
        reads::conversations(&self.reads, user, after, limit).await
    }

    async fn read_seqs(&self, of: &[(i64, String)]) -> Result<HashMap<String, i64>, StoreError> {
        reads::read_seqs(&self.reads, of).await
    }

    async fn update_settings(
        &self,
        user: i64,
        conversation_id: &str,
        pinned: Option<bool>,
        muted: Option<bool>,
    ) -> Result<Settings, StoreError> {
        reads::update_settings(&self.db, user, conversation_id, pinned, muted).await
    }

    async fn remove_conversation(
        &self,
        user: i64,
        conversation_id: &str,
        seq: i64,
    ) -> Result<i64, StoreError> {
        reads::remove_conversation(&self.db, user, conversation_id, seq).await
    }

    async fn unread_totals(&self, users: &[i64]) -> Result<HashMap<i64, i64>, StoreError> {
        reads::unread_totals(&self.reads, users).await
    }

    async fn push_settings(&self, users: &[i64]) -> Result<HashMap<i64, PushSettings>, StoreError> {
        push::push_settings(&self.reads, users).await
    }

    async fn set_push_settings(
        &self,
        user: i64,
        settings: &PushSettings,
    ) -> Result<(), StoreError> {
        push::set_push_settings(&self.db, user, settings).await
    }

    async fn muted_among(
        &self,
        of: &[(i64, String)],
    ) -> Result<HashSet<(i64, String)>, StoreError> {
        push::muted_among(&self.reads, of).await
    }

    async fn receipts(&self, conversation: &str, seqs: &[i64]) -> Result<Vec<Receipt>, StoreError> {
        receipts::of_seqs(&self.reads, conversation, seqs).await
    }

    async fn receipts_between(
        &self,
        conversation: &str,
        after: i64,
        upto: i64,
    ) -> Result<Vec<Receipt>, StoreError> {
        receipts::between(&self.reads, conversation, after, upto).await
    }

    async fn receipts_unread_by(
        &self,
        asks: &[(i64, &str, i64)],
    ) -> Result<Vec<(i64, String, Receipt)>, StoreError> {
        receipts::unread_by(&self.reads, asks).await
    }

    async fn readers(&self, conversation: &str) -> Result<Vec<(i64, i64)>, StoreError> {
        reads::readers(&self.reads, conversation).await
    }
}
