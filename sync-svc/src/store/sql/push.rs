//! Offline-push settings in SQL: one `push_settings` row per user who changed the defaults,
//! and the muted flags of read states for the offline-push decision.

use std::collections::{HashMap, HashSet};

use imesh_kit::error::StoreError;
use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr};
use sea_orm_migration::prelude::*;

use super::reads::ReadStates;
use crate::domain::{Preview, PushSettings};

#[derive(Iden, Clone, Copy)]
pub(super) enum PushSettingsRows {
    #[iden = "push_settings"]
    Table,
    UserId,
    QuietStartMin,
    QuietEndMin,
    UtcOffsetMin,
    Preview,
}

/// A row's columns, the key first.
const COLUMNS: [PushSettingsRows; 5] = [
    PushSettingsRows::UserId,
    PushSettingsRows::QuietStartMin,
    PushSettingsRows::QuietEndMin,
    PushSettingsRows::UtcOffsetMin,
    PushSettingsRows::Preview,
];

pub(super) async fn push_settings(
    db: &DatabaseConnection,
    users: &[i64],
) -> Result<HashMap<i64, PushSettings>, StoreError> {
    use PushSettingsRows as P;
    if users.is_empty() {
        return Ok(HashMap::new());
    }
    let stmt = Query::select()
        .columns(COLUMNS)
        .from(P::Table)
        .and_where(Expr::col(P::UserId).is_in(users.iter().copied()))
        .to_owned();
    let rows = db.query_all(&stmt).await?;
    rows.iter()
        .map(|r| {
            let preview: i16 = r.try_get("", "preview")?;
            Ok((
                r.try_get("", "user_id")?,
                PushSettings {
                    quiet_start_min: r.try_get::<i32>("", "quiet_start_min")? as u16,
                    quiet_end_min: r.try_get::<i32>("", "quiet_end_min")? as u16,
                    utc_offset_min: r.try_get::<i32>("", "utc_offset_min")? as i16,
                    preview: Preview::from_code(preview),
                },
            ))
        })
        .collect::<Result<_, DbErr>>()
        .map_err(Into::into)
}

pub(super) async fn set_push_settings(
    db: &DatabaseConnection,
    user: i64,
    settings: &PushSettings,
) -> Result<(), StoreError> {
    use PushSettingsRows as P;
    let stmt = Query::insert()
        .into_table(P::Table)
        .columns(COLUMNS)
        .values_panic([
            user.into(),
            i32::from(settings.quiet_start_min).into(),
            i32::from(settings.quiet_end_min).into(),
            i32::from(settings.utc_offset_min).into(),
            settings.preview.code().into(),
        ])
        .on_conflict(
            OnConflict::column(P::UserId)
                .update_columns(COLUMNS[1..].iter().copied())
                .to_owned(),
        )
        .to_owned();
    db.execute(&stmt).await?;
    Ok(())
}

pub(super) async fn muted_among(
    db: &DatabaseConnection,
    of: &[(i64, String)],
) -> Result<HashSet<(i64, String)>, StoreError> {
    use ReadStates as R;
    if of.is_empty() {
        return Ok(HashSet::new());
    }
    let mut any = Condition::any();
    for (user, conversation) in of {
        any = any.add(
            Condition::all()
                .add(Expr::col(R::UserId).eq(*user))
                .add(Expr::col(R::ConversationId).eq(conversation.as_str())),
        );
    }
    let stmt = Query::select()
        .columns([R::UserId, R::ConversationId])
        .from(R::Table)
        .cond_where(Condition::all().add(any).add(Expr::col(R::Muted).eq(true)))
        .to_owned();
    let rows = db.query_all(&stmt).await?;
    rows.iter()
        .map(|r| Ok((r.try_get("", "user_id")?, r.try_get("", "conversation_id")?)))
        .collect::<Result<_, DbErr>>()
        .map_err(Into::into)
}
