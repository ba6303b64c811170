//! A conversation's messages become visible in seq order. Seqs are taken before the
//! commit (from counters shared by every replica), and one process's writer commits them
//! in the order taken; but two replicas writing one conversation could still commit seq
//! 11 before seq 10, and a reader paging "after seq 10" would step over 10 for good. So a
//! message whose seq is not above its conversation's committed max seq is refused and
//! stores nothing; its sender retries and gets a fresh seq. Replicas take a
//! conversation's sends in turn (gateways route them by conversation), so this only
//! refuses the rare send that raced a rerouting.
//!
//! On MySQL the writer locks the conversations' rows first ([`refuse_behind`]), so the
//! check and the commit are one step; on PostgreSQL one upsert locks, checks and raises
//! them (`super::postgres`). On SQLite, whose transactions hold its one write lock from
//! their start, a trigger checks each row as it is inserted, inside the writer's one-trip
//! script.

use std::collections::BTreeMap;

use imesh_kit::error::StoreError;
use sea_orm::ConnectionTrait;
use sea_orm_migration::prelude::*;

/// Locks the conversations' rows until `txn` ends and fails with `Unavailable` when one's
/// committed max seq is at or past the batch's first seq of it (`oldest`). A conversation
/// without a row gets one first: a row another writer is inserting is then waited for,
/// not missed.
pub(super) async fn refuse_behind(
    txn: &sea_orm::DatabaseTransaction,
    oldest: &BTreeMap<&str, i64>,
) -> Result<(), StoreError> {
    let ensure = imesh_kit::sql::upsert(
        txn.get_database_backend(),
        "conversations",
        &["id", "max_seq", "updated_at_ms"],
        &["id"],
        &[],
        oldest
            .keys()
            .map(|id| vec![(*id).into(), 0i64.into(), 0i64.into()])
            .collect(),
    );
    txn.execute_raw(ensure).await?;
    let stmt = Query::select()
        .columns([Alias::new("id"), Alias::new("max_seq")])
        .from(Alias::new("conversations"))
        .and_where(Expr::col(Alias::new("id")).is_in(oldest.keys().copied()))
        .order_by(Alias::new("id"), Order::Asc)
        .lock(LockType::Update)
        .to_owned();
    for row in txn.query_all(&stmt).await? {
        let id: String = row.try_get("", "id")?;
        let committed: i64 = row.try_get("", "max_seq")?;
        if let Some(first) = oldest.get(id.as_str())
            && *first <= committed
        {
            return Err(StoreError::Unavailable(anyhow::anyhow!(
                "conversation {id}: seq {first} is not above the committed {committed}; retry"
            )));
        }
    }
    Ok(())
}
