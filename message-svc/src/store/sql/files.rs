//! Uploads, and the objects each stored message references: rows written in the message's
//! own transaction (sent, edited, recalled), so "no message references this upload" is a
//! query the sweep can trust.

use async_trait::async_trait;
use imesh_kit::error::StoreError;
use sea_orm::{ConnectionTrait, DatabaseBackend, Statement};
use sea_orm_migration::prelude::*;

use super::SqlMessageStore;
use crate::domain::{Content, FileStore, Upload, UploadKind};

#[derive(Iden)]
pub(super) enum Uploads {
    Table,
    ObjectKey,
    OwnerId,
    Kind,
    MimeType,
    SizeBytes,
    CreatedAtMs,
    Stored,
}

#[derive(Iden)]
pub(super) enum MessageObjects {
    Table,
    ConversationId,
    Seq,
    ObjectKey,
}

/// An upload row's columns, in the order rows are written and read.
const UPLOAD_COLUMNS: [Uploads; 7] = [
    Uploads::ObjectKey,
    Uploads::OwnerId,
    Uploads::Kind,
    Uploads::MimeType,
    Uploads::SizeBytes,
    Uploads::CreatedAtMs,
    Uploads::Stored,
];

fn kind_code(kind: UploadKind) -> i16 {
    match kind {
        UploadKind::Image => 1,
        UploadKind::File => 2,
        UploadKind::Audio => 3,
        UploadKind::Video => 4,
        UploadKind::Thumbnail => 5,
    }
}

fn kind_of(code: i16) -> Result<UploadKind, StoreError> {
    Ok(match code {
        1 => UploadKind::Image,
        2 => UploadKind::File,
        3 => UploadKind::Audio,
        4 => UploadKind::Video,
        5 => UploadKind::Thumbnail,
        other => {
            return Err(StoreError::Unavailable(anyhow::anyhow!(
                "stored upload kind {other} is unknown"
            )));
        }
    })
}

/// The rows that record which uploaded objects `messages` (conversation, seq, content)
/// reference; `None` when they reference none (the common case: the send path pays
/// nothing for files).
pub(super) fn references<'a>(
    backend: DatabaseBackend,
    messages: impl IntoIterator<Item = (&'a str, i64, &'a Content)>,
) -> Option<Statement> {
    let mut rows = messages
        .into_iter()
        .flat_map(|(conversation_id, seq, content)| {
            content
                .objects()
                .into_iter()
                .map(move |(_, key)| [conversation_id.into(), seq.into(), key.into()])
        })
        .peekable();
    rows.peek()?;
    let mut insert = Query::insert()
        .into_table(MessageObjects::Table)
        .columns([
            MessageObjects::ConversationId,
            MessageObjects::Seq,
            MessageObjects::ObjectKey,
        ])
        .to_owned();
    for row in rows {
        insert.values_panic(row);
    }
    Some(backend.build(&insert))
}

/// Forgets the objects message `seq` of a conversation references (recalled, or edited
/// before [`references`] records its new content's).
pub(super) fn release(backend: DatabaseBackend, conversation_id: &str, seq: i64) -> Statement {
    backend.build(
        Query::delete()
            .from_table(MessageObjects::Table)
            .and_where(Expr::col(MessageObjects::ConversationId).eq(conversation_id))
            .and_where(Expr::col(MessageObjects::Seq).eq(seq)),
    )
}

/// No message references the upload row at hand.
fn unreferenced() -> SimpleExpr {
    Expr::exists(
        Query::select()
            .expr(Expr::val(1))
            .from(MessageObjects::Table)
            .and_where(
                Expr::col((MessageObjects::Table, MessageObjects::ObjectKey))
                    .equals((Uploads::Table, Uploads::ObjectKey)),
            )
            .to_owned(),
    )
    .not()
}

#[async_trait]
impl FileStore for SqlMessageStore {
    async fn add_uploads(&self, uploads: &[Upload]) -> Result<(), StoreError> {
        let mut insert = Query::insert()
            .into_table(Uploads::Table)
            .columns(UPLOAD_COLUMNS)
            .to_owned();
        for u in uploads {
            insert.values_panic([
                u.key.as_str().into(),
                u.owner.into(),
                kind_code(u.kind).into(),
                u.mime_type.as_str().into(),
                u.size_bytes.into(),
                u.created_at_ms.into(),
                u.stored.into(),
            ]);
        }
        self.db.execute(&insert).await?;
        Ok(())
    }

    async fn uploads(&self, keys: &[&str]) -> Result<Vec<Upload>, StoreError> {
        let select = Query::select()
            .columns(UPLOAD_COLUMNS)
            .from(Uploads::Table)
            .and_where(Expr::col(Uploads::ObjectKey).is_in(keys.iter().copied()))
            .to_owned();
        let mut found = Vec::new();
        for row in self.db.query_all(&select).await? {
            found.push(Upload {
                key: row.try_get("", "object_key")?,
                owner: row.try_get("", "owner_id")?,
                kind: kind_of(row.try_get("", "kind")?)?,
                mime_type: row.try_get("", "mime_type")?,
                size_bytes: row.try_get("", "size_bytes")?,
                created_at_ms: row.try_get("", "created_at_ms")?,
                stored: row.try_get("", "stored")?,
            });
        }
        Ok(found)
    }

    async fn mark_stored(&self, key: &str) -> Result<(), StoreError> {
        let update = Query::update()
            .table(Uploads::Table)
            .value(Uploads::Stored, true)
            .and_where(Expr::col(Uploads::ObjectKey).eq(key))
            .to_owned();
        self.db.execute(&update).await?;
        Ok(())
    }

    async fn unreferenced(&self, before_ms: i64, limit: u32) -> Result<Vec<String>, StoreError> {
        let select = Query::select()
            .column(Uploads::ObjectKey)
            .from(Uploads::Table)
            .and_where(Expr::col(Uploads::CreatedAtMs).lt(before_ms))
            .and_where(unreferenced())
            .order_by(Uploads::CreatedAtMs, Order::Asc)
            .limit(limit as u64)
            .to_owned();
        let rows = self.db.query_all(&select).await?;
        Ok(rows
            .iter()
            .map(|row| row.try_get("", "object_key"))
            .collect::<Result<_, _>>()?)
    }

    async fn forget_unreferenced(&self, key: &str) -> Result<bool, StoreError> {
        let delete = Query::delete()
            .from_table(Uploads::Table)
            .and_where(Expr::col((Uploads::Table, Uploads::ObjectKey)).eq(key))
            .and_where(unreferenced())
            .to_owned();
        Ok(self.db.execute(&delete).await?.rows_affected() == 1)
    }
}

pub(super) struct CreateFiles;

impl MigrationName for CreateFiles {
    fn name(&self) -> &str {
        "m20261207_000013_message_files"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for CreateFiles {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        use sea_orm_migration::schema::*;
        manager
            .create_table(
                Table::create()
                    .table(Uploads::Table)
                    .if_not_exists()
                    .col(string_len(Uploads::ObjectKey, 64).primary_key())
                    .col(big_integer(Uploads::OwnerId))
                    .col(small_integer(Uploads::Kind))
                    .col(string_len(Uploads::MimeType, 127))
                    .col(big_integer(Uploads::SizeBytes))
                    .col(big_integer(Uploads::CreatedAtMs))
                    .col(boolean(Uploads::Stored))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uploads_by_age")
                    .table(Uploads::Table)
                    .col(Uploads::CreatedAtMs)
                    .if_not_exists()
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(MessageObjects::Table)
                    .if_not_exists()
                    .col(string_len(MessageObjects::ConversationId, 64))
                    .col(big_integer(MessageObjects::Seq))
                    .col(string_len(MessageObjects::ObjectKey, 64))
                    .primary_key(
                        Index::create()
                            .col(MessageObjects::ConversationId)
                            .col(MessageObjects::Seq)
                            .col(MessageObjects::ObjectKey),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("message_objects_by_key")
                    .table(MessageObjects::Table)
                    .col(MessageObjects::ObjectKey)
                    .if_not_exists()
                    .to_owned(),
            )
            .await
    }
}
