//! message-svc's migrations, oldest first.

use imesh_kit::outbox;
use sea_orm::{ConnectionTrait, DatabaseBackend};
use sea_orm_migration::{prelude::*, schema::*};

use super::{
    Pins,
    reactions::{ReactionMarks, ReactionTotals, Reactions},
};
use crate::store::OUTBOX_TABLE;

pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(imesh_kit::seq::Migration),
            Box::new(outbox::Migration {
                table: OUTBOX_TABLE,
                name: "m20261201_000002_message_outbox",
            }),
            Box::new(CreateMessages),
            Box::new(AddMentions),
            Box::new(AddReceipts),
            Box::new(imesh_kit::ids::lease::Migration),
            Box::new(AddEdits),
            Box::new(AddReferences),
            Box::new(CreatePins),
            Box::new(CreateHidden),
            Box::new(CreateReactions),
            Box::new(CreateSearch),
            Box::new(RefuseBehindOnSqlite),
            Box::new(super::files::CreateFiles),
            Box::new(DeferSearchOnSqlite),
        ]
    }

    fn migration_table_name() -> DynIden {
        Alias::new("message_migrations").into_iden()
    }
}

struct CreateMessages;

impl MigrationName for CreateMessages {
    fn name(&self) -> &str {
        "m20261201_000003_messages"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for CreateMessages {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let t = || Alias::new("messages");
        manager
            .create_table(
                Table::create()
                    .table(t())
                    .if_not_exists()
                    .col(big_integer(Alias::new("msg_id")).primary_key())
                    .col(string_len(Alias::new("conversation_id"), 64))
                    .col(big_integer(Alias::new("seq")))
                    .col(big_integer(Alias::new("sender_id")))
                    .col(string_len(Alias::new("client_msg_id"), 64))
                    .col(small_integer(Alias::new("kind")))
                    .col(text(Alias::new("body")))
                    .col(big_integer(Alias::new("server_time_ms")))
                    .col(big_integer(Alias::new("recalled_by")))
                    .col(big_integer(Alias::new("recalled_at_ms")))
                    .to_owned(),
            )
            .await?;
        for (name, cols) in [
            ("ux_messages_conversation_seq", ["conversation_id", "seq"]),
            (
                "ux_messages_sender_client_msg",
                ["sender_id", "client_msg_id"],
            ),
        ] {
            let mut index = Index::create();
            index.name(name).table(t()).unique().if_not_exists();
            for col in cols {
                index.col(Alias::new(col));
            }
            manager.create_index(index.to_owned()).await?;
        }
        manager
            .create_table(
                Table::create()
                    .table(Alias::new("conversations"))
                    .if_not_exists()
                    .col(string_len(Alias::new("id"), 64).primary_key())
                    .col(big_integer(Alias::new("max_seq")))
                    .col(big_integer(Alias::new("updated_at_ms")))
                    .to_owned(),
            )
            .await
    }
}

struct AddMentions;

impl MigrationName for AddMentions {
    fn name(&self) -> &str {
        "m20261202_000004_message_mentions"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for AddMentions {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let columns = [
            text_null(Alias::new("mentions")),
            boolean(Alias::new("mention_all")).default(false).to_owned(),
        ];
        imesh_kit::sql::add_columns(manager, Alias::new("messages"), columns).await
    }
}

struct AddReceipts;

impl MigrationName for AddReceipts {
    fn name(&self) -> &str {
        "m20261202_000005_message_receipts"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for AddReceipts {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let column = integer(Alias::new("receipt_bound")).default(0).to_owned();
        imesh_kit::sql::add_columns(manager, Alias::new("messages"), [column]).await
    }
}

struct AddEdits;

impl MigrationName for AddEdits {
    fn name(&self) -> &str {
        "m20261205_000006_message_edits"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for AddEdits {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let columns = [
            integer(Alias::new("version")).default(1).to_owned(),
            big_integer(Alias::new("edited_at_ms"))
                .default(0)
                .to_owned(),
        ];
        imesh_kit::sql::add_columns(manager, Alias::new("messages"), columns).await
    }
}

struct AddReferences;

impl MigrationName for AddReferences {
    fn name(&self) -> &str {
        "m20261205_000007_message_references"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for AddReferences {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let columns = [
            text_null(Alias::new("reply")),
            text_null(Alias::new("forwarded")),
        ];
        imesh_kit::sql::add_columns(manager, Alias::new("messages"), columns).await
    }
}

struct CreatePins;

impl MigrationName for CreatePins {
    fn name(&self) -> &str {
        "m20261205_000008_message_pins"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for CreatePins {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Pins::Table)
                    .if_not_exists()
                    .col(string_len(Pins::ConversationId, 64))
                    .col(big_integer(Pins::Seq))
                    .col(big_integer(Pins::PinnedBy))
                    .col(big_integer(Pins::PinnedAtMs))
                    .primary_key(Index::create().col(Pins::ConversationId).col(Pins::Seq))
                    .to_owned(),
            )
            .await
    }
}

struct CreateHidden;

impl MigrationName for CreateHidden {
    fn name(&self) -> &str {
        "m20261205_000009_message_hidden"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for CreateHidden {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let n = Alias::new;
        manager
            .create_table(
                Table::create()
                    .table(n("hidden_messages"))
                    .if_not_exists()
                    .col(big_integer(n("user_id")))
                    .col(string_len(n("conversation_id"), 64))
                    .col(big_integer(n("seq")))
                    .primary_key(
                        Index::create()
                            .col(n("user_id"))
                            .col(n("conversation_id"))
                            .col(n("seq")),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(n("cleared_histories"))
                    .if_not_exists()
                    .col(big_integer(n("user_id")))
                    .col(string_len(n("conversation_id"), 64))
                    .col(big_integer(n("cleared_seq")))
                    .primary_key(Index::create().col(n("user_id")).col(n("conversation_id")))
                    .to_owned(),
            )
            .await
    }
}

struct CreateReactions;

impl MigrationName for CreateReactions {
    fn name(&self) -> &str {
        "m20261205_000010_message_reactions"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for CreateReactions {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Reactions::Table)
                    .if_not_exists()
                    .col(string_len(Reactions::ConversationId, 64))
                    .col(big_integer(Reactions::Seq))
                    .col(var_binary(Reactions::Emoji, 32))
                    .col(big_integer(Reactions::UserId))
                    .col(big_integer(Reactions::ReactedAtMs))
                    .primary_key(
                        Index::create()
                            .col(Reactions::ConversationId)
                            .col(Reactions::Seq)
                            .col(Reactions::Emoji)
                            .col(Reactions::UserId),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(ReactionTotals::Table)
                    .if_not_exists()
                    .col(string_len(ReactionTotals::ConversationId, 64))
                    .col(big_integer(ReactionTotals::Seq))
                    .col(var_binary(ReactionTotals::Emoji, 32))
                    .col(big_integer(ReactionTotals::Total))
                    .primary_key(
                        Index::create()
                            .col(ReactionTotals::ConversationId)
                            .col(ReactionTotals::Seq)
                            .col(ReactionTotals::Emoji),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(ReactionMarks::Table)
                    .if_not_exists()
                    .col(string_len(ReactionMarks::ConversationId, 64))
                    .col(big_integer(ReactionMarks::Seq))
                    .col(big_integer(ReactionMarks::Changes))
                    .primary_key(
                        Index::create()
                            .col(ReactionMarks::ConversationId)
                            .col(ReactionMarks::Seq),
                    )
                    .to_owned(),
            )
            .await
    }
}

struct CreateSearch;

impl MigrationName for CreateSearch {
    fn name(&self) -> &str {
        "m20261205_000011_message_search"
    }
}

/// SQLite's index: an FTS5 table by msg id, kept by triggers on every write path (the
/// group commit's multi-row inserts, edits, recalls), filled from what is stored already.
const SQLITE: [&str; 5] = [
    "CREATE VIRTUAL TABLE IF NOT EXISTS message_search USING fts5(body, content='', contentless_delete=1)",
    "INSERT INTO message_search(rowid, body) SELECT msg_id, body FROM messages WHERE kind = 1 AND recalled_by = 0",
    "CREATE TRIGGER IF NOT EXISTS message_search_insert AFTER INSERT ON messages \
     WHEN new.kind = 1 AND new.recalled_by = 0 \
     BEGIN INSERT INTO message_search(rowid, body) VALUES (new.msg_id, new.body); END",
    "CREATE TRIGGER IF NOT EXISTS message_search_update AFTER UPDATE OF kind, body, recalled_by ON messages \
     BEGIN DELETE FROM message_search WHERE rowid = old.msg_id; \
     INSERT INTO message_search(rowid, body) SELECT new.msg_id, new.body \
     WHERE new.kind = 1 AND new.recalled_by = 0; END",
    "CREATE TRIGGER IF NOT EXISTS message_search_delete AFTER DELETE ON messages \
     BEGIN DELETE FROM message_search WHERE rowid = old.msg_id; END",
];

#[async_trait::async_trait]
impl MigrationTrait for CreateSearch {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        let statements: &[&str] = match db.get_database_backend() {
            DatabaseBackend::Sqlite => &SQLITE,
            DatabaseBackend::Postgres => &[
                "CREATE INDEX IF NOT EXISTS messages_body_search ON messages \
                 USING GIN (to_tsvector('simple', body)) WHERE kind = 1",
            ],
            _ => &["CREATE FULLTEXT INDEX messages_body_search ON messages (body)"],
        };
        for statement in statements {
            db.execute_unprepared(statement).await?;
        }
        Ok(())
    }
}

/// SQLite's check: a trigger refusing a message whose seq is not above its
/// conversation's max seq (the batch raises the max after inserting its messages).
struct RefuseBehindOnSqlite;

impl MigrationName for RefuseBehindOnSqlite {
    fn name(&self) -> &str {
        "m20261206_000012_refuse_behind_on_sqlite"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for RefuseBehindOnSqlite {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DatabaseBackend::Sqlite {
            return Ok(());
        }
        manager
            .get_connection()
            .execute_unprepared(
                "CREATE TRIGGER messages_refuse_behind BEFORE INSERT ON messages \
                 WHEN NEW.seq <= (SELECT max_seq FROM conversations WHERE id = NEW.conversation_id) \
                 BEGIN SELECT RAISE(ABORT, 'seq is not above the conversation''s committed max seq; retry'); END",
            )
            .await?;
        Ok(())
    }
}

/// SQLite's search index off the commit path: a text message's insert notes its id in
/// `message_search_pending` (one row at the end of a small table) instead of writing the
/// FTS5 index's pages in the batch's transaction, and `search::SearchIndex` indexes what
/// is pending in transactions of its own. An edit or recall of a pending message leaves
/// the index alone: indexing takes the message as it stands then.
struct DeferSearchOnSqlite;

impl MigrationName for DeferSearchOnSqlite {
    fn name(&self) -> &str {
        "m20261207_000014_message_search_deferred"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for DeferSearchOnSqlite {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DatabaseBackend::Sqlite {
            return Ok(());
        }
        let db = manager.get_connection();
        for statement in [
            "CREATE TABLE IF NOT EXISTS message_search_pending (msg_id INTEGER PRIMARY KEY)",
            "DROP TRIGGER IF EXISTS message_search_insert",
            "CREATE TRIGGER message_search_insert AFTER INSERT ON messages \
             WHEN new.kind = 1 AND new.recalled_by = 0 \
             BEGIN INSERT INTO message_search_pending(msg_id) VALUES (new.msg_id); END",
            "DROP TRIGGER IF EXISTS message_search_update",
            "CREATE TRIGGER message_search_update AFTER UPDATE OF kind, body, recalled_by ON messages \
             WHEN old.msg_id NOT IN (SELECT msg_id FROM message_search_pending) \
             BEGIN DELETE FROM message_search WHERE rowid = old.msg_id; \
             INSERT INTO message_search(rowid, body) SELECT new.msg_id, new.body \
             WHERE new.kind = 1 AND new.recalled_by = 0; END",
        ] {
            db.execute_unprepared(statement).await?;
        }
        Ok(())
    }
}
