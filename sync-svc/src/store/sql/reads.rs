//! Conversation state in SQL: one `conversation_states` row per conversation (latest seq,
//! last message, @all watermark) and one `read_states` row per member and conversation
//! (read seq, mention watermark), written when the member's first message arrives.

use std::collections::{HashMap, HashSet};

use imesh_kit::{
    error::StoreError,
    sql::{Merge, upsert},
};
use parking_lot::Mutex;
use sea_orm::{
    ConnectionTrait, DatabaseBackend, DatabaseConnection, DbErr, QueryResult, Statement,
};
use sea_orm_migration::prelude::*;

use super::CHUNK;
use crate::domain::{
    ConversationView, Cursor, Settings, StoredEvent,
    marks::{self, MarkPlan},
};

#[derive(Iden)]
pub(super) enum ConversationStates {
    Table,
    ConversationId,
    MaxSeq,
    LastEvent,
    UpdatedAtMs,
    MentionAllSeq,
    LastRecalledBy,
    LastRecalledAtMs,
    LastEdit,
}

#[derive(Iden)]
pub(super) enum ReadStates {
    Table,
    UserId,
    ConversationId,
    ReadSeq,
    MentionSeq,
    Pinned,
    Muted,
    /// Left off the user's list up to this seq (0: never removed).
    RemovedSeq,
}

/// The `(user, conversation)` read states this process knows exist, so a message to a
/// conversation's regulars writes no read-state rows. Only a hint: rows are insert-if-absent.
#[derive(Default)]
pub(super) struct KnownStates(Mutex<HashSet<(i64, u64)>>);

/// Past this many pairs the hint starts over rather than grow without bound.
const MAX_KNOWN: usize = 1 << 20;

impl KnownStates {
    fn key(user: i64, conversation_id: &str) -> (i64, u64) {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(conversation_id);
        (user, hash)
    }

    fn contains(&self, user: i64, conversation_id: &str) -> bool {
        self.0.lock().contains(&Self::key(user, conversation_id))
    }

    pub(super) fn remember(&self, pairs: &[(i64, String)]) {
        let mut known = self.0.lock();
        if known.len() + pairs.len() > MAX_KNOWN {
            known.clear();
        }
        known.extend(pairs.iter().map(|(u, c)| Self::key(*u, c)));
    }
}

/// The statements that apply some events' marks, for their append.
pub(super) struct Marks {
    pub statements: Vec<Statement>,
    /// The read states they create, to remember once the append commits.
    pub created: Vec<(i64, String)>,
    /// No two of the statements touch one row, so they may run in any order (as the
    /// parts of one statement).
    pub disjoint: bool,
}

/// The statements that apply the events' marks.
pub(super) fn marks(
    backend: DatabaseBackend,
    events: &[StoredEvent],
    known: &KnownStates,
) -> Marks {
    let mut statements = Vec::new();
    let MarkPlan {
        latest,
        mut starts,
        raised,
        recalls,
        edits,
    } = marks::plan(events);
    starts.retain(|(user, conversation), _| !known.contains(*user, conversation));
    let created: Vec<(i64, String)> = starts.keys().map(|(u, c)| (*u, (*c).to_owned())).collect();
    // A read state started and raised by one batch (a sender's first message to a
    // conversation): a raise of the read seq to the start or past it is the start too.
    starts.retain(|key, start| raised.get(key).is_none_or(|(read, _)| read < start));
    // A start and a raise of one read state, or a recall or an edit of a conversation
    // whose state the upsert below writes, must run in this order.
    let disjoint = recalls.is_empty()
        && edits.is_empty()
        && starts.keys().all(|key| !raised.contains_key(key));
    let rows: Vec<Vec<sea_orm::Value>> = latest
        .iter()
        .map(|(conversation, newest)| {
            vec![
                (*conversation).into(),
                newest.seq.into(),
                newest.payload.to_vec().into(),
                newest.time_ms.into(),
                newest.mention_all_seq.into(),
                0i64.into(),
                0i64.into(),
                sea_orm::Value::Bytes(None),
            ]
        })
        .collect();
    let newer = |column| Merge::NewerBy {
        column,
        by: "max_seq",
    };
    for chunk in rows.chunks(CHUNK / 8) {
        let stmt = upsert(
            backend,
            "conversation_states",
            &[
                "conversation_id",
                "max_seq",
                "last_event",
                "updated_at_ms",
                "mention_all_seq",
                "last_recalled_by",
                "last_recalled_at_ms",
                "last_edit",
            ],
            &["conversation_id"],
            &[
                newer("last_event"),
                newer("updated_at_ms"),
                newer("last_recalled_by"),
                newer("last_recalled_at_ms"),
                newer("last_edit"),
                Merge::Greatest("mention_all_seq"),
                Merge::Greatest("max_seq"),
            ],
            chunk.to_vec(),
        );
        statements.push(stmt);
    }
    let columns = ["user_id", "conversation_id", "read_seq", "mention_seq"];
    let key = ["user_id", "conversation_id"];
    let rows: Vec<Vec<sea_orm::Value>> = starts
        .iter()
        .map(|((user, c), start)| vec![(*user).into(), (*c).into(), (*start).into(), 0i64.into()])
        .collect();
    for chunk in rows.chunks(CHUNK / 4) {
        let stmt = upsert(backend, "read_states", &columns, &key, &[], chunk.to_vec());
        statements.push(stmt);
    }
    let rows: Vec<Vec<sea_orm::Value>> = raised
        .iter()
        .map(|((user, c), (read, mention))| {
            vec![
                (*user).into(),
                (*c).into(),
                (*read).into(),
                (*mention).into(),
            ]
        })
        .collect();
    let merges = [Merge::Greatest("read_seq"), Merge::Greatest("mention_seq")];
    for chunk in rows.chunks(CHUNK / 4) {
        let stmt = upsert(
            backend,
            "read_states",
            &columns,
            &key,
            &merges,
            chunk.to_vec(),
        );
        statements.push(stmt);
    }
    for (conversation, seq, by, at_ms) in recalls {
        let stmt = Query::update()
            .table(ConversationStates::Table)
            .value(ConversationStates::LastRecalledBy, by)
            .value(ConversationStates::LastRecalledAtMs, at_ms)
            .and_where(Expr::col(ConversationStates::ConversationId).eq(conversation))
            .and_where(Expr::col(ConversationStates::MaxSeq).eq(seq))
            .to_owned();
        statements.push(backend.build(&stmt));
    }
    // An edit of a conversation's latest message changes how its list shows it.
    for (conversation, seq, event) in edits {
        let stmt = Query::update()
            .table(ConversationStates::Table)
            .value(ConversationStates::LastEdit, event.to_vec())
            .and_where(Expr::col(ConversationStates::ConversationId).eq(conversation))
            .and_where(Expr::col(ConversationStates::MaxSeq).eq(seq))
            .to_owned();
        statements.push(backend.build(&stmt));
    }
    Marks {
        statements,
        created,
        disjoint,
    }
}

/// `read_states` joined with their conversation's state, for `user`.
fn joined(user: i64) -> SelectStatement {
    use ConversationStates as C;
    use ReadStates as R;
    Query::select()
        .columns([
            (R::Table, R::ConversationId),
            (R::Table, R::ReadSeq),
            (R::Table, R::MentionSeq),
            (R::Table, R::Pinned),
            (R::Table, R::Muted),
            (R::Table, R::RemovedSeq),
        ])
        .columns([
            (C::Table, C::MaxSeq),
            (C::Table, C::LastEvent),
            (C::Table, C::UpdatedAtMs),
            (C::Table, C::MentionAllSeq),
            (C::Table, C::LastRecalledBy),
            (C::Table, C::LastRecalledAtMs),
            (C::Table, C::LastEdit),
        ])
        .from(R::Table)
        .inner_join(
            C::Table,
            Expr::col((C::Table, C::ConversationId)).equals((R::Table, R::ConversationId)),
        )
        .and_where(Expr::col((R::Table, R::UserId)).eq(user))
        .to_owned()
}

fn view(row: &QueryResult) -> Result<ConversationView, DbErr> {
    let read_seq: i64 = row.try_get("", "read_seq")?;
    let removed_seq: i64 = row.try_get("", "removed_seq")?;
    let mention_seq: i64 = row.try_get("", "mention_seq")?;
    let mention_all_seq: i64 = row.try_get("", "mention_all_seq")?;
    Ok(ConversationView {
        conversation_id: row.try_get("", "conversation_id")?,
        latest_seq: row.try_get("", "max_seq")?,
        read_seq,
        removed_seq,
        mentioned: std::cmp::max(mention_seq, mention_all_seq)
            > std::cmp::max(read_seq, removed_seq),
        last_event: row.try_get::<Vec<u8>>("", "last_event")?.into(),
        updated_at_ms: row.try_get("", "updated_at_ms")?,
        last_recalled_by: row.try_get("", "last_recalled_by")?,
        last_recalled_at_ms: row.try_get("", "last_recalled_at_ms")?,
        last_edit: row
            .try_get::<Option<Vec<u8>>>("", "last_edit")?
            .unwrap_or_default()
            .into(),
        peer_read_seq: 0,
        settings: Settings {
            pinned: row.try_get("", "pinned")?,
            muted: row.try_get("", "muted")?,
        },
    })
}

pub(super) async fn read_states(
    db: &DatabaseConnection,
    user: i64,
    conversations: &[&str],
) -> Result<Vec<(String, i64, i64)>, StoreError> {
    let stmt = joined(user)
        .and_where(
            Expr::col((ReadStates::Table, ReadStates::ConversationId))
                .is_in(conversations.iter().copied()),
        )
        .to_owned();
    let rows = db.query_all(&stmt).await?;
    rows.iter()
        .map(|r| {
            Ok((
                r.try_get("", "conversation_id")?,
                r.try_get("", "read_seq")?,
                r.try_get("", "max_seq")?,
            ))
        })
        .collect::<Result<_, DbErr>>()
        .map_err(Into::into)
}

pub(super) async fn readers(
    db: &DatabaseConnection,
    conversation: &str,
) -> Result<Vec<(i64, i64)>, StoreError> {
    let stmt = Query::select()
        .columns([ReadStates::UserId, ReadStates::ReadSeq])
        .from(ReadStates::Table)
        .and_where(Expr::col(ReadStates::ConversationId).eq(conversation))
        .to_owned();
    let rows = db.query_all(&stmt).await?;
    rows.iter()
        .map(|r| Ok((r.try_get("", "user_id")?, r.try_get("", "read_seq")?)))
        .collect::<Result<_, DbErr>>()
        .map_err(Into::into)
}

pub(super) async fn latest_seqs(
    db: &DatabaseConnection,
    conversations: &[&str],
) -> Result<Vec<(String, i64)>, StoreError> {
    use ConversationStates as C;
    let stmt = Query::select()
        .columns([C::ConversationId, C::MaxSeq])
        .from(C::Table)
        .and_where(Expr::col(C::ConversationId).is_in(conversations.iter().copied()))
        .to_owned();
    let rows = db.query_all(&stmt).await?;
    rows.iter()
        .map(|r| Ok((r.try_get("", "conversation_id")?, r.try_get("", "max_seq")?)))
        .collect::<Result<_, DbErr>>()
        .map_err(Into::into)
}

pub(super) async fn raise_read(
    db: &DatabaseConnection,
    user: i64,
    marks: &[(String, i64)],
) -> Result<(), StoreError> {
    if marks.is_empty() {
        return Ok(());
    }
    let rows = marks
        .iter()
        .map(|(c, seq)| vec![user.into(), c.clone().into(), (*seq).into(), 0i64.into()])
        .collect();
    let stmt = imesh_kit::sql::upsert_max(
        db.get_database_backend(),
        "read_states",
        &["user_id", "conversation_id", "read_seq", "mention_seq"],
        &["user_id", "conversation_id"],
        &["read_seq"],
        rows,
    );
    db.execute_raw(stmt).await?;
    Ok(())
}

pub(super) async fn conversations(
    db: &DatabaseConnection,
    user: i64,
    after: Option<&Cursor>,
    limit: u32,
) -> Result<Vec<ConversationView>, StoreError> {
    use ConversationStates as C;
    let mut stmt = joined(user);
    stmt.and_where(
        Expr::col((C::Table, C::MaxSeq)).gt(Expr::col((ReadStates::Table, ReadStates::RemovedSeq))),
    );
    if let Some(after) = after {
        let at = Expr::col((C::Table, C::UpdatedAtMs));
        stmt.cond_where(
            Cond::any().add(at.clone().lt(after.updated_at_ms)).add(
                Cond::all().add(at.eq(after.updated_at_ms)).add(
                    Expr::col((C::Table, C::ConversationId)).lt(after.conversation_id.as_str()),
                ),
            ),
        );
    }
    stmt.order_by((C::Table, C::UpdatedAtMs), Order::Desc)
        .order_by((C::Table, C::ConversationId), Order::Desc)
        .limit(u64::from(limit));
    let rows = db.query_all(&stmt).await?;
    rows.iter()
        .map(view)
        .collect::<Result<_, _>>()
        .map_err(Into::into)
}

pub(super) async fn read_seqs(
    db: &DatabaseConnection,
    of: &[(i64, String)],
) -> Result<HashMap<String, i64>, StoreError> {
    use ReadStates as R;
    if of.is_empty() {
        return Ok(HashMap::new());
    }
    let mut any = Cond::any();
    for (user, conversation) in of {
        any = any.add(
            Cond::all()
                .add(Expr::col(R::UserId).eq(*user))
                .add(Expr::col(R::ConversationId).eq(conversation.as_str())),
        );
    }
    let stmt = Query::select()
        .columns([R::ConversationId, R::ReadSeq])
        .from(R::Table)
        .cond_where(any)
        .to_owned();
    let rows = db.query_all(&stmt).await?;
    rows.iter()
        .map(|r| {
            Ok((
                r.try_get("", "conversation_id")?,
                r.try_get("", "read_seq")?,
            ))
        })
        .collect::<Result<_, DbErr>>()
        .map_err(Into::into)
}

pub(super) async fn update_settings(
    db: &DatabaseConnection,
    user: i64,
    conversation_id: &str,
    pinned: Option<bool>,
    muted: Option<bool>,
) -> Result<Settings, StoreError> {
    use ReadStates as R;
    let mut update = Query::update();
    update
        .table(R::Table)
        .and_where(Expr::col(R::UserId).eq(user))
        .and_where(Expr::col(R::ConversationId).eq(conversation_id));
    if let Some(pinned) = pinned {
        update.value(R::Pinned, pinned);
    }
    if let Some(muted) = muted {
        update.value(R::Muted, muted);
    }
    if pinned.is_some() || muted.is_some() {
        db.execute(&update).await?;
    }
    let read = Query::select()
        .columns([R::Pinned, R::Muted])
        .from(R::Table)
        .and_where(Expr::col(R::UserId).eq(user))
        .and_where(Expr::col(R::ConversationId).eq(conversation_id))
        .to_owned();
    let row = db.query_one(&read).await?.ok_or(StoreError::NotFound)?;
    Ok(Settings {
        pinned: row.try_get("", "pinned")?,
        muted: row.try_get("", "muted")?,
    })
}

pub(super) async fn remove_conversation(
    db: &DatabaseConnection,
    user: i64,
    conversation_id: &str,
    seq: i64,
) -> Result<i64, StoreError> {
    use ReadStates as R;
    let raise = Query::update()
        .table(R::Table)
        .value(R::RemovedSeq, seq)
        .and_where(Expr::col(R::UserId).eq(user))
        .and_where(Expr::col(R::ConversationId).eq(conversation_id))
        .and_where(Expr::col(R::RemovedSeq).lt(seq))
        .to_owned();
    db.execute(&raise).await?;
    let read = Query::select()
        .column(R::RemovedSeq)
        .from(R::Table)
        .and_where(Expr::col(R::UserId).eq(user))
        .and_where(Expr::col(R::ConversationId).eq(conversation_id))
        .to_owned();
    let row = db.query_one(&read).await?.ok_or(StoreError::NotFound)?;
    Ok(row.try_get("", "removed_seq")?)
}

pub(super) async fn unread_totals(
    db: &DatabaseConnection,
    users: &[i64],
) -> Result<HashMap<i64, i64>, StoreError> {
    use ConversationStates as C;
    use ReadStates as R;
    if users.is_empty() {
        return Ok(HashMap::new());
    }
    // Muted conversations count for nothing: do not disturb means no badge either.
    let stmt = Query::select()
        .columns([
            (R::Table, R::UserId),
            (R::Table, R::ReadSeq),
            (R::Table, R::RemovedSeq),
        ])
        .column((C::Table, C::MaxSeq))
        .from(R::Table)
        .inner_join(
            C::Table,
            Expr::col((C::Table, C::ConversationId)).equals((R::Table, R::ConversationId)),
        )
        .and_where(Expr::col((R::Table, R::UserId)).is_in(users.iter().copied()))
        .and_where(Expr::col((C::Table, C::MaxSeq)).gt(Expr::col((R::Table, R::ReadSeq))))
        .and_where(Expr::col((C::Table, C::MaxSeq)).gt(Expr::col((R::Table, R::RemovedSeq))))
        .and_where(Expr::col((R::Table, R::Muted)).eq(false))
        .to_owned();
    let rows = db.query_all(&stmt).await?;
    let mut totals: HashMap<i64, i64> = users.iter().map(|u| (*u, 0)).collect();
    for row in &rows {
        let user: i64 = row.try_get("", "user_id")?;
        let latest: i64 = row.try_get("", "max_seq")?;
        let read: i64 = row.try_get("", "read_seq")?;
        let removed: i64 = row.try_get("", "removed_seq")?;
        *totals.entry(user).or_default() += latest - std::cmp::max(read, removed);
    }
    Ok(totals)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::domain::{Change, Mark};

    fn direct(seq: i64, sender: i64, peer: i64) -> StoredEvent {
        StoredEvent {
            id: seq,
            event_id: format!("m{seq}"),
            payload: Bytes::from_static(b"event"),
            recipients: vec![sender, peer],
            mark: Some(Mark {
                conversation_id: "d:1:2".into(),
                seq,
                change: Change::Message {
                    sender,
                    time_ms: seq,
                    mentioned: Vec::new(),
                    mention_all: false,
                    receipt_bound: 0,
                },
            }),
            hook: None,
        }
    }

    #[test]
    fn a_senders_first_message_starts_its_read_state_with_the_raise() {
        let events = [direct(1, 1, 2), direct(2, 2, 1)];
        let marks = marks(DatabaseBackend::Postgres, &events, &KnownStates::default());
        // Each user sent one and heard one: the raises start both read states.
        assert!(marks.disjoint, "no read state is both started and raised");
        let mut created = marks.created.clone();
        created.sort();
        assert_eq!(created, [(1, "d:1:2".into()), (2, "d:1:2".into())]);
        // The conversation's state and one upsert of the raised read states.
        assert_eq!(marks.statements.len(), 2);
    }

    #[test]
    fn a_mention_of_a_new_member_starts_then_raises_in_order() {
        let mut event = direct(5, 1, 2);
        if let Some(Mark {
            change: Change::Message { mentioned, .. },
            ..
        }) = &mut event.mark
        {
            mentioned.push(2);
        }
        let marks = marks(DatabaseBackend::Postgres, &[event], &KnownStates::default());
        // 2's read state starts at 4 and only its mention seq rises: the start must come
        // first, or the raise would insert it at read seq 0.
        assert!(!marks.disjoint);
    }
}
