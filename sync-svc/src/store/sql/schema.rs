//! sync-svc's migrations, oldest first.

use sea_orm::{ConnectionTrait, DatabaseBackend};
use sea_orm_migration::{prelude::*, schema::*};

use super::{
    DeviceCursors, Inbox, SyncEvents,
    heads::InboxHeads,
    push::PushSettingsRows,
    reads::{ConversationStates, ReadStates},
    receipts::Receipts,
};
use crate::store::WEBHOOK_TABLE;

pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(imesh_kit::seq::Migration),
            Box::new(CreateInboxes),
            Box::new(CreateConversationState),
            Box::new(AddSettings),
            Box::new(CreateReceipts),
            Box::new(CreatePushSettings),
            Box::new(imesh_kit::ids::lease::Migration),
            Box::new(AddLastEdit),
            Box::new(AddRemovedSeq),
            Box::new(imesh_kit::outbox::Migration {
                table: WEBHOOK_TABLE,
                name: "m20261205_000009_webhook_outbox",
            }),
            Box::new(CreateInboxHeads),
        ]
    }

    fn migration_table_name() -> DynIden {
        Alias::new("sync_migrations").into_iden()
    }
}

struct CreateInboxes;

impl MigrationName for CreateInboxes {
    fn name(&self) -> &str {
        "m20261201_000002_inboxes"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for CreateInboxes {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(SyncEvents::Table)
                    .if_not_exists()
                    .col(big_integer(SyncEvents::Id).primary_key())
                    .col(string_len_uniq(SyncEvents::EventId, 191))
                    .col(blob(SyncEvents::Payload))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(Inbox::Table)
                    .if_not_exists()
                    .col(big_integer(Inbox::UserId))
                    .col(big_integer(Inbox::SyncSeq))
                    .col(big_integer(Inbox::EventPk))
                    .primary_key(Index::create().col(Inbox::UserId).col(Inbox::SyncSeq))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(DeviceCursors::Table)
                    .if_not_exists()
                    .col(big_integer(DeviceCursors::UserId))
                    .col(string_len(DeviceCursors::DeviceId, 64))
                    .col(big_integer(DeviceCursors::AckedSeq))
                    .primary_key(
                        Index::create()
                            .col(DeviceCursors::UserId)
                            .col(DeviceCursors::DeviceId),
                    )
                    .to_owned(),
            )
            .await
    }
}

/// Creates `inbox_heads`, starting each user's head at the highest seq ever handed out to
/// them: their newest entry, or the persisted ceiling of the counter that allocated their
/// seqs before heads existed (entries may have been purged since).
struct CreateInboxHeads;

impl MigrationName for CreateInboxHeads {
    fn name(&self) -> &str {
        "m20261206_000010_inbox_heads"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for CreateInboxHeads {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(InboxHeads::Table)
                    .if_not_exists()
                    .col(big_integer(InboxHeads::UserId).primary_key())
                    .col(big_integer(InboxHeads::LastSeq))
                    .to_owned(),
            )
            .await?;
        // The counters' keys read `{u:<user id>}:sync`.
        let integer = match manager.get_database_backend() {
            DatabaseBackend::MySql => "SIGNED",
            DatabaseBackend::Postgres => "BIGINT",
            _ => "INTEGER",
        };
        let seed = format!(
            "INSERT INTO inbox_heads (user_id, last_seq) \
             SELECT user_id, MAX(last_seq) FROM ( \
               SELECT user_id, MAX(sync_seq) AS last_seq FROM inbox GROUP BY user_id \
               UNION ALL \
               SELECT CAST(SUBSTR(name, 4, LENGTH(name) - 9) AS {integer}) AS user_id, \
                      ceiling AS last_seq \
               FROM seq_ceilings WHERE name LIKE '{{u:%}}:sync' \
             ) seeds GROUP BY user_id"
        );
        manager.get_connection().execute_unprepared(&seed).await?;
        Ok(())
    }
}

struct CreatePushSettings;

impl MigrationName for CreatePushSettings {
    fn name(&self) -> &str {
        "m20261203_000006_push_settings"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for CreatePushSettings {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        use PushSettingsRows as P;
        manager
            .create_table(
                Table::create()
                    .table(P::Table)
                    .if_not_exists()
                    .col(big_integer(P::UserId).primary_key())
                    .col(integer(P::QuietStartMin))
                    .col(integer(P::QuietEndMin))
                    .col(integer(P::UtcOffsetMin))
                    .col(small_integer(P::Preview))
                    .to_owned(),
            )
            .await
    }
}

struct CreateConversationState;

impl MigrationName for CreateConversationState {
    fn name(&self) -> &str {
        "m20261202_000003_conversation_state"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for CreateConversationState {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        use ConversationStates as C;
        use ReadStates as R;
        manager
            .create_table(
                Table::create()
                    .table(C::Table)
                    .if_not_exists()
                    .col(string_len(C::ConversationId, 64).primary_key())
                    .col(big_integer(C::MaxSeq))
                    .col(blob(C::LastEvent))
                    .col(big_integer(C::UpdatedAtMs))
                    .col(big_integer(C::MentionAllSeq))
                    .col(big_integer(C::LastRecalledBy))
                    .col(big_integer(C::LastRecalledAtMs))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(R::Table)
                    .if_not_exists()
                    .col(big_integer(R::UserId))
                    .col(string_len(R::ConversationId, 64))
                    .col(big_integer(R::ReadSeq))
                    .col(big_integer(R::MentionSeq))
                    .primary_key(Index::create().col(R::UserId).col(R::ConversationId))
                    .to_owned(),
            )
            .await
    }
}

struct AddSettings;

impl MigrationName for AddSettings {
    fn name(&self) -> &str {
        "m20261202_000004_conversation_settings"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for AddSettings {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let columns = [ReadStates::Pinned, ReadStates::Muted]
            .map(|column| boolean(column).default(false).to_owned());
        imesh_kit::sql::add_columns(manager, ReadStates::Table, columns).await
    }
}

struct AddLastEdit;

impl MigrationName for AddLastEdit {
    fn name(&self) -> &str {
        "m20261205_000007_conversation_last_edit"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for AddLastEdit {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let column = blob_null(ConversationStates::LastEdit);
        imesh_kit::sql::add_columns(manager, ConversationStates::Table, [column]).await
    }
}

struct AddRemovedSeq;

impl MigrationName for AddRemovedSeq {
    fn name(&self) -> &str {
        "m20261205_000008_conversation_removed_seq"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for AddRemovedSeq {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let column = big_integer(ReadStates::RemovedSeq).default(0).to_owned();
        imesh_kit::sql::add_columns(manager, ReadStates::Table, [column]).await
    }
}

struct CreateReceipts;

impl MigrationName for CreateReceipts {
    fn name(&self) -> &str {
        "m20261202_000005_receipts"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for CreateReceipts {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Receipts::Table)
                    .if_not_exists()
                    .col(string_len(Receipts::ConversationId, 64))
                    .col(big_integer(Receipts::Seq))
                    .col(big_integer(Receipts::SenderId))
                    .col(big_integer(Receipts::MapBound))
                    .col(big_integer(Receipts::ByteOffset))
                    .col(big_integer(Receipts::ByteLen))
                    .primary_key(
                        Index::create()
                            .col(Receipts::ConversationId)
                            .col(Receipts::Seq),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ux_receipts_slot")
                    .table(Receipts::Table)
                    .col(Receipts::ConversationId)
                    .col(Receipts::ByteOffset)
                    .unique()
                    .if_not_exists()
                    .to_owned(),
            )
            .await
    }
}
