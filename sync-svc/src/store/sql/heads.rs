//! Inbox heads: the last `sync_seq` of each user's inbox, advanced in the transaction that
//! appends the entries.
//!
//! A user's entries must become visible in `sync_seq` order, or a device pulling "after
//! my cursor" while an earlier seq is still uncommitted moves its cursor past it and never
//! sees it. So seqs are not taken ahead of the commit: an append advances the heads of its
//! recipients in its own transaction and numbers its entries below the new heads. On
//! PostgreSQL and MySQL the advance locks the heads until the commit, so appends to the
//! same users queue there (in user order, never in a deadlock on PostgreSQL; MySQL's gap
//! locks on heads not yet written can still deadlock two appends, which then run again).
//! On SQLite, which takes one writer at a time anyway, a process's appends take turns:
//! each reads the heads, numbers, and writes entries and raised heads in one trip. An
//! append that still raced
//! another to a seq (two processes on one SQLite file) finds `(user_id, sync_seq)` taken,
//! stores nothing, and numbers again. Seq N + 1 is only ever
//! written by an append that saw N committed: commit order is seq order, with any number
//! of appenders (sync-svc replicas, concurrent relays).

use std::collections::{BTreeMap, HashMap};

use imesh_kit::sql::Merge;
use sea_orm::{ConnectionTrait, DatabaseBackend, DatabaseTransaction, DbErr, Statement};
use sea_orm_migration::prelude::*;

use super::CHUNK;
use crate::domain::StoredEvent;

#[derive(Iden)]
pub(super) enum InboxHeads {
    Table,
    UserId,
    LastSeq,
}

/// SQLite's heads as this process last committed them. Appends take turns in a process,
/// so a cached head is the stored one unless another process wrote the same file; then
/// the append collides with that process's seqs, stores nothing, and numbers again after
/// [`HeadsCache::forget`]. Bounded: emptied past [`CACHED_HEADS`] users or once
/// [`CACHED_FOR`] old, so a head another process moved is never trusted for long.
#[derive(Default)]
pub(super) struct HeadsCache(parking_lot::Mutex<Cached>);

#[derive(Default)]
struct Cached {
    heads: HashMap<i64, i64>,
    since: Option<std::time::Instant>,
}

/// Most users whose heads one process keeps.
const CACHED_HEADS: usize = 100_000;
/// How long cached heads are trusted.
const CACHED_FOR: std::time::Duration = std::time::Duration::from_secs(60);

impl HeadsCache {
    /// The cached heads among `counts`' users, and the counts of those not cached.
    pub(super) fn split(
        &self,
        counts: &BTreeMap<i64, i64>,
    ) -> (HashMap<i64, i64>, BTreeMap<i64, i64>) {
        let mut cached = self.0.lock();
        if cached
            .since
            .is_some_and(|since| since.elapsed() > CACHED_FOR)
        {
            *cached = Cached::default();
        }
        let mut found = HashMap::new();
        let mut missing = BTreeMap::new();
        for (user, count) in counts {
            match cached.heads.get(user) {
                Some(head) => {
                    found.insert(*user, *head);
                }
                None => {
                    missing.insert(*user, *count);
                }
            }
        }
        (found, missing)
    }

    /// Remembers heads an append committed.
    pub(super) fn committed(&self, heads: &HashMap<i64, i64>) {
        let mut cached = self.0.lock();
        if cached.heads.len() + heads.len() > CACHED_HEADS {
            *cached = Cached::default();
        }
        cached.since.get_or_insert_with(std::time::Instant::now);
        cached.heads.extend(heads);
    }

    /// Forgets the heads of `counts`' users (an append that failed, maybe on a head
    /// another process moved).
    pub(super) fn forget(&self, counts: &BTreeMap<i64, i64>) {
        let mut cached = self.0.lock();
        for user in counts.keys() {
            cached.heads.remove(user);
        }
    }
}

/// How many entries the events give each recipient, by user.
pub(super) fn counts(events: &[StoredEvent]) -> BTreeMap<i64, i64> {
    let mut counts = BTreeMap::new();
    for user in events.iter().flat_map(|e| &e.recipients) {
        *counts.entry(*user).or_default() += 1;
    }
    counts
}

/// The heads of the users `counts` names (none for users without an entry yet), as
/// stored: SQLite's, where the caller's turn keeps them current.
pub(super) async fn read(
    conn: &impl ConnectionTrait,
    counts: &BTreeMap<i64, i64>,
) -> Result<HashMap<i64, i64>, DbErr> {
    let users: Vec<i64> = counts.keys().copied().collect();
    let mut heads = HashMap::with_capacity(users.len());
    for chunk in users.chunks(CHUNK) {
        for row in conn.query_all(&select(chunk)).await? {
            heads.insert(row.try_get("", "user_id")?, row.try_get("", "last_seq")?);
        }
    }
    Ok(heads)
}

/// Advances each user's head by their count in `txn`, which holds the heads locked until
/// it ends (PostgreSQL, MySQL; on SQLite this first write takes the database's one write
/// lock); returns the heads as they were before.
pub(super) async fn advance(
    txn: &DatabaseTransaction,
    counts: &BTreeMap<i64, i64>,
) -> Result<HashMap<i64, i64>, DbErr> {
    let backend = txn.get_database_backend();
    let counts_of: Vec<(i64, i64)> = counts.iter().map(|(u, c)| (*u, *c)).collect();
    let mut before = HashMap::with_capacity(counts.len());
    for chunk in counts_of.chunks(CHUNK) {
        let advance = advance_statement(backend, chunk);
        let heads = if backend == DatabaseBackend::Postgres {
            txn.query_all_raw(advance).await?
        } else {
            txn.execute_raw(advance).await?;
            let users: Vec<i64> = chunk.iter().map(|(u, _)| *u).collect();
            txn.query_all(&select(&users)).await?
        };
        before.extend(before_advance(&heads, counts)?);
    }
    Ok(before)
}

/// The statement advancing each user's head by their count, in user order as `counts`
/// gives them (so two appends lock shared heads in the same order); on PostgreSQL it
/// returns the heads after (`user_id`, `last_seq`).
pub(super) fn advance_statement(backend: DatabaseBackend, counts: &[(i64, i64)]) -> Statement {
    let rows = counts.iter().map(|(u, c)| vec![(*u).into(), (*c).into()]);
    let mut advance = imesh_kit::sql::upsert(
        backend,
        "inbox_heads",
        &["user_id", "last_seq"],
        &["user_id"],
        &[Merge::Add("last_seq")],
        rows.collect(),
    );
    if backend == DatabaseBackend::Postgres {
        advance.sql.push_str(" RETURNING user_id, last_seq");
    }
    advance
}

/// The heads before an advance by `counts`, from the heads after it (`user_id`,
/// `last_seq` rows).
pub(super) fn before_advance(
    advanced: &[sea_orm::QueryResult],
    counts: &BTreeMap<i64, i64>,
) -> Result<HashMap<i64, i64>, DbErr> {
    let mut before = HashMap::with_capacity(advanced.len());
    for row in advanced {
        let user: i64 = row.try_get("", "user_id")?;
        let last: i64 = row.try_get("", "last_seq")?;
        before.insert(user, last - counts[&user]);
    }
    Ok(before)
}

fn select(users: &[i64]) -> SelectStatement {
    Query::select()
        .columns([InboxHeads::UserId, InboxHeads::LastSeq])
        .from(InboxHeads::Table)
        .and_where(Expr::col(InboxHeads::UserId).is_in(users.iter().copied()))
        .to_owned()
}

/// Numbers each event's recipients after the heads `before`, in event order: the seqs of
/// each event (by recipient) and the heads after.
pub(super) fn number(
    events: &[StoredEvent],
    mut heads: HashMap<i64, i64>,
) -> (Vec<Vec<i64>>, HashMap<i64, i64>) {
    let seqs = events
        .iter()
        .map(|event| {
            event
                .recipients
                .iter()
                .map(|user| {
                    let head = heads.entry(*user).or_insert(0);
                    *head += 1;
                    *head
                })
                .collect()
        })
        .collect();
    (seqs, heads)
}

/// The statements raising the stored heads to `heads` (never lowering one): SQLite's
/// writes of what [`read`] and [`number`] found.
pub(super) fn raise(backend: DatabaseBackend, heads: &HashMap<i64, i64>) -> Vec<Statement> {
    let rows: Vec<Vec<sea_orm::Value>> = heads
        .iter()
        .map(|(user, seq)| vec![(*user).into(), (*seq).into()])
        .collect();
    rows.chunks(CHUNK)
        .map(|chunk| {
            imesh_kit::sql::upsert_max(
                backend,
                "inbox_heads",
                &["user_id", "last_seq"],
                &["user_id"],
                &["last_seq"],
                chunk.to_vec(),
            )
        })
        .collect()
}
