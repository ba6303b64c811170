//! Reactions in SQL: a row per user and emoji of a message, a total per message and emoji
//! (history reads totals, never counts rows), and the marks of messages whose reactions
//! moved in conversations that hear of them coalesced.

use std::collections::{HashMap, HashSet};

use imesh_kit::{
    error::StoreError,
    outbox::{self, OutboxRow},
};
use sea_orm::{ConnectionTrait, DatabaseConnection, TransactionTrait};
use sea_orm_migration::prelude::*;

use crate::{
    domain::{MovedReactions, ReactOutcome, ReactionChange, ReactionCount},
    store::OUTBOX_TABLE,
};

#[derive(Iden, Clone, Copy)]
pub(super) enum Reactions {
    Table,
    ConversationId,
    Seq,
    Emoji,
    UserId,
    ReactedAtMs,
}

#[derive(Iden, Clone, Copy)]
pub(super) enum ReactionTotals {
    Table,
    ConversationId,
    Seq,
    Emoji,
    Total,
}

#[derive(Iden, Clone, Copy)]
pub(super) enum ReactionMarks {
    Table,
    ConversationId,
    Seq,
    Changes,
}

/// Emojis are stored as bytes: MySQL's default collations compare many emojis as equal.
fn bytes(emoji: &str) -> Vec<u8> {
    emoji.as_bytes().to_vec()
}

fn text(row: &sea_orm::QueryResult, column: &str) -> Result<String, StoreError> {
    let raw: Vec<u8> = row.try_get("", column)?;
    String::from_utf8(raw)
        .map_err(|e| StoreError::Unavailable(anyhow::anyhow!("a stored emoji: {e}")))
}

pub(super) async fn react(
    db: &DatabaseConnection,
    change: &ReactionChange,
    max_emojis: usize,
    event: Option<OutboxRow>,
) -> Result<ReactOutcome, StoreError> {
    let txn = db.begin().await?;
    let outcome = apply(&txn, change, max_emojis).await?;
    if outcome != ReactOutcome::Changed {
        txn.rollback().await?;
        return Ok(outcome);
    }
    match event {
        Some(event) => outbox::insert(&txn, OUTBOX_TABLE, &[event]).await?,
        None => mark_moved(&txn, &change.conversation_id, change.seq).await?,
    }
    txn.commit().await?;
    Ok(outcome)
}

/// The change itself, inside the caller's transaction. Its first statement writes the
/// message's row (to itself), which serializes changes to one message on every backend
/// (and on SQLite takes the write lock before anything is read).
async fn apply(
    txn: &impl ConnectionTrait,
    c: &ReactionChange,
    max_emojis: usize,
) -> Result<ReactOutcome, StoreError> {
    let version = Alias::new("version");
    let lock = Query::update()
        .table(Alias::new("messages"))
        .value(version.clone(), Expr::col(version))
        .and_where(Expr::col(Alias::new("conversation_id")).eq(c.conversation_id.as_str()))
        .and_where(Expr::col(Alias::new("seq")).eq(c.seq))
        .to_owned();
    txn.execute(&lock).await?;
    // The user's reaction row; the message's totals; its total of this emoji.
    let own = Condition::all()
        .add(Expr::col(Reactions::ConversationId).eq(c.conversation_id.as_str()))
        .add(Expr::col(Reactions::Seq).eq(c.seq))
        .add(Expr::col(Reactions::Emoji).eq(bytes(&c.emoji)))
        .add(Expr::col(Reactions::UserId).eq(c.user_id));
    let totals = Condition::all()
        .add(Expr::col(ReactionTotals::ConversationId).eq(c.conversation_id.as_str()))
        .add(Expr::col(ReactionTotals::Seq).eq(c.seq));
    let total = totals
        .clone()
        .add(Expr::col(ReactionTotals::Emoji).eq(bytes(&c.emoji)));
    let mine = Query::select()
        .column(Reactions::UserId)
        .from(Reactions::Table)
        .cond_where(own.clone())
        .to_owned();
    let present = txn.query_one(&mine).await?.is_some();
    if present == c.added {
        return Ok(ReactOutcome::Unchanged);
    }
    if c.added {
        let emojis = Query::select()
            .column(ReactionTotals::Emoji)
            .from(ReactionTotals::Table)
            .cond_where(totals)
            .to_owned();
        let emojis: HashSet<String> = txn
            .query_all(&emojis)
            .await?
            .iter()
            .map(|r| text(r, "emoji"))
            .collect::<Result<_, _>>()?;
        let known = emojis.contains(&c.emoji);
        if !known && emojis.len() >= max_emojis {
            return Ok(ReactOutcome::Full);
        }
        let insert = Query::insert()
            .into_table(Reactions::Table)
            .columns([
                Reactions::ConversationId,
                Reactions::Seq,
                Reactions::Emoji,
                Reactions::UserId,
                Reactions::ReactedAtMs,
            ])
            .values_panic([
                c.conversation_id.as_str().into(),
                c.seq.into(),
                bytes(&c.emoji).into(),
                c.user_id.into(),
                c.at_ms.into(),
            ])
            .to_owned();
        txn.execute(&insert).await?;
        if known {
            let raise = Query::update()
                .table(ReactionTotals::Table)
                .value(
                    ReactionTotals::Total,
                    Expr::col(ReactionTotals::Total).add(1),
                )
                .cond_where(total.clone())
                .to_owned();
            txn.execute(&raise).await?;
        } else {
            let first = Query::insert()
                .into_table(ReactionTotals::Table)
                .columns([
                    ReactionTotals::ConversationId,
                    ReactionTotals::Seq,
                    ReactionTotals::Emoji,
                    ReactionTotals::Total,
                ])
                .values_panic([
                    c.conversation_id.as_str().into(),
                    c.seq.into(),
                    bytes(&c.emoji).into(),
                    1i64.into(),
                ])
                .to_owned();
            txn.execute(&first).await?;
        }
    } else {
        let delete = Query::delete()
            .from_table(Reactions::Table)
            .cond_where(own)
            .to_owned();
        txn.execute(&delete).await?;
        let lower = Query::update()
            .table(ReactionTotals::Table)
            .value(
                ReactionTotals::Total,
                Expr::col(ReactionTotals::Total).sub(1),
            )
            .cond_where(total.clone())
            .to_owned();
        txn.execute(&lower).await?;
        let emptied = Query::delete()
            .from_table(ReactionTotals::Table)
            .cond_where(total.clone())
            .and_where(Expr::col(ReactionTotals::Total).lte(0))
            .to_owned();
        txn.execute(&emptied).await?;
    }
    Ok(ReactOutcome::Changed)
}

/// Counts one more change on the message's mark, creating it at 1.
async fn mark_moved(
    txn: &impl ConnectionTrait,
    conversation_id: &str,
    seq: i64,
) -> Result<(), StoreError> {
    let raise = Query::update()
        .table(ReactionMarks::Table)
        .value(
            ReactionMarks::Changes,
            Expr::col(ReactionMarks::Changes).add(1),
        )
        .and_where(Expr::col(ReactionMarks::ConversationId).eq(conversation_id))
        .and_where(Expr::col(ReactionMarks::Seq).eq(seq))
        .to_owned();
    if txn.execute(&raise).await?.rows_affected() == 0 {
        let first = Query::insert()
            .into_table(ReactionMarks::Table)
            .columns([
                ReactionMarks::ConversationId,
                ReactionMarks::Seq,
                ReactionMarks::Changes,
            ])
            .values_panic([conversation_id.into(), seq.into(), 1i64.into()])
            .to_owned();
        txn.execute(&first).await?;
    }
    Ok(())
}

pub(super) async fn reactions(
    db: &DatabaseConnection,
    conversation_id: &str,
    seqs: &[i64],
    reader: i64,
) -> Result<HashMap<i64, Vec<ReactionCount>>, StoreError> {
    if seqs.is_empty() {
        return Ok(HashMap::new());
    }
    let (t, r) = (ReactionTotals::Table, Reactions::Table);
    let select = Query::select()
        .column((t, ReactionTotals::Seq))
        .column((t, ReactionTotals::Emoji))
        .column((t, ReactionTotals::Total))
        .column((r, Reactions::UserId))
        .from(t)
        .join(
            JoinType::LeftJoin,
            r,
            Condition::all()
                .add(
                    Expr::col((r, Reactions::ConversationId))
                        .equals((t, ReactionTotals::ConversationId)),
                )
                .add(Expr::col((r, Reactions::Seq)).equals((t, ReactionTotals::Seq)))
                .add(Expr::col((r, Reactions::Emoji)).equals((t, ReactionTotals::Emoji)))
                .add(Expr::col((r, Reactions::UserId)).eq(reader)),
        )
        .and_where(Expr::col((t, ReactionTotals::ConversationId)).eq(conversation_id))
        .and_where(Expr::col((t, ReactionTotals::Seq)).is_in(seqs.iter().copied()))
        .to_owned();
    let mut by_seq: HashMap<i64, Vec<ReactionCount>> = HashMap::new();
    for row in db.query_all(&select).await? {
        let reactor: Option<i64> = row.try_get("", "user_id")?;
        by_seq
            .entry(row.try_get("", "seq")?)
            .or_default()
            .push(ReactionCount {
                emoji: text(&row, "emoji")?,
                count: row.try_get("", "total")?,
                mine: reactor.is_some(),
            });
    }
    for counts in by_seq.values_mut() {
        counts.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.emoji.cmp(&b.emoji)));
    }
    Ok(by_seq)
}

pub(super) async fn reactors(
    db: &DatabaseConnection,
    conversation_id: &str,
    seq: i64,
    emoji: &str,
    after: i64,
    limit: u32,
) -> Result<Vec<i64>, StoreError> {
    let select = Query::select()
        .column(Reactions::UserId)
        .from(Reactions::Table)
        .and_where(Expr::col(Reactions::ConversationId).eq(conversation_id))
        .and_where(Expr::col(Reactions::Seq).eq(seq))
        .and_where(Expr::col(Reactions::Emoji).eq(bytes(emoji)))
        .and_where(Expr::col(Reactions::UserId).gt(after))
        .order_by(Reactions::UserId, Order::Asc)
        .limit(limit.into())
        .to_owned();
    db.query_all(&select)
        .await?
        .iter()
        .map(|r| r.try_get("", "user_id").map_err(Into::into))
        .collect()
}

pub(super) async fn moved(
    db: &DatabaseConnection,
    limit: usize,
) -> Result<Vec<MovedReactions>, StoreError> {
    let select = Query::select()
        .columns([
            ReactionMarks::ConversationId,
            ReactionMarks::Seq,
            ReactionMarks::Changes,
        ])
        .from(ReactionMarks::Table)
        .limit(limit as u64)
        .to_owned();
    db.query_all(&select)
        .await?
        .iter()
        .map(|r| {
            Ok(MovedReactions {
                conversation_id: r.try_get("", "conversation_id")?,
                seq: r.try_get("", "seq")?,
                changes: r.try_get("", "changes")?,
            })
        })
        .collect::<Result<_, sea_orm::DbErr>>()
        .map_err(Into::into)
}

pub(super) async fn forget_moved(
    db: &DatabaseConnection,
    moved: &[MovedReactions],
    events: Vec<OutboxRow>,
) -> Result<(), StoreError> {
    let txn = db.begin().await?;
    outbox::insert(&txn, OUTBOX_TABLE, &events).await?;
    for m in moved {
        let forget = Query::delete()
            .from_table(ReactionMarks::Table)
            .and_where(Expr::col(ReactionMarks::ConversationId).eq(m.conversation_id.as_str()))
            .and_where(Expr::col(ReactionMarks::Seq).eq(m.seq))
            .and_where(Expr::col(ReactionMarks::Changes).eq(m.changes))
            .to_owned();
        txn.execute(&forget).await?;
    }
    txn.commit().await?;
    Ok(())
}
