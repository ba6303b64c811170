//! The sea-orm adapter of [`MessageStore`] and message-svc's migrations.

use async_trait::async_trait;
use imesh_kit::{
    error::StoreError,
    outbox::{self, Handoff, OutboxRow},
};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, Condition, ConnectionTrait, DatabaseConnection, EntityTrait,
    QueryFilter, QueryOrder, QuerySelect, QueryTrait, TransactionTrait,
};
use sea_orm_migration::prelude::*;

use super::{
    OUTBOX_TABLE,
    commits::{Append, GroupCommit},
};
use crate::domain::{
    Content, Hidden, MediaKind, Mentions, Message, MessageStore, MovedReactions, Pin, PinOutcome,
    ReactOutcome, ReactionChange, ReactionCount, SearchScope, Sent,
};

mod files;
mod order;
mod postgres;
mod reactions;
mod schema;
mod search;

pub use schema::Migrator;

#[allow(unreachable_pub)]
mod messages {
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "messages")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub msg_id: i64,
        pub conversation_id: String,
        pub seq: i64,
        pub sender_id: i64,
        pub client_msg_id: String,
        /// See [`super::Kind`].
        pub kind: i16,
        /// The text, the custom JSON, or a media reference or notice as JSON.
        pub body: String,
        /// Mentioned user ids, comma-separated.
        pub mentions: Option<String>,
        pub mention_all: bool,
        /// 0, or the member map bound of a message asking for read receipts.
        pub receipt_bound: i32,
        pub server_time_ms: i64,
        pub recalled_by: i64,
        pub recalled_at_ms: i64,
        /// 1 as sent, one more per edit.
        pub version: i32,
        pub edited_at_ms: i64,
        /// What a reply quotes, as JSON.
        pub reply: Option<String>,
        /// A forward's origin, as JSON.
        pub forwarded: Option<String>,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

/// How a content kind is stored in `messages.kind`.
#[derive(Clone, Copy)]
#[repr(i16)]
enum Kind {
    Text = 1,
    Custom = 2,
    Image = 3,
    File = 4,
    Audio = 5,
    Video = 6,
    Notice = 7,
}

fn encode_content(content: &Content) -> (i16, String) {
    let (kind, body) = match content {
        Content::Text(text) => (Kind::Text, text.clone()),
        Content::Custom(json) => (Kind::Custom, json.clone()),
        Content::Media(kind, media) => (
            match kind {
                MediaKind::Image => Kind::Image,
                MediaKind::File => Kind::File,
                MediaKind::Audio => Kind::Audio,
                MediaKind::Video => Kind::Video,
            },
            json(media),
        ),
        Content::Notice(notice) => (Kind::Notice, json(notice)),
    };
    (kind as i16, body)
}

/// The stored JSON body of a media reference or notice (both serialize infallibly).
fn json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

fn decode_content(msg_id: i64, kind: i16, body: String) -> Result<Content, StoreError> {
    let corrupt =
        |what: String| StoreError::Unavailable(anyhow::anyhow!("message {msg_id}: {what}"));
    let media = |kind: MediaKind| -> Result<Content, StoreError> {
        let media = serde_json::from_str(&body).map_err(|e| corrupt(e.to_string()))?;
        Ok(Content::Media(kind, media))
    };
    match kind {
        k if k == Kind::Text as i16 => Ok(Content::Text(body)),
        k if k == Kind::Custom as i16 => Ok(Content::Custom(body)),
        k if k == Kind::Image as i16 => media(MediaKind::Image),
        k if k == Kind::File as i16 => media(MediaKind::File),
        k if k == Kind::Audio as i16 => media(MediaKind::Audio),
        k if k == Kind::Video as i16 => media(MediaKind::Video),
        k if k == Kind::Notice as i16 => serde_json::from_str(&body)
            .map(Content::Notice)
            .map_err(|e| corrupt(e.to_string())),
        other => Err(corrupt(format!("unknown kind {other}"))),
    }
}

fn encode_mentions(mentions: &Mentions) -> Option<String> {
    (!mentions.users.is_empty()).then(|| {
        let ids: Vec<String> = mentions.users.iter().map(i64::to_string).collect();
        ids.join(",")
    })
}

fn decode_mentions(users: Option<String>, all: bool) -> Mentions {
    let users = users
        .iter()
        .flat_map(|list| list.split(','))
        .filter_map(|id| id.parse().ok())
        .collect();
    Mentions { users, all }
}

fn decode_json<T: serde::de::DeserializeOwned>(
    msg_id: i64,
    stored: Option<String>,
) -> Result<Option<T>, StoreError> {
    stored
        .map(|body| serde_json::from_str(&body))
        .transpose()
        .map_err(|e| StoreError::Unavailable(anyhow::anyhow!("message {msg_id}: {e}")))
}

#[derive(Iden)]
pub(super) enum Pins {
    Table,
    ConversationId,
    Seq,
    PinnedBy,
    PinnedAtMs,
}

/// A conversation's pins, newest first.
async fn pins_of(
    conn: &impl ConnectionTrait,
    conversation_id: &str,
) -> Result<Vec<Pin>, StoreError> {
    let select = Query::select()
        .columns([Pins::Seq, Pins::PinnedBy, Pins::PinnedAtMs])
        .from(Pins::Table)
        .and_where(Expr::col(Pins::ConversationId).eq(conversation_id))
        .order_by(Pins::PinnedAtMs, Order::Desc)
        .order_by(Pins::Seq, Order::Desc)
        .to_owned();
    let rows = conn.query_all(&select).await?;
    rows.iter()
        .map(|r| {
            Ok(Pin {
                seq: r.try_get("", "seq")?,
                pinned_by: r.try_get("", "pinned_by")?,
                pinned_at_ms: r.try_get("", "pinned_at_ms")?,
            })
        })
        .collect::<Result<_, sea_orm::DbErr>>()
        .map_err(Into::into)
}

fn to_message(m: messages::Model) -> Result<Message, StoreError> {
    // A recalled message keeps no body; its kind stays for the record.
    let content = if m.recalled_by != 0 {
        Content::Text(String::new())
    } else {
        decode_content(m.msg_id, m.kind, m.body)?
    };
    Ok(Message {
        msg_id: m.msg_id,
        conversation_id: m.conversation_id,
        seq: m.seq,
        sender_id: m.sender_id,
        client_msg_id: m.client_msg_id,
        content,
        mentions: decode_mentions(m.mentions, m.mention_all),
        receipt_bound: m.receipt_bound as u32,
        server_time_ms: m.server_time_ms,
        recalled_by: m.recalled_by,
        recalled_at_ms: m.recalled_at_ms,
        version: m.version,
        edited_at_ms: m.edited_at_ms,
        reply: decode_json(m.msg_id, m.reply)?,
        forwarded: decode_json(m.msg_id, m.forwarded)?,
        reactions: Vec::new(),
    })
}

#[derive(Clone)]
pub struct SqlMessageStore {
    db: DatabaseConnection,
    /// Where reads go ([`imesh_kit::sql::readers`]): never behind the group commit.
    reads: DatabaseConnection,
    commits: GroupCommit,
    /// SQLite's search index, filled behind the writes (none elsewhere: the others' indexes
    /// are kept in the writes' transactions).
    search: Option<search::SearchIndex>,
}

impl SqlMessageStore {
    /// Starts the group-commit writer on the current runtime.
    pub fn new(db: DatabaseConnection) -> Self {
        Self::build(db, None)
    }

    /// [`Self::new`], handing what the writer commits to the outbox relay in memory.
    pub fn handing_off(db: DatabaseConnection, handoff: Handoff) -> Self {
        Self::build(db, Some(handoff))
    }

    /// Applies `change` to one stored message, then runs `then` and queues `event`, in one
    /// transaction; false (nothing written) when no row matched.
    async fn change_one(
        &self,
        change: sea_orm::UpdateMany<messages::Entity>,
        then: Vec<sea_orm::Statement>,
        event: OutboxRow,
    ) -> Result<bool, StoreError> {
        let txn = self.db.begin().await?;
        if change.exec(&txn).await?.rows_affected == 0 {
            txn.rollback().await?;
            return Ok(false);
        }
        imesh_kit::sql::execute_all(&txn, then).await?;
        outbox::insert(&txn, OUTBOX_TABLE, &[event]).await?;
        txn.commit().await?;
        Ok(true)
    }

    /// Reads through `reads` (connections beside the writer's) instead of the writer's.
    pub fn reading_from(self, reads: DatabaseConnection) -> Self {
        Self { reads, ..self }
    }

    fn build(db: DatabaseConnection, handoff: Option<Handoff>) -> Self {
        let search = (db.get_database_backend() == sea_orm::DatabaseBackend::Sqlite)
            .then(|| search::SearchIndex::spawn(db.clone()));
        let indexed = search.clone();
        let wrote = move || indexed.iter().for_each(search::SearchIndex::wrote);
        Self {
            commits: GroupCommit::spawn(db.clone(), handoff, wrote),
            reads: db.clone(),
            db,
            search,
        }
    }
}

/// In one transaction: every message of `batch`, each conversation's max seq raised to
/// its newest, and every outbox event. Fails as a whole (`Conflict` on a taken key,
/// `Unavailable` when a conversation's committed max seq is already at or past one of the
/// batch's seqs), except on PostgreSQL, which leaves out the conversations that are behind
/// and answers them.
pub(super) async fn write_appends(
    db: &DatabaseConnection,
    batch: &[Append],
) -> Result<Vec<String>, StoreError> {
    // Each conversation's oldest and newest seq in the batch (an upsert may not touch a
    // row twice).
    let mut conversations: std::collections::BTreeMap<&str, Seqs> = Default::default();
    for a in batch {
        let m = &a.message;
        let seqs = conversations
            .entry(m.conversation_id.as_str())
            .or_insert(Seqs {
                oldest: m.seq,
                newest: m.seq,
                newest_at_ms: m.server_time_ms,
            });
        seqs.oldest = Ord::min(seqs.oldest, m.seq);
        seqs.newest = Ord::max(seqs.newest, m.seq);
        seqs.newest_at_ms = Ord::max(seqs.newest_at_ms, m.server_time_ms);
    }
    let backend = db.get_database_backend();
    let contents = batch.iter().map(|a| {
        let m = &a.message;
        (m.conversation_id.as_str(), m.seq, &m.content)
    });
    let files = files::references(backend, contents);
    if backend == sea_orm::DatabaseBackend::Postgres {
        return postgres::write_appends(db, batch, &conversations, files).await;
    }
    let events: Vec<OutboxRow> = batch.iter().map(|a| a.event.clone()).collect();
    let raise = imesh_kit::sql::upsert_max(
        backend,
        "conversations",
        &["id", "max_seq", "updated_at_ms"],
        &["id"],
        &["max_seq", "updated_at_ms"],
        (conversations.iter())
            .map(|(id, s)| vec![(*id).into(), s.newest.into(), s.newest_at_ms.into()])
            .collect(),
    );
    let mut statements = vec![
        insert_messages(backend, batch),
        raise,
        outbox::insert_statement(backend, OUTBOX_TABLE, &events),
    ];
    statements.extend(files);
    if backend == sea_orm::DatabaseBackend::Sqlite {
        // The writes take SQLite's one write lock at once: a trigger refuses what is behind.
        imesh_kit::sql::commit(db, &statements).await?;
        return Ok(Vec::new());
    }
    let txn = db.begin().await?;
    let oldest = conversations
        .iter()
        .map(|(id, s)| (*id, s.oldest))
        .collect();
    order::refuse_behind(&txn, &oldest).await?;
    imesh_kit::sql::execute_all(&txn, statements).await?;
    txn.commit().await?;
    Ok(Vec::new())
}

/// The refusal of a send whose conversation's committed max seq is at or past `seq`.
pub(super) fn behind(conversation: &str, seq: i64) -> StoreError {
    StoreError::Unavailable(anyhow::anyhow!(
        "conversation {conversation}: seq {seq} is not above its committed max seq; retry"
    ))
}

/// A conversation's seqs in one batch.
#[derive(Debug, Clone, Copy)]
pub(super) struct Seqs {
    pub(super) oldest: i64,
    pub(super) newest: i64,
    pub(super) newest_at_ms: i64,
}

fn insert_messages(backend: sea_orm::DatabaseBackend, batch: &[Append]) -> sea_orm::Statement {
    let rows = batch.iter().map(|a| {
        let message = &a.message;
        let (kind, body) = encode_content(&message.content);
        messages::ActiveModel {
            msg_id: Set(message.msg_id),
            conversation_id: Set(message.conversation_id.clone()),
            seq: Set(message.seq),
            sender_id: Set(message.sender_id),
            client_msg_id: Set(message.client_msg_id.clone()),
            kind: Set(kind),
            body: Set(body),
            mentions: Set(encode_mentions(&message.mentions)),
            mention_all: Set(message.mentions.all),
            receipt_bound: Set(message.receipt_bound as i32),
            server_time_ms: Set(message.server_time_ms),
            recalled_by: Set(0),
            recalled_at_ms: Set(0),
            version: Set(message.version),
            edited_at_ms: Set(message.edited_at_ms),
            reply: Set(message.reply.as_ref().map(json)),
            forwarded: Set(message.forwarded.as_ref().map(json)),
        }
    });
    messages::Entity::insert_many(rows).build(backend)
}

#[async_trait]
impl MessageStore for SqlMessageStore {
    async fn find_sent_many(&self, keys: &[(i64, &str)]) -> Result<Vec<Option<Sent>>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        if self.reads.get_database_backend() == sea_orm::DatabaseBackend::Postgres {
            return postgres::find_sent_many(&self.reads, keys).await;
        }
        // One index probe per pair: a list of senders beside a list of client ids would
        // also match every other pair of the two lists (a cross product, when clients
        // number their messages).
        let pairs = keys
            .iter()
            .fold(Condition::any(), |any, (sender, client_msg_id)| {
                any.add(
                    Condition::all()
                        .add(messages::Column::SenderId.eq(*sender))
                        .add(messages::Column::ClientMsgId.eq(*client_msg_id)),
                )
            });
        let found: Vec<(i64, String, i64, String, i64, i64)> = messages::Entity::find()
            .select_only()
            .columns([
                messages::Column::SenderId,
                messages::Column::ClientMsgId,
                messages::Column::MsgId,
                messages::Column::ConversationId,
                messages::Column::Seq,
                messages::Column::ServerTimeMs,
            ])
            .filter(pairs)
            .into_tuple()
            .all(&self.reads)
            .await?;
        let mut by_key: std::collections::HashMap<(i64, &str), Sent> = found
            .iter()
            .map(
                |(sender, client_msg_id, msg_id, conversation_id, seq, at)| {
                    let sent = Sent {
                        msg_id: *msg_id,
                        conversation_id: conversation_id.clone(),
                        seq: *seq,
                        server_time_ms: *at,
                        duplicate: false,
                    };
                    ((*sender, client_msg_id.as_str()), sent)
                },
            )
            .collect();
        Ok(keys.iter().map(|key| by_key.remove(key)).collect())
    }

    async fn append_many(&self, appends: &[(Message, OutboxRow)]) -> crate::domain::Queued {
        self.commits.append_many(appends).await
    }

    async fn message(
        &self,
        conversation_id: &str,
        seq: i64,
    ) -> Result<Option<Message>, StoreError> {
        messages::Entity::find()
            .filter(messages::Column::ConversationId.eq(conversation_id))
            .filter(messages::Column::Seq.eq(seq))
            .one(&self.reads)
            .await?
            .map(to_message)
            .transpose()
    }

    async fn history(
        &self,
        conversation_id: &str,
        after: i64,
        up_to: i64,
        limit: u32,
        newest_first: bool,
    ) -> Result<Vec<Message>, StoreError> {
        let order = if newest_first {
            sea_orm::Order::Desc
        } else {
            sea_orm::Order::Asc
        };
        let rows = messages::Entity::find()
            .filter(messages::Column::ConversationId.eq(conversation_id))
            .filter(messages::Column::Seq.gt(after))
            .filter(messages::Column::Seq.lte(up_to))
            .order_by(messages::Column::Seq, order)
            .limit(u64::from(limit))
            .all(&self.reads)
            .await?;
        rows.into_iter().map(to_message).collect()
    }

    async fn recall(
        &self,
        conversation_id: &str,
        seq: i64,
        by: i64,
        at_ms: i64,
        event: OutboxRow,
    ) -> Result<bool, StoreError> {
        use messages::Column as C;
        let recall = messages::Entity::update_many()
            .col_expr(C::Body, Expr::value(""))
            .col_expr(C::RecalledBy, Expr::value(by))
            .col_expr(C::RecalledAtMs, Expr::value(at_ms))
            .filter(C::ConversationId.eq(conversation_id))
            .filter(C::Seq.eq(seq))
            .filter(C::RecalledBy.eq(0));
        let release = files::release(self.db.get_database_backend(), conversation_id, seq);
        self.change_one(recall, vec![release], event).await
    }

    async fn edit(
        &self,
        conversation_id: &str,
        seq: i64,
        content: &Content,
        version: i32,
        at_ms: i64,
        event: OutboxRow,
    ) -> Result<bool, StoreError> {
        use messages::Column as C;
        let (kind, body) = encode_content(content);
        let edit = messages::Entity::update_many()
            .col_expr(C::Kind, Expr::value(kind))
            .col_expr(C::Body, Expr::value(body))
            .col_expr(C::Version, Expr::value(version))
            .col_expr(C::EditedAtMs, Expr::value(at_ms))
            .filter(C::ConversationId.eq(conversation_id))
            .filter(C::Seq.eq(seq))
            .filter(C::RecalledBy.eq(0))
            .filter(C::Version.eq(version - 1));
        let backend = self.db.get_database_backend();
        let mut then = vec![files::release(backend, conversation_id, seq)];
        then.extend(files::references(
            backend,
            [(conversation_id, seq, content)],
        ));
        self.change_one(edit, then, event).await
    }

    async fn pin(
        &self,
        conversation_id: &str,
        pin: Pin,
        max: usize,
        event: OutboxRow,
    ) -> Result<PinOutcome, StoreError> {
        let txn = self.db.begin().await?;
        let held = pins_of(&txn, conversation_id).await?;
        let outcome = if held.iter().any(|p| p.seq == pin.seq) {
            PinOutcome::AlreadyPinned
        } else if held.len() >= max {
            PinOutcome::Full
        } else {
            let insert = Query::insert()
                .into_table(Pins::Table)
                .columns([
                    Pins::ConversationId,
                    Pins::Seq,
                    Pins::PinnedBy,
                    Pins::PinnedAtMs,
                ])
                .values_panic([
                    conversation_id.into(),
                    pin.seq.into(),
                    pin.pinned_by.into(),
                    pin.pinned_at_ms.into(),
                ])
                .to_owned();
            match txn.execute(&insert).await.map_err(StoreError::from) {
                Ok(_) => PinOutcome::Pinned,
                // A concurrent pin of the same message won.
                Err(StoreError::Conflict(_)) => PinOutcome::AlreadyPinned,
                Err(e) => return Err(e),
            }
        };
        if outcome != PinOutcome::Pinned {
            txn.rollback().await?;
            return Ok(outcome);
        }
        outbox::insert(&txn, OUTBOX_TABLE, &[event]).await?;
        txn.commit().await?;
        Ok(outcome)
    }

    async fn unpin(
        &self,
        conversation_id: &str,
        seq: i64,
        event: OutboxRow,
    ) -> Result<bool, StoreError> {
        let txn = self.db.begin().await?;
        let delete = Query::delete()
            .from_table(Pins::Table)
            .and_where(Expr::col(Pins::ConversationId).eq(conversation_id))
            .and_where(Expr::col(Pins::Seq).eq(seq))
            .to_owned();
        if txn.execute(&delete).await?.rows_affected() == 0 {
            txn.rollback().await?;
            return Ok(false);
        }
        outbox::insert(&txn, OUTBOX_TABLE, &[event]).await?;
        txn.commit().await?;
        Ok(true)
    }

    async fn pins(&self, conversation_id: &str) -> Result<Vec<Pin>, StoreError> {
        pins_of(&self.reads, conversation_id).await
    }

    async fn messages_at(
        &self,
        conversation_id: &str,
        seqs: &[i64],
    ) -> Result<Vec<Message>, StoreError> {
        let rows = messages::Entity::find()
            .filter(messages::Column::ConversationId.eq(conversation_id))
            .filter(messages::Column::Seq.is_in(seqs.iter().copied()))
            .order_by(messages::Column::Seq, sea_orm::Order::Asc)
            .all(&self.reads)
            .await?;
        rows.into_iter().map(to_message).collect()
    }

    async fn hide(&self, hidden: &Hidden, event: OutboxRow) -> Result<(), StoreError> {
        let backend = self.db.get_database_backend();
        let user = hidden.user;
        let conversation = hidden.conversation_id.as_str();
        let mut statements = Vec::new();
        if !hidden.seqs.is_empty() {
            let rows = hidden
                .seqs
                .iter()
                .map(|seq| vec![user.into(), conversation.into(), (*seq).into()])
                .collect();
            statements.push(imesh_kit::sql::upsert(
                backend,
                "hidden_messages",
                &["user_id", "conversation_id", "seq"],
                &["user_id", "conversation_id", "seq"],
                &[],
                rows,
            ));
        }
        if hidden.cleared_seq > 0 {
            statements.push(imesh_kit::sql::upsert_max(
                backend,
                "cleared_histories",
                &["user_id", "conversation_id", "cleared_seq"],
                &["user_id", "conversation_id"],
                &["cleared_seq"],
                vec![vec![
                    user.into(),
                    conversation.into(),
                    hidden.cleared_seq.into(),
                ]],
            ));
        }
        statements.push(outbox::insert_statement(backend, OUTBOX_TABLE, &[event]));
        imesh_kit::sql::commit(&self.db, &statements).await?;
        Ok(())
    }

    async fn hidden_for(
        &self,
        user: i64,
        conversation_id: &str,
        after: i64,
        up_to: i64,
    ) -> Result<(i64, std::collections::HashSet<i64>), StoreError> {
        let cleared = Query::select()
            .column(Alias::new("cleared_seq"))
            .from(Alias::new("cleared_histories"))
            .and_where(Expr::col(Alias::new("user_id")).eq(user))
            .and_where(Expr::col(Alias::new("conversation_id")).eq(conversation_id))
            .to_owned();
        let cleared = match self.reads.query_one(&cleared).await? {
            Some(row) => row.try_get::<i64>("", "cleared_seq")?,
            None => 0,
        };
        let hidden = Query::select()
            .column(Alias::new("seq"))
            .from(Alias::new("hidden_messages"))
            .and_where(Expr::col(Alias::new("user_id")).eq(user))
            .and_where(Expr::col(Alias::new("conversation_id")).eq(conversation_id))
            .and_where(Expr::col(Alias::new("seq")).gt(after))
            .and_where(Expr::col(Alias::new("seq")).lte(up_to))
            .to_owned();
        let seqs = self
            .db
            .query_all(&hidden)
            .await?
            .iter()
            .map(|r| r.try_get::<i64>("", "seq"))
            .collect::<Result<_, _>>()?;
        Ok((cleared, seqs))
    }

    async fn recalled_among(
        &self,
        conversation_id: &str,
        seqs: &[i64],
    ) -> Result<std::collections::HashSet<i64>, StoreError> {
        use messages::Column as C;
        let recalled = messages::Entity::find()
            .select_only()
            .column(C::Seq)
            .filter(C::ConversationId.eq(conversation_id))
            .filter(C::Seq.is_in(seqs.iter().copied()))
            .filter(C::RecalledBy.ne(0))
            .into_tuple::<i64>()
            .all(&self.reads)
            .await?;
        Ok(recalled.into_iter().collect())
    }

    async fn react(
        &self,
        change: &ReactionChange,
        max_emojis: usize,
        event: Option<OutboxRow>,
    ) -> Result<ReactOutcome, StoreError> {
        reactions::react(&self.db, change, max_emojis, event).await
    }

    async fn reactions(
        &self,
        conversation_id: &str,
        seqs: &[i64],
        reader: i64,
    ) -> Result<std::collections::HashMap<i64, Vec<ReactionCount>>, StoreError> {
        reactions::reactions(&self.reads, conversation_id, seqs, reader).await
    }

    async fn reactors(
        &self,
        conversation_id: &str,
        seq: i64,
        emoji: &str,
        after: i64,
        limit: u32,
    ) -> Result<Vec<i64>, StoreError> {
        reactions::reactors(&self.reads, conversation_id, seq, emoji, after, limit).await
    }

    async fn moved_reactions(&self, limit: usize) -> Result<Vec<MovedReactions>, StoreError> {
        reactions::moved(&self.db, limit).await
    }

    async fn forget_moved(
        &self,
        moved: &[MovedReactions],
        events: Vec<OutboxRow>,
    ) -> Result<(), StoreError> {
        reactions::forget_moved(&self.db, moved, events).await
    }

    async fn search(
        &self,
        terms: &[String],
        scope: &SearchScope,
        before: i64,
        limit: u32,
    ) -> Result<Vec<Message>, StoreError> {
        if let Some(index) = &self.search {
            index.catch_up(&self.reads).await?;
        }
        search::search(&self.reads, terms, scope, before, limit).await
    }

    async fn max_seq(&self, conversation_id: &str) -> Result<i64, StoreError> {
        let backend = self.db.get_database_backend();
        let stmt = Query::select()
            .column(Alias::new("max_seq"))
            .from(Alias::new("conversations"))
            .and_where(Expr::col(Alias::new("id")).eq(conversation_id))
            .to_owned();
        let row = self.db.query_one_raw(backend.build(&stmt)).await?;
        Ok(row
            .map(|r| r.try_get::<i64>("", "max_seq"))
            .transpose()?
            .unwrap_or(0))
    }
}
