//! Receipt messages in SQL: one `receipts` row per message that asked for read receipts,
//! with its map bound and its slot in the conversation's bitmap arena. Slots are handed
//! out inside the append transaction, after the conversation's highest; two appends racing
//! for the same slot collide on the unique `(conversation_id, byte_offset)` and one retries.

use std::collections::HashMap;

use imesh_kit::error::StoreError;
use sea_orm::{ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbErr, QueryResult};
use sea_orm_migration::prelude::*;

use crate::domain::{Change, FIRST_SLOT, Receipt, StoredEvent};

#[derive(Iden)]
pub(super) enum Receipts {
    Table,
    ConversationId,
    Seq,
    SenderId,
    MapBound,
    ByteOffset,
    ByteLen,
}

/// Whether any of the events is a message asking for read receipts.
pub(super) fn asked(events: &[StoredEvent]) -> bool {
    events.iter().any(|event| {
        matches!(
            &event.mark,
            Some(mark) if matches!(mark.change, Change::Message { receipt_bound, .. } if receipt_bound > 0)
        )
    })
}

/// Records the events' receipt messages inside their append transaction.
pub(super) async fn allocate(
    txn: &DatabaseTransaction,
    events: &[StoredEvent],
) -> Result<(), DbErr> {
    let mut asked: HashMap<&str, Vec<(i64, i64, u32)>> = HashMap::new();
    for event in events {
        let Some(mark) = &event.mark else { continue };
        if let Change::Message {
            sender,
            receipt_bound,
            ..
        } = &mark.change
            && *receipt_bound > 0
        {
            let slots = asked.entry(mark.conversation_id.as_str()).or_default();
            slots.push((mark.seq, *sender, *receipt_bound));
        }
    }
    for (conversation, mut messages) in asked {
        messages.sort_unstable();
        let mut offset = next_offset(txn, conversation).await?;
        let mut insert = Query::insert();
        insert.into_table(Receipts::Table).columns([
            Receipts::ConversationId,
            Receipts::Seq,
            Receipts::SenderId,
            Receipts::MapBound,
            Receipts::ByteOffset,
            Receipts::ByteLen,
        ]);
        for (seq, sender, bound) in messages {
            let len = Receipt::slot_len(bound);
            insert.values_panic([
                conversation.into(),
                seq.into(),
                sender.into(),
                i64::from(bound).into(),
                (offset as i64).into(),
                (len as i64).into(),
            ]);
            offset += len;
        }
        txn.execute(&insert).await?;
    }
    Ok(())
}

/// The first free byte of a conversation's arena.
async fn next_offset(txn: &DatabaseTransaction, conversation: &str) -> Result<u64, DbErr> {
    let stmt = Query::select()
        .expr_as(
            Expr::col(Receipts::ByteOffset)
                .add(Expr::col(Receipts::ByteLen))
                .max(),
            Alias::new("arena_end"),
        )
        .from(Receipts::Table)
        .and_where(Expr::col(Receipts::ConversationId).eq(conversation))
        .to_owned();
    let end: Option<i64> = match txn.query_one(&stmt).await? {
        Some(row) => row.try_get("", "arena_end")?,
        None => None,
    };
    Ok(end.map_or(FIRST_SLOT, |end| end as u64))
}

fn select() -> SelectStatement {
    use Receipts as R;
    Query::select()
        .columns([
            (R::Table, R::Seq),
            (R::Table, R::SenderId),
            (R::Table, R::MapBound),
            (R::Table, R::ByteOffset),
        ])
        .from(R::Table)
        .order_by((R::Table, R::Seq), Order::Asc)
        .to_owned()
}

fn receipts_of(rows: &[QueryResult]) -> Result<Vec<Receipt>, StoreError> {
    rows.iter()
        .map(|r| {
            Ok(Receipt {
                seq: r.try_get("", "seq")?,
                sender: r.try_get("", "sender_id")?,
                bound: r.try_get::<i64>("", "map_bound")? as u32,
                offset: r.try_get::<i64>("", "byte_offset")? as u64,
            })
        })
        .collect::<Result<_, DbErr>>()
        .map_err(Into::into)
}

pub(super) async fn of_seqs(
    db: &DatabaseConnection,
    conversation: &str,
    seqs: &[i64],
) -> Result<Vec<Receipt>, StoreError> {
    let stmt = select()
        .and_where(Expr::col(Receipts::ConversationId).eq(conversation))
        .and_where(Expr::col(Receipts::Seq).is_in(seqs.iter().copied()))
        .to_owned();
    receipts_of(&db.query_all(&stmt).await?)
}

pub(super) async fn between(
    db: &DatabaseConnection,
    conversation: &str,
    after: i64,
    upto: i64,
) -> Result<Vec<Receipt>, StoreError> {
    let stmt = select()
        .and_where(Expr::col(Receipts::ConversationId).eq(conversation))
        .and_where(Expr::col(Receipts::Seq).gt(after))
        .and_where(Expr::col(Receipts::Seq).lte(upto))
        .to_owned();
    receipts_of(&db.query_all(&stmt).await?)
}

pub(super) async fn unread_by(
    db: &DatabaseConnection,
    asks: &[(i64, &str, i64)],
) -> Result<Vec<(i64, String, Receipt)>, StoreError> {
    let states = || Alias::new("read_states");
    let column = |name: &str| Expr::col((states(), Alias::new(name)));
    let mut found = Vec::new();
    for chunk in asks.chunks(100) {
        let mut any = Cond::any();
        for (user, conversation, upto) in chunk {
            any = any.add(
                Cond::all()
                    .add(column("user_id").eq(*user))
                    .add(Expr::col((Receipts::Table, Receipts::ConversationId)).eq(*conversation))
                    .add(Expr::col((Receipts::Table, Receipts::Seq)).lte(*upto)),
            );
        }
        let stmt = select()
            .column((states(), Alias::new("user_id")))
            .column((Receipts::Table, Receipts::ConversationId))
            .inner_join(
                states(),
                column("conversation_id").equals((Receipts::Table, Receipts::ConversationId)),
            )
            .and_where(Expr::col((Receipts::Table, Receipts::Seq)).gt(column("read_seq")))
            .cond_where(any)
            .to_owned();
        let rows = db.query_all(&stmt).await?;
        let receipts = receipts_of(&rows)?;
        for (row, receipt) in rows.iter().zip(receipts) {
            let user: i64 = row.try_get("", "user_id")?;
            let conversation: String = row.try_get("", "conversation_id")?;
            found.push((user, conversation, receipt));
        }
    }
    Ok(found)
}
