//! PostgreSQL's statements for the send path, each table's rows bound as arrays
//! ([`Unnest`]): a batch of any size is the same statement, planned once per connection.
//! A batch is one statement, one round trip: the conversations' order check, max seqs and
//! row locks, the messages and their outbox events.

use std::collections::{BTreeMap, HashSet};

use imesh_kit::{
    error::StoreError,
    sql::{Unnest, With},
};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr, Statement, TransactionTrait};

use super::{OUTBOX_TABLE, Seqs, encode_content, encode_mentions, json};
use crate::{domain::Sent, store::commits::Append};

/// Writes `batch` (see [`super::write_appends`]) but for the conversations that are behind
/// (`super::order`), whose messages and events it leaves out; answers those. With file
/// references (`files`) a batch is one transaction, all of it or none: one conversation
/// behind refuses it.
pub(super) async fn write_appends(
    db: &DatabaseConnection,
    batch: &[Append],
    conversations: &BTreeMap<&str, Seqs>,
    files: Option<Statement>,
) -> Result<Vec<String>, StoreError> {
    let write = write_batch(batch, conversations);
    let Some(files) = files else {
        return behind(conversations, db.query_all_raw(write).await?);
    };
    let txn = db.begin().await?;
    let behind = behind(conversations, txn.query_all_raw(write).await?)?;
    if let Some(id) = behind.first() {
        return Err(super::behind(id, conversations[id.as_str()].oldest));
    }
    txn.execute_raw(files).await?;
    txn.commit().await?;
    Ok(behind)
}

/// The conversations of `conversations` that [`write_batch`] did not raise.
fn behind(
    conversations: &BTreeMap<&str, Seqs>,
    raised: Vec<sea_orm::QueryResult>,
) -> Result<Vec<String>, StoreError> {
    let raised: HashSet<String> = (raised.iter())
        .map(|row| row.try_get("", "id"))
        .collect::<Result<_, DbErr>>()?;
    Ok((conversations.keys())
        .filter(|id| !raised.contains(**id))
        .map(|id| id.to_string())
        .collect())
}

/// Raises each conversation's max seq to the batch's newest, unless its committed max seq
/// is already at or past the batch's oldest: such a row is locked but left as it is, not
/// returned (`super::order` says why), and its messages and events are not written. Rows
/// are taken in id order, so two writers lock shared conversations in the same order. Each
/// conflict finds its conversation's oldest seq in a JSON object, by key: a lookup in the
/// rows themselves would scan them all for each conflict.
fn write_batch(batch: &[Append], conversations: &BTreeMap<&str, Seqs>) -> Statement {
    let rows = Unnest::new()
        .texts("id", conversations.keys().map(|id| id.to_string()))
        .bigints("max_seq", conversations.values().map(|s| s.newest))
        .bigints(
            "updated_at_ms",
            conversations.values().map(|s| s.newest_at_ms),
        );
    let oldest: serde_json::Map<String, serde_json::Value> = (conversations.iter())
        .map(|(id, seqs)| (id.to_string(), seqs.oldest.into()))
        .collect();
    let oldest_at = rows.parameters() + 1;
    let raise = format!(
        "INSERT INTO conversations AS c (id, max_seq, updated_at_ms) \
         SELECT r.id, r.max_seq, r.updated_at_ms FROM {} ORDER BY r.id \
         ON CONFLICT (id) DO UPDATE SET max_seq = GREATEST(c.max_seq, excluded.max_seq), \
         updated_at_ms = GREATEST(c.updated_at_ms, excluded.updated_at_ms) \
         WHERE c.max_seq < (${oldest_at} ->> excluded.id)::bigint \
         RETURNING c.id",
        rows.table("r"),
    );
    let mut values = rows.into_values();
    // Bound as jsonb, not text: a text parameter cast in the conflict's condition is
    // parsed again for every conflicting row once PostgreSQL plans the statement
    // generically, which made a batch's cost grow with the square of its conversations.
    values.push(serde_json::Value::Object(oldest).into());
    let with = With::new().numbered("raised", &raise, values);
    let raised = "WHERE r.conversation_id IN (SELECT id FROM raised)";
    let messages = messages(batch, with.parameters());
    let with = with.numbered(
        "messages",
        &messages.insert_sql("messages", raised),
        messages.into_values(),
    );
    let events = events(batch, with.parameters());
    with.numbered(
        "events",
        &events.insert_sql(OUTBOX_TABLE, raised),
        events.into_values(),
    )
    .select("SELECT id FROM raised")
}

/// The outbox events of `batch` as arrays after `before` parameters, with their
/// conversations to pick them by.
fn events(batch: &[Append], before: usize) -> Unnest {
    let events = || batch.iter().map(|a| (&a.event, &a.message.conversation_id));
    Unnest::after(before)
        .bigints("id", events().map(|(event, _)| event.id))
        .bytes("payload", events().map(|(event, _)| event.payload.clone()))
        .not_inserted()
        .texts("conversation_id", events().map(|(_, id)| id.clone()))
}

/// The messages of `batch` as arrays after `before` parameters.
fn messages(batch: &[Append], before: usize) -> Unnest {
    let messages = || batch.iter().map(|a| &a.message);
    let contents: Vec<(i16, String)> = messages().map(|m| encode_content(&m.content)).collect();
    Unnest::after(before)
        .bigints("msg_id", messages().map(|m| m.msg_id))
        .texts(
            "conversation_id",
            messages().map(|m| m.conversation_id.clone()),
        )
        .bigints("seq", messages().map(|m| m.seq))
        .bigints("sender_id", messages().map(|m| m.sender_id))
        .texts("client_msg_id", messages().map(|m| m.client_msg_id.clone()))
        .smallints("kind", contents.iter().map(|(kind, _)| *kind))
        .texts("body", contents.into_iter().map(|(_, body)| body))
        .optional_texts("mentions", messages().map(|m| encode_mentions(&m.mentions)))
        .bools("mention_all", messages().map(|m| m.mentions.all))
        .ints("receipt_bound", messages().map(|m| m.receipt_bound as i32))
        .bigints("server_time_ms", messages().map(|m| m.server_time_ms))
        .bigints("recalled_by", messages().map(|_| 0))
        .bigints("recalled_at_ms", messages().map(|_| 0))
        .ints("version", messages().map(|m| m.version))
        .bigints("edited_at_ms", messages().map(|m| m.edited_at_ms))
        .optional_texts("reply", messages().map(|m| m.reply.as_ref().map(json)))
        .optional_texts(
            "forwarded",
            messages().map(|m| m.forwarded.as_ref().map(json)),
        )
}

/// The messages sent under each (sender, client msg id) of `keys`, in `keys`' order: one
/// index probe per key, the keys bound as arrays.
pub(super) async fn find_sent_many(
    db: &DatabaseConnection,
    keys: &[(i64, &str)],
) -> Result<Vec<Option<Sent>>, StoreError> {
    let keys_table = Unnest::new()
        .bigints("sender_id", keys.iter().map(|(sender, _)| *sender))
        .texts("client_msg_id", keys.iter().map(|(_, id)| id.to_string()));
    // A lateral subquery with a limit is never flattened into a join: each key is an index
    // probe, where a join planned against a table's stale statistics (a table that has
    // grown since they were taken) may scan it whole.
    let sql = format!(
        "SELECT m.* FROM {} CROSS JOIN LATERAL (SELECT sender_id, client_msg_id, msg_id, \
         conversation_id, seq, server_time_ms FROM messages \
         WHERE sender_id = k.sender_id AND client_msg_id = k.client_msg_id LIMIT 1) m",
        keys_table.table("k")
    );
    let rows = db.query_all_raw(keys_table.statement(sql)).await?;
    let mut found = std::collections::HashMap::with_capacity(rows.len());
    for row in rows {
        let key: (i64, String) = (
            row.try_get("", "sender_id")?,
            row.try_get("", "client_msg_id")?,
        );
        let sent = Sent {
            msg_id: row.try_get("", "msg_id")?,
            conversation_id: row.try_get("", "conversation_id")?,
            seq: row.try_get("", "seq")?,
            server_time_ms: row.try_get("", "server_time_ms")?,
            duplicate: false,
        };
        found.insert(key, sent);
    }
    Ok((keys.iter())
        .map(|(sender, id)| found.remove(&(*sender, id.to_string())))
        .collect())
}
