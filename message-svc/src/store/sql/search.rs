//! Full-text search of text messages with each database's own index: an FTS5 table on
//! SQLite (contentless: it keeps the index, not a second copy of the text), a GIN index
//! over `to_tsvector('simple', body)` on PostgreSQL, a FULLTEXT index on MySQL. Words are
//! split by each backend's rules (Unicode letters and digits; none of them segments CJK
//! text into words).
//!
//! SQLite's index is filled behind the writes ([`SearchIndex`]): writing its pages in every
//! group commit made a message's transaction half again as long on disk. A search first
//! indexes whatever is pending, so it finds every message committed before it.

use std::time::Duration;

use imesh_kit::error::StoreError;
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DatabaseBackend, DatabaseConnection, EntityTrait,
    QueryFilter, QueryOrder, QuerySelect, Statement,
};
use sea_orm_migration::prelude::*;

use super::{Kind, messages, to_message};
use crate::domain::{Message, SearchScope};

pub(super) async fn search(
    db: &DatabaseConnection,
    terms: &[String],
    scope: &SearchScope,
    before: i64,
    limit: u32,
) -> Result<Vec<Message>, StoreError> {
    use messages::Column as C;
    let matching = match db.get_database_backend() {
        DatabaseBackend::Sqlite => {
            let phrase: Vec<String> = terms.iter().map(|t| format!("\"{t}\"")).collect();
            Expr::cust_with_values(
                "msg_id IN (SELECT rowid FROM message_search WHERE message_search MATCH ?)",
                [phrase.join(" ")],
            )
        }
        DatabaseBackend::Postgres => Expr::cust_with_values(
            "to_tsvector('simple', body) @@ plainto_tsquery('simple', $1)",
            [terms.join(" ")],
        ),
        // MySQL and MariaDB.
        _ => {
            let required: Vec<String> = terms.iter().map(|t| format!("+\"{t}\"")).collect();
            Expr::cust_with_values(
                "MATCH (body) AGAINST (? IN BOOLEAN MODE)",
                [required.join(" ")],
            )
        }
    };
    let within = match scope {
        SearchScope::Conversation {
            conversation_id,
            after,
            up_to,
        } => Condition::all()
            .add(C::ConversationId.eq(conversation_id.as_str()))
            .add(C::Seq.gt(*after))
            .add(C::Seq.lte(*up_to)),
        SearchScope::User { user, groups } => {
            let mut own: Vec<String> = groups.iter().map(|g| format!("g:{g}")).collect();
            own.push(format!("s:{user}"));
            Condition::any()
                .add(C::ConversationId.is_in(own))
                .add(C::ConversationId.like(format!("d:{user}:%")))
                .add(C::ConversationId.like(format!("d:%:{user}")))
        }
    };
    let mut find = messages::Entity::find()
        .filter(C::Kind.eq(Kind::Text as i16))
        .filter(C::RecalledBy.eq(0))
        .filter(matching)
        .filter(within);
    if before > 0 {
        find = find.filter(C::MsgId.lt(before));
    }
    let rows = find
        .order_by(C::MsgId, sea_orm::Order::Desc)
        .limit(u64::from(limit))
        .all(db)
        .await?;
    rows.into_iter().map(to_message).collect()
}

/// SQLite's search index, filled from `message_search_pending` in transactions of its own:
/// after each commit that stored messages, once [`SearchIndex::LINGER`] has gathered more,
/// and before every search. Each transaction takes at most [`INDEX_CHUNK`] messages, so
/// group commits take turns with it on `imesh up`'s one writing connection: at 10,000
/// sends a second the 2,500 messages of one linger held it 9–23 ms in one transaction.
#[derive(Clone)]
pub(super) struct SearchIndex {
    db: DatabaseConnection,
    wrote: tokio::sync::mpsc::Sender<()>,
}

/// Pending messages one index transaction takes at most (about 1 ms of the writer's time).
const INDEX_CHUNK: u32 = 256;

/// Indexes the oldest [`INDEX_CHUNK`] pending messages up to `newest` as they stand (an edit
/// or recall made while pending is already in them) and takes them off the list, in one
/// transaction (which holds the write lock throughout, so both statements see the same
/// messages).
fn index_chunk(newest: i64) -> [Statement; 2] {
    let oldest = format!(
        "SELECT msg_id FROM message_search_pending WHERE msg_id <= ? \
         ORDER BY msg_id LIMIT {INDEX_CHUNK}"
    );
    let insert = format!(
        "INSERT INTO message_search(rowid, body) SELECT m.msg_id, m.body \
         FROM ({oldest}) p JOIN messages m ON m.msg_id = p.msg_id \
         WHERE m.kind = 1 AND m.recalled_by = 0"
    );
    let delete = format!("DELETE FROM message_search_pending WHERE msg_id IN ({oldest})");
    [insert, delete]
        .map(|sql| Statement::from_sql_and_values(DatabaseBackend::Sqlite, sql, [newest.into()]))
}

impl SearchIndex {
    /// How long indexing waits after a commit, so one index transaction takes many.
    const LINGER: Duration = Duration::from_millis(250);

    /// Starts indexing on the current runtime (what a stop left pending first); it ends
    /// once every clone is dropped.
    pub(super) fn spawn(db: DatabaseConnection) -> Self {
        let (wrote, mut written) = tokio::sync::mpsc::channel(1);
        let index = Self { db, wrote };
        let indexing = index.db.clone();
        tokio::spawn(async move {
            loop {
                if let Err(e) = index_pending(&indexing).await {
                    tracing::warn!(error = %e, "indexing messages for search failed; next commit");
                }
                if written.recv().await.is_none() {
                    return;
                }
                tokio::time::sleep(Self::LINGER).await;
            }
        });
        index
    }

    /// Tells indexing that messages were committed.
    pub(super) fn wrote(&self) {
        let _ = self.wrote.try_send(());
    }

    /// Indexes everything committed so far. Looks through `reads` first, so a search
    /// with nothing pending takes no write lock.
    pub(super) async fn catch_up(&self, reads: &DatabaseConnection) -> Result<(), StoreError> {
        let newest = newest_pending(reads, i64::MAX).await?;
        index_up_to(&self.db, newest).await
    }
}

/// Indexes what is pending now, a chunk a transaction. What is committed meanwhile waits
/// for the next run, so under a steady load a run still ends and the next one lingers.
async fn index_pending(db: &DatabaseConnection) -> Result<(), StoreError> {
    index_up_to(db, newest_pending(db, i64::MAX).await?).await
}

/// Indexes the messages pending at or below `up_to`, a chunk a transaction.
async fn index_up_to(db: &DatabaseConnection, mut up_to: Option<i64>) -> Result<(), StoreError> {
    while let Some(newest) = up_to {
        imesh_kit::sql::commit(db, &index_chunk(newest)).await?;
        up_to = newest_pending(db, newest).await?;
    }
    Ok(())
}

/// The newest message pending at or below `up_to`.
async fn newest_pending(db: &DatabaseConnection, up_to: i64) -> Result<Option<i64>, StoreError> {
    let sql = "SELECT max(msg_id) AS newest FROM message_search_pending WHERE msg_id <= ?";
    let statement = Statement::from_sql_and_values(DatabaseBackend::Sqlite, sql, [up_to.into()]);
    let found = db.query_one_raw(statement).await?;
    Ok(found
        .map(|row| row.try_get::<Option<i64>>("", "newest"))
        .transpose()?
        .flatten())
}
