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
/// it ends (PostgreSQL, MySQL); returns the heads as they were before.
pub(super) async fn advance(
    txn: &DatabaseTransaction,
    counts: &BTreeMap<i64, i64>,
) -> Result<HashMap<i64, i64>, DbErr> {
    let backend = txn.get_database_backend();
    let counts: Vec<(i64, i64)> = counts.iter().map(|(u, c)| (*u, *c)).collect();
    let mut before = HashMap::with_capacity(counts.len());
    for chunk in counts.chunks(CHUNK) {
        let rows = chunk.iter().map(|(u, c)| vec![(*u).into(), (*c).into()]);
        let mut advance = imesh_kit::sql::upsert_query(
            backend,
            "inbox_heads",
            &["user_id", "last_seq"],
            &["user_id"],
            &[Merge::Add("last_seq")],
            rows.collect(),
        );
        let heads = if backend == DatabaseBackend::Postgres {
            advance
                .returning(Query::returning().columns([InboxHeads::UserId, InboxHeads::LastSeq]));
            txn.query_all(&advance).await?
        } else {
            txn.execute(&advance).await?;
            let users: Vec<i64> = chunk.iter().map(|(u, _)| *u).collect();
            txn.query_all(&select(&users)).await?
        };
        let advanced: HashMap<i64, i64> = chunk.iter().copied().collect();
        for row in heads {
            let user: i64 = row.try_get("", "user_id")?;
            let last: i64 = row.try_get("", "last_seq")?;
            before.insert(user, last - advanced[&user]);
        }
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
