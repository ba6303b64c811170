//! Full-text search of text messages with each database's own index: an FTS5 table kept by
//! triggers on SQLite (contentless: it keeps the index, not a second copy of the text), a
//! GIN index over `to_tsvector('simple', body)` on PostgreSQL, a FULLTEXT index on MySQL.
//! Words are split by each backend's rules (Unicode letters and digits; none of them
//! segments CJK text into words).

use imesh_kit::error::StoreError;
use sea_orm::{
    ColumnTrait, Condition, DatabaseBackend, DatabaseConnection, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect,
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
