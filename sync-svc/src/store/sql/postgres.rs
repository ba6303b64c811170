//! PostgreSQL's append in one statement ([`With`]), one round trip with no transaction
//! around it: the recipients' heads advanced (and locked until it ends, as
//! [`super::heads`] requires), the events, the entries numbered below the new heads, and
//! the states beside them.

use std::collections::{BTreeMap, HashMap};

use imesh_kit::sql::{Unnest, With};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr, Statement};

use super::heads;
use crate::domain::StoredEvent;

/// Appends `events`, whose recipients `counts` counts, with `beside` (statements that
/// touch no row twice, see [`super::reads::Marks::disjoint`]); returns each event's seqs
/// by recipient.
pub(super) async fn append(
    db: &DatabaseConnection,
    events: &[StoredEvent],
    counts: &BTreeMap<i64, i64>,
    beside: Vec<Statement>,
) -> Result<Vec<Vec<i64>>, DbErr> {
    let heads = Unnest::new()
        .bigints("user_id", counts.keys().copied())
        .bigints("last_seq", counts.values().copied());
    // Rows are taken in user order, so two appends lock shared heads in the same order.
    let advance = format!(
        "INSERT INTO inbox_heads AS h (user_id, last_seq) SELECT r.user_id, r.last_seq \
         FROM {} ORDER BY r.user_id ON CONFLICT (user_id) DO UPDATE \
         SET last_seq = h.last_seq + excluded.last_seq RETURNING h.user_id, h.last_seq",
        heads.table("r")
    );
    let with = With::new().numbered("heads", &advance, heads.into_values());
    let stored = Unnest::after(with.parameters())
        .bigints("id", events.iter().map(|e| e.id))
        .texts("event_id", events.iter().map(|e| e.event_id.clone()))
        .bytes("payload", events.iter().map(|e| e.payload.to_vec()));
    let with = with.numbered(
        "events",
        &stored.insert_sql("sync_events", ""),
        stored.into_values(),
    );
    // Each entry as how far below its recipient's new head it is: numbered from 1 per
    // recipient, in event order, the entry k of a recipient with n is n − k below.
    let (nth, _) = heads::number(events, HashMap::new());
    let entries: Vec<(i64, i64, i64)> = (events.iter().zip(&nth))
        .flat_map(|(e, nth)| {
            (e.recipients.iter().zip(nth)).map(|(user, k)| (*user, counts[user] - k, e.id))
        })
        .collect();
    let below = Unnest::after(with.parameters())
        .bigints("user_id", entries.iter().map(|(user, _, _)| *user))
        .bigints("below", entries.iter().map(|(_, below, _)| *below))
        .bigints("event_pk", entries.iter().map(|(_, _, event)| *event));
    let entries = format!(
        "INSERT INTO inbox (user_id, sync_seq, event_pk) \
         SELECT e.user_id, h.last_seq - e.below, e.event_pk FROM {} \
         JOIN heads h ON h.user_id = e.user_id",
        below.table("e")
    );
    let mut with = with.numbered("entries", &entries, below.into_values());
    for (i, statement) in beside.into_iter().enumerate() {
        with = with.part(&format!("beside{i}"), statement);
    }
    let advanced = db
        .query_all_raw(with.select("SELECT user_id, last_seq FROM heads"))
        .await?;
    let mut before = HashMap::with_capacity(advanced.len());
    for row in advanced {
        let user: i64 = row.try_get("", "user_id")?;
        let last: i64 = row.try_get("", "last_seq")?;
        before.insert(user, last - counts[&user]);
    }
    Ok(heads::number(events, before).0)
}
